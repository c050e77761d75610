// python/src/common.hpp: argument handling shared by the binding files.
//
// Arrays cross the boundary without a copy when they are C-contiguous and of the element type
// the kernel runs in; otherwise the rules are (docs/python.md):
//   float data (x, q, k, v, tables): float32 or float64 only; anything else is a TypeError
//     naming the argument and the dtype. A non-contiguous array is copied for out-of-place
//     calls (the output is a new array anyway) and refused for inplace=True.
//   integer data (positions, offsets, cu_seqlens): any integer dtype, converted to int64 (a
//     copy of T or B values); floats or bools are a TypeError.
//   masks (key_padding): bool or uint8 holding 0/1.
// Messages follow the library's: the argument, the value received and what is allowed.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"

namespace posenc::py_bind {

namespace py = pybind11;

// "(2, 3, 4)", Python's own tuple spelling.
inline std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a.shape(i));
  }
  if (a.ndim() == 1) s += ",";
  return s + ")";
}

inline std::string dtype_name(const py::dtype& d) {
  return py::str(static_cast<const py::object&>(d)).cast<std::string>();
}
inline std::string dtype_str(const py::array& a) {
  return dtype_name(a.dtype());
}

[[noreturn]] inline void type_fail(const std::string& msg) {
  throw py::type_error(msg);
}

// The object as a NumPy array (no copy for an array; a list becomes one).
inline py::array as_array(py::handle obj, const char* name) {
  if (obj.is_none()) fail("{} must be an array, got None", name);
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  try {
    return py::module_::import("numpy").attr("asarray")(obj).cast<py::array>();
  } catch (const py::error_already_set&) {
    type_fail(std::string(name) + " must be an array, got " +
              py::str(py::type::of(obj)).cast<std::string>());
  }
}

inline bool is_f32(const py::array& a) {
  return a.dtype().is(py::dtype::of<float>());
}
inline bool is_f64(const py::array& a) {
  return a.dtype().is(py::dtype::of<double>());
}

// Float data: float32 or float64, else TypeError.
inline void require_float(const py::array& a, const char* name) {
  if (!is_f32(a) && !is_f64(a))
    type_fail(std::string(name) + " must be float32 or float64, got " + dtype_str(a));
}

inline bool c_contiguous(const py::array& a) {
  return (a.flags() & py::array::c_style) == py::array::c_style;
}

// A C-contiguous array of element type Real: `a` itself when it already is one (no copy), else
// a converted copy. Used for small tables and for inputs that are read only.
template <typename Real>
py::array_t<Real, py::array::c_style> contiguous_as(const py::array& a) {
  return py::array_t<Real, py::array::c_style | py::array::forcecast>::ensure(a);
}

// Integer data as int64 values (any integer dtype; bool and float are refused).
inline std::vector<int64_t> int_values(py::handle obj, const char* name) {
  const py::array a = as_array(obj, name);
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    type_fail(std::string(name) + " must hold integers (int64 or int32), got " + dtype_str(a));
  const auto c = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  return std::vector<int64_t>(c.data(), c.data() + c.size());
}

inline void require_ndim(const py::array& a, const char* name, std::initializer_list<int> ndims,
                         const char* expected) {
  for (int n : ndims)
    if (a.ndim() == n) return;
  fail("{} must have shape {}, got {}", name, expected, shape_str(a));
}

// Positions must be >= 0 (RoPE) or >= -1 (attention: -1 marks a padding slot).
inline void require_min(const std::vector<int64_t>& v, const char* name, int64_t lo) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < lo) fail("{} must be >= {}, got {} at index {}", name, lo, v[i], i);
}

// cu_seqlens: (B+1,) starting at 0, non-decreasing, ending at total.
inline void validate_cu_seqlens(const std::vector<int64_t>& cu, int64_t total, const char* name) {
  if (cu.size() < 2)
    fail("{} must have at least 2 entries (0, ..., total), got {}", name, cu.size());
  if (cu.front() != 0) fail("{} must start at 0, got {}", name, cu.front());
  for (size_t i = 1; i < cu.size(); ++i)
    if (cu[i] < cu[i - 1])
      fail("{} must be non-decreasing, got {} after {} at index {}", name, cu[i], cu[i - 1], i);
  if (cu.back() != total)
    fail("{} must end at the total token count {}, got {}", name, total, cu.back());
}

}  // namespace posenc::py_bind
