// python/src/compare.cpp: posenc._rope_compare, the library's rope_compare for posenc.compare
// (python/posenc/compare.py converts tensors and builds the CompareResult; the comparison, the
// tolerances and the hints are the library's, include/posenc/encodings/rope_compare.hpp).
#include <pybind11/stl.h>

#include <optional>
#include <utility>

#include "common.hpp"
#include "posenc/encodings/rope_compare.hpp"

namespace posenc::py_bind {

namespace {

// Float data of any float dtype as a C-contiguous float64 array (a copy unless it already is).
py::array_t<double, py::array::c_style> doubles(py::handle obj, const char* name) {
  const py::array a = as_array(obj, name);
  if (a.dtype().kind() != 'f')
    type_fail(std::string(name) + " must hold floats, got " + dtype_str(a));
  return contiguous_as<double>(a);
}

py::dict fit_dict(const rope_compare_fit& f) {
  py::dict d;
  d["angle"] = rope_angle_name(f.angle);
  d["hint"] = f.hint;
  d["detail"] = f.detail;
  d["rtol"] = f.rtol;
  d["eps"] = f.eps;
  d["max_error"] = f.max_error;
  d["max_ratio"] = f.max_ratio;
  d["sum_error"] = f.sum_error;
  d["identical"] = f.identical;
  d["compared"] = f.compared;
  d["ok"] = f.ok;
  return d;
}

}  // namespace

void bind_compare(py::module_& m) {
  m.def(
      "_rope_compare",
      [](py::handle actual, double actual_u, py::handle expected, double expected_u, py::handle x,
         py::handle positions, std::optional<rope_config> cfg, int64_t B, int64_t T, int64_t H,
         int64_t D, const std::string& layout, const std::string& angle, std::optional<double> rtol,
         double atol, std::optional<int64_t> seq_len) {
        rope_compare_input in;
        const auto a = doubles(actual, "actual");
        in.actual = {a.data(), static_cast<size_t>(a.size())};
        in.actual_u = actual_u;
        py::array_t<double, py::array::c_style> e, xs;
        if (!expected.is_none()) {
          e = doubles(expected, "expected");
          in.expected = {e.data(), static_cast<size_t>(e.size())};
        }
        in.expected_u = expected_u;
        if (!x.is_none()) {
          xs = doubles(x, "x");
          in.x = {xs.data(), static_cast<size_t>(xs.size())};
        }
        std::vector<int64_t> pos;
        if (!positions.is_none()) pos = int_values(positions, "positions");
        in.positions = pos;
        in.cfg = std::move(cfg);
        in.B = B, in.T = T, in.H = H, in.D = D;
        in.layout = rope_layout_from_name(layout, "layout");
        in.angle = rope_angle_from_name(angle, "angle");
        in.rtol = rtol;
        in.atol = atol;
        if (seq_len && *seq_len < 0) fail("seq_len must be >= 0, got {}", *seq_len);
        in.seq_len = seq_len.value_or(-1);
        rope_compare_result r;
        {
          py::gil_scoped_release nogil;
          r = rope_compare(in);
        }
        py::dict d;
        d["ok"] = r.ok;
        d["verdict"] = r.verdict;
        d["reference"] = rope_angle_name(r.reference);
        d["max_error"] = r.max_error;
        d["max_ratio"] = r.max_ratio;
        d["tolerance"] = r.tolerance;
        d["rtol"] = r.rtol;
        d["atol"] = r.atol;
        d["angle_rtol"] = r.angle_rtol;
        d["worst"] = r.worst;
        d["worst_position"] =
            r.worst_position ? py::object(py::int_(*r.worst_position)) : py::none();
        d["worst_pair"] = r.worst_pair ? py::object(py::int_(*r.worst_pair)) : py::none();
        d["ratio_by_t"] =
            py::array_t<double>(static_cast<py::ssize_t>(r.ratio_by_t.size()), r.ratio_by_t.data());
        d["ratio_by_pair"] =
            r.ratio_by_pair.empty()
                ? py::object(py::none())
                : py::object(py::array_t<double>(static_cast<py::ssize_t>(r.ratio_by_pair.size()),
                                                 r.ratio_by_pair.data()));
        py::list pipes;
        for (const auto& p : r.pipelines) pipes.append(fit_dict(p));
        d["pipelines"] = pipes;
        d["match"] = r.match ? py::object(fit_dict(*r.match)) : py::none();
        py::list hints;
        for (const auto& h : r.hints) hints.append(fit_dict(h));
        d["hint_fits"] = hints;
        d["hints"] = rope_compare_hints(r);
        d["text"] = rope_compare_text(r);
        return d;
      },
      py::arg("actual"), py::arg("actual_u"), py::arg("expected"), py::arg("expected_u"),
      py::arg("x"), py::arg("positions"), py::arg("cfg"), py::arg("B"), py::arg("T"), py::arg("H"),
      py::arg("D"), py::arg("layout") = "half", py::arg("angle") = "exact",
      py::arg("rtol") = py::none(), py::arg("atol") = 0.0, py::arg("seq_len") = py::none(),
      "rope_compare (include/posenc/encodings/rope_compare.hpp) on (B, T, H, D) float data; "
      "posenc.compare is the documented entry point.");
}

}  // namespace posenc::py_bind
