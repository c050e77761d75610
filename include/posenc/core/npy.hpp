// posenc/core/npy.hpp: NumPy .npy files (format versions 1.0, 2.0 and 3.0).
//
// Supported dtypes: little-endian float32 ('<f4'), float64 ('<f8'), float16 ('<f2'), int64
// ('<i8'), int32 ('<i4'), uint16 ('<u2', also how bfloat16 data travels: NumPy has no bfloat16),
// uint8 ('|u1') and bool ('|b1'); C order only. Anything else (wrong magic,
// Fortran order, big-endian, object arrays, a header that does not parse, data shorter or
// longer than the shape says) throws io_error naming the path and what was wrong.
// Writes are atomic (see file.hpp): a failed write leaves no partial file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace posenc {

enum class dtype { f32, f64, i64, i32, u8, b1, f16, u16 };

// "float32", "float64", "int64", "int32", "uint8", "bool", "float16", "uint16".
const char* dtype_name(dtype t);
size_t dtype_size(dtype t);

// An n-dimensional array as read from or written to a .npy file. data holds
// product(shape) * dtype_size(type) bytes in C order.
struct npy_array {
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;

  int64_t numel() const;
  // Typed access; throws invalid_argument if T does not match `type`.
  template <typename T>
  T* as();
  template <typename T>
  const T* as() const;
  // The 16-bit words of a float16 or uint16 array (throws invalid_argument for other dtypes).
  const uint16_t* bits16() const;
  // Converts any numeric dtype to double (bools and uint8 to 0/1 and 0..255; float16 exactly).
  std::vector<double> to_f64() const;
  // Converts an integer dtype (int64, int32, uint16, uint8, bool) to int64; throws for floats.
  std::vector<int64_t> to_i64() const;
  // "(5, 3, 64)".
  std::string shape_str() const;
};

template <typename T>
npy_array make_npy(std::vector<int64_t> shape);  // zero-filled, T in {float, double, int64_t,
                                                 // int32_t, uint16_t, uint8_t, bool}

npy_array read_npy(const std::string& path);
// Parses .npy bytes; `name` is used in error messages.
npy_array parse_npy(const std::vector<std::byte>& bytes, const std::string& name);
void write_npy(const std::string& path, const npy_array& a);
std::vector<std::byte> serialize_npy(const npy_array& a);

}  // namespace posenc
