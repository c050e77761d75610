// Bulk conversions and names of posenc/core/half.hpp.
#include "posenc/core/half.hpp"

#include "posenc/core/error.hpp"

namespace posenc {

std::string name(kv_storage s) {
  switch (s) {
    case kv_storage::f32:
      return "f32";
    case kv_storage::f16:
      return "f16";
    case kv_storage::bf16:
      return "bf16";
  }
  return "?";
}

double unit_roundoff(kv_storage s) {
  switch (s) {
    case kv_storage::f32:
      return 0x1p-24;
    case kv_storage::f16:
      return 0x1p-11;
    case kv_storage::bf16:
      return 0x1p-8;
  }
  return 1;
}

void to_half(kv_storage s, std::span<const float> in, std::span<uint16_t> out) {
  if (s == kv_storage::f32) fail("to_half: storage must be f16 or bf16, got f32");
  if (in.size() != out.size())
    fail("to_half: out must have the size of in ({}), got {}", in.size(), out.size());
  if (s == kv_storage::f16) {  // in vectors, the same bits (src/core/half_simd.cpp)
    to_f16_simd(in.data(), out.data(), static_cast<int64_t>(in.size()));
    return;
  }
  for (size_t i = 0; i < in.size(); ++i) out[i] = float_to_half(s, in[i]);
}

void from_half(kv_storage s, std::span<const uint16_t> in, std::span<float> out) {
  if (s == kv_storage::f32) fail("from_half: storage must be f16 or bf16, got f32");
  if (in.size() != out.size())
    fail("from_half: out must have the size of in ({}), got {}", in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = half_to_float(s, in[i]);
}

}  // namespace posenc
