// python/src/tables.cpp: sinusoidal tables, learned tables, ALiBi slopes and biases, T5 buckets
// and biases.
#include <pybind11/stl.h>

#include <cstring>

#include "common.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/learned.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "posenc/positions/positions.hpp"

namespace posenc::py_bind {

namespace {

// Positions as an int or a (N,) integer array: an int n means 0 .. n-1.
std::vector<int64_t> positions_arg(py::handle positions, const char* name) {
  if (py::isinstance<py::int_>(positions)) {
    const int64_t n = positions.cast<int64_t>();
    if (n < 0) fail("{} must be >= 0 (a count) or an array of positions, got {}", name, n);
    return positions_fresh(n);
  }
  const py::array a = as_array(positions, name);
  if (a.ndim() != 1) fail("{} must have shape (N,), got {}", name, shape_str(a));
  return int_values(a, name);
}

py::dtype dtype_arg(const py::object& dtype) {
  py::dtype dt = py::dtype::from_args(dtype);  // not const: the return moves it
  if (!dt.is(py::dtype::of<double>()) && !dt.is(py::dtype::of<float>()))
    throw py::type_error("dtype must be float32 or float64, got " + dtype_name(dt));
  return dt;
}

std::vector<double> slopes_arg(py::handle slopes) {
  const py::array a = as_array(slopes, "slopes");
  if (a.ndim() != 1) fail("slopes must have shape (H,), got {}", shape_str(a));
  require_float(a, "slopes");
  const auto c = contiguous_as<double>(a);
  return std::vector<double>(c.data(), c.data() + c.size());
}

t5_bias_table t5_table_arg(py::handle table, int64_t max_distance, bool bidirectional) {
  const py::array a = as_array(table, "table");
  require_float(a, "table");
  if (a.ndim() != 2) fail("table must have shape (num_buckets, H), got {}", shape_str(a));
  t5_bias_table t;
  t.params = {a.shape(0), max_distance, bidirectional};
  t.heads = a.shape(1);
  const auto c = contiguous_as<float>(a);
  t.weights.assign(c.data(), c.data() + c.size());
  t5_validate(t);
  return t;
}

// Binds sinusoidal_table, alibi_slopes and alibi_bias.
void bind_sinusoidal_alibi(py::module_& m) {
  m.def(
      "sinusoidal_table",
      [](py::handle positions, int64_t width, double base, const std::string& layout,
         const std::string& denominator, const py::object& dtype) {
        sinusoidal_params p;
        p.width = width;
        p.base = base;
        p.layout = parse_sin_layout(layout, "layout");
        p.denominator = parse_sin_denominator(denominator, "denominator");
        sinusoidal_validate(p);
        const auto pos = positions_arg(positions, "positions");
        const py::dtype dt = dtype_arg(dtype);
        const auto N = static_cast<py::ssize_t>(pos.size());
        checked_bytes("sinusoidal_table", N, width, 1, dt.itemsize());
        auto run = [&](auto tag) {
          using Real = decltype(tag);
          py::array_t<Real> out({N, static_cast<py::ssize_t>(width)});
          std::span<Real> o(out.mutable_data(), static_cast<size_t>(out.size()));
          {
            py::gil_scoped_release nogil;
            sinusoidal_table(p, pos, o);
          }
          return out;
        };
        if (dt.is(py::dtype::of<double>())) return py::array(run(double{}));
        return py::array(run(float{}));
      },
      py::arg("positions"), py::kw_only(), py::arg("width"), py::arg("base") = 10000.0,
      py::arg("layout") = "interleaved", py::arg("denominator") = "width",
      py::arg("dtype") = py::dtype::of<double>(),
      R"doc(The fixed sinusoidal table (Vaswani et al. 2017), (N, width) in dtype (float64 or float32).

positions: an int N (positions 0 .. N-1) or (N,) integers. width: even, >= 2. Pair i has
frequency base^(-2i / width) (denominator "width") or base^(-i / (width/2 - 1)) ("half-minus-one",
tensor2tensor's get_timing_signal_1d). layout "interleaved": [sin p w0, cos p w0, sin p w1, ...];
"halves": [sin p w0 .. sin p w_{width/2-1} | cos p w0 ..].)doc");

  m.def(
      "alibi_slopes",
      [](int64_t n_heads, double max_bias, const std::string& convention) {
        const auto s = alibi_slopes(n_heads, max_bias, alibi_convention_from_name(convention));
        py::array_t<double> out(static_cast<py::ssize_t>(s.size()));
        std::memcpy(out.mutable_data(), s.data(), s.size() * sizeof(double));
        return out;
      },
      py::arg("n_heads"), py::kw_only(), py::arg("max_bias") = 8.0, py::arg("convention") = "press",
      R"doc(ALiBi slopes (n_heads,) float64 (Press et al. 2022).

convention "press": the paper's geometric sequence 2^(-max_bias k / P), k = 1..P for P = n_heads a
power of two, else the first P = 2^floor(log2 n_heads) and the odd terms of the sequence for 2P
(its reference code); "mpt": MPT's, the 2P sequence's terms taken [1::2] then [0::2]; "geometric":
2^(-max_bias k / n_heads) for every n_heads. Equal for a power of two.)doc");

  m.def(
      "alibi_bias",
      [](py::handle slopes, py::handle q_positions, py::handle k_positions, bool causal,
         const py::object& dtype) {
        const auto s = slopes_arg(slopes);
        const auto q = positions_arg(q_positions, "q_positions");
        const auto k = positions_arg(k_positions, "k_positions");
        const py::dtype dt = dtype_arg(dtype);
        const auto H = static_cast<py::ssize_t>(s.size()), T = static_cast<py::ssize_t>(q.size()),
                   S = static_cast<py::ssize_t>(k.size());
        checked_bytes("alibi_bias", H, T, S, dt.itemsize());
        if (dt.is(py::dtype::of<float>())) {
          py::array_t<float> out({H, T, S});
          float* o = out.mutable_data();
          py::gil_scoped_release nogil;
          alibi_bias_dense(s, q, k, causal, o);
          return py::array(out);
        }
        py::array_t<double> out({H, T, S});
        double* o = out.mutable_data();
        py::gil_scoped_release nogil;
        alibi_bias_dense(s, q, k, causal, o);
        return py::array(out);
      },
      py::arg("slopes"), py::arg("q_positions"), py::arg("k_positions"), py::kw_only(),
      py::arg("causal") = true, py::arg("dtype") = py::dtype::of<float>(),
      R"doc(The dense ALiBi bias (H, T, S) in dtype (float32 or float64) for slopes m (H,) at query
positions i and key positions j (each an int N, meaning 0 .. N-1, or (N,) integers): m_h (j - i)
when causal (the signed distance; attention's causal mask removes the keys after the query),
else -m_h |i - j|. posenc.attention adds the same bias without forming this tensor.)doc");
}

// Binds t5_buckets and t5_bias.
void bind_t5(py::module_& m) {
  m.def(
      "t5_buckets",
      [](py::handle offsets, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
        const py::array a = as_array(offsets, "offsets");
        const auto r = int_values(a, "offsets");
        t5_validate(t5_params{num_buckets, max_distance, bidirectional});
        py::array_t<int64_t> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
        int64_t* o = out.mutable_data();
        py::gil_scoped_release nogil;
        for (size_t i = 0; i < r.size(); ++i)
          o[i] = t5_bucket(r[i], bidirectional, num_buckets, max_distance);
        return out;
      },
      py::arg("offsets"), py::kw_only(), py::arg("bidirectional") = true,
      py::arg("num_buckets") = 32, py::arg("max_distance") = 128,
      R"doc(T5's relative-position buckets (Raffel et al. 2020), int64 in the shape of offsets
(integers j - i, key minus query). Half the buckets (of each sign when bidirectional) are exact
distances, the rest logarithmic up to max_distance, past which the last bucket is used; not
bidirectional: keys after the query share bucket 0.)doc");

  m.def(
      "t5_bias",
      [](py::handle table, py::handle q_positions, py::handle k_positions, bool bidirectional,
         int64_t max_distance) {
        const auto t = t5_table_arg(table, max_distance, bidirectional);
        const auto q = positions_arg(q_positions, "q_positions");
        const auto k = positions_arg(k_positions, "k_positions");
        const auto H = static_cast<py::ssize_t>(t.heads), T = static_cast<py::ssize_t>(q.size()),
                   S = static_cast<py::ssize_t>(k.size());
        checked_bytes("t5_bias", H, T, S, sizeof(float));
        py::array_t<float> out({H, T, S});
        float* o = out.mutable_data();
        py::gil_scoped_release nogil;
        t5_bias_dense(t, q, k, o);
        return out;
      },
      py::arg("table"), py::arg("q_positions"), py::arg("k_positions"), py::kw_only(),
      py::arg("bidirectional") = true, py::arg("max_distance") = 128,
      R"doc(The dense T5 bias (H, T, S) float32: table[bucket(j - i), h] for a table (num_buckets,
H) (float32 or float64, read as float32) at query positions i and key positions j (an int N or
(N,) integers); buckets as t5_buckets.)doc");
}

// Binds the learned-table helpers (_learned_load, _learned_lookup, _learned_save).
void bind_learned(py::module_& m) {
  m.def(
      "_learned_load",
      [](const std::string& path) {
        learned_table t;
        {
          py::gil_scoped_release nogil;
          t = learned_load(path);
        }
        py::array_t<float> out({t.rows, t.width});
        std::memcpy(out.mutable_data(), t.weights.data(), t.weights.size() * sizeof(float));
        return out;
      },
      py::arg("path"));
  // LearnedTable.lookup: the library's learned_lookup (its errors name the position and the
  // table's rows); positions of any integer shape, rows gathered in that shape.
  m.def(
      "_learned_lookup",
      [](py::handle weights, py::handle positions) {
        const py::array w = as_array(weights, "weights");
        if (!is_f32(w))
          type_fail("weights must be float32 (the file format's dtype), got " + dtype_str(w));
        if (w.ndim() != 2) fail("weights must have shape (rows, width), got {}", shape_str(w));
        const py::array pa = as_array(positions, "positions");
        const std::vector<int64_t> pos = int_values(positions, "positions");
        learned_table t;
        t.rows = w.shape(0);
        t.width = w.shape(1);
        const auto c = contiguous_as<float>(w);
        t.weights.assign(c.data(), c.data() + c.size());
        std::vector<py::ssize_t> shape(pa.shape(), pa.shape() + pa.ndim());
        shape.push_back(t.width);
        py::array_t<float> out(shape);
        learned_lookup(t, pos,
                       std::span<float>(out.mutable_data(), static_cast<size_t>(out.size())));
        return out;
      },
      py::arg("weights"), py::arg("positions"));
  m.def(
      "_learned_save",
      [](const std::string& path, py::handle weights) {
        const py::array a = as_array(weights, "weights");
        if (!is_f32(a))
          type_fail("weights must be float32 (the file format's dtype), got " + dtype_str(a));
        if (a.ndim() != 2) fail("weights must have shape (rows, width), got {}", shape_str(a));
        learned_table t;
        t.rows = a.shape(0);
        t.width = a.shape(1);
        const auto c = contiguous_as<float>(a);
        t.weights.assign(c.data(), c.data() + c.size());
        py::gil_scoped_release nogil;
        learned_save(path, t);
      },
      py::arg("path"), py::arg("weights"));
}

}  // namespace

void bind_tables(py::module_& m) {
  bind_sinusoidal_alibi(m);
  bind_t5(m);
  bind_learned(m);
}

}  // namespace posenc::py_bind
