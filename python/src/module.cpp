// python/src/module.cpp: the posenc._posenc extension module (pybind11). The package
// python/posenc/__init__.py re-exports these names with their documentation; posenc.torch
// builds autograd Functions on them.
//
// Every kernel runs with the GIL released (py::gil_scoped_release), so Python threads calling
// posenc at once run in parallel. Errors: posenc::invalid_argument -> ValueError (its message
// names the argument, the value and what is allowed, as in the CLI); wrong types -> TypeError;
// posenc::io_error -> OSError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/core/threads.hpp"

namespace posenc::py_bind {
void bind_rope(py::module_& m);
void bind_tables(py::module_& m);
void bind_attention(py::module_& m);
void bind_compare(py::module_& m);
void bind_kv_cache(py::module_& m);
}  // namespace posenc::py_bind

PYBIND11_MODULE(_posenc, m) {
  namespace py = pybind11;
  using namespace posenc::py_bind;
  m.doc() = "posenc: positional encodings for transformer attention (C++ core)";

  // p by value: pybind11 takes the translator as a void (*)(std::exception_ptr).
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const posenc::io_error& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });

  m.def("set_num_threads", &posenc::set_num_threads, py::arg("n"),
        "Threads posenc's kernels use when called from this Python thread (0 = default: "
        "POSENC_THREADS, else OpenMP's).");
  m.def("bf16_products_native", &posenc::attention_bf16_native,
        "True when this CPU runs attention(products=\"bf16\") with vdpbf16ps (AVX512_BF16) on "
        "the dispatched AVX-512 target; False: those calls run float32 products (the same "
        "bound).");
  m.def("num_threads", &posenc::num_threads,
        "Threads posenc's kernels use when called from this Python thread.");

  bind_rope(m);
  bind_tables(m);
  bind_attention(m);
  bind_compare(m);
  bind_kv_cache(m);
}
