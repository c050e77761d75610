// SIMD GELU for the lab's MLP (Highway dynamic dispatch; compiled once per target through
// hwy/foreach_target.h). The tanh approximation of Hendrycks and Gimpel (2016), sec. 2:
//   gelu(u) = 0.5 u (1 + tanh(z)),  z = sqrt(2/pi) (u + 0.044715 u^3)
//   dgelu/du = 0.5 (1 + t) + 0.5 u (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 u^2),  t = tanh(z)
// tanh is Highway's contrib Tanh (a few ulp; hwy/contrib/math/math-inl.h), the same function
// in the forward and the backward, so the finite-difference checks see one consistent GELU.
// A tail shorter than a vector runs through the same vector code on a padded copy, so every
// element gets the same arithmetic. Libm's scalar tanhf was a quarter of the training time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/model/ops_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
//
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr double kGeluA = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluB = 0.044715;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluTanh(D d, V x) {
  const V z = hn::Mul(hn::Set(d, kGeluA),
                      hn::Add(x, hn::Mul(hn::Set(d, kGeluB), hn::Mul(hn::Mul(x, x), x))));
  return hn::Tanh(d, z);
}

// Runs body(d, i) on every full vector at i, then on a padded copy of the tail.
template <typename T, class Body>
HWY_INLINE void ForVectors(int64_t n, const T* const* in, int nin, T* out, bool accumulate,
                           Body body) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::Vec<decltype(d)> args[2];
    for (int k = 0; k < nin; ++k) args[k] = hn::LoadU(d, in[k] + i);
    auto r = body(d, args);
    if (accumulate) r = hn::Add(hn::LoadU(d, out + i), r);
    hn::StoreU(r, d, out + i);
  }
  if (i == n) return;
  HWY_ALIGN T buf[2][HWY_MAX_BYTES / sizeof(T)] = {};
  HWY_ALIGN T res[HWY_MAX_BYTES / sizeof(T)] = {};
  const int64_t m = n - i;
  for (int k = 0; k < nin; ++k) std::copy(in[k] + i, in[k] + n, buf[k]);
  std::copy(out + i, out + n, res);
  hn::Vec<decltype(d)> args[2];
  for (int k = 0; k < nin; ++k) args[k] = hn::Load(d, buf[k]);
  auto r = body(d, args);
  if (accumulate) r = hn::Add(hn::Load(d, res), r);
  hn::Store(r, d, res);
  std::copy(res, res + m, out + i);
}

template <typename T>
void GeluForwardT(const T* u, T* y, int64_t n) {
  const T* in[1] = {u};
  ForVectors<T>(n, in, 1, y, false, [](auto d, auto* a) {
    const auto x = a[0];
    const auto t = GeluTanh(d, x);
    return hn::Mul(hn::Mul(hn::Set(d, T(0.5)), x), hn::Add(hn::Set(d, T(1)), t));
  });
}

template <typename T>
void GeluBackwardT(const T* u, const T* dy, T* du, int64_t n) {
  const T* in[2] = {u, dy};
  ForVectors<T>(n, in, 2, du, true, [](auto d, auto* a) {
    const auto x = a[0];
    const auto t = GeluTanh(d, x);
    const auto half = hn::Set(d, T(0.5)), one = hn::Set(d, T(1));
    const auto x2 = hn::Mul(x, x);
    const auto dz =
        hn::Mul(hn::Set(d, T(kGeluA)), hn::Add(one, hn::Mul(hn::Set(d, T(3 * kGeluB)), x2)));
    const auto g = hn::Add(hn::Mul(half, hn::Add(one, t)),
                           hn::Mul(hn::Mul(hn::Mul(half, x), hn::Sub(one, hn::Mul(t, t))), dz));
    return hn::Mul(a[1], g);
  });
}

void GeluForwardF32(const float* u, float* y, int64_t n) {
  GeluForwardT(u, y, n);
}
void GeluForwardF64(const double* u, double* y, int64_t n) {
  GeluForwardT(u, y, n);
}
void GeluBackwardF32(const float* u, const float* dy, float* du, int64_t n) {
  GeluBackwardT(u, dy, du, n);
}
void GeluBackwardF64(const double* u, const double* dy, double* du, int64_t n) {
  GeluBackwardT(u, dy, du, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace posenc {
HWY_EXPORT(GeluForwardF32);
HWY_EXPORT(GeluForwardF64);
HWY_EXPORT(GeluBackwardF32);
HWY_EXPORT(GeluBackwardF64);

namespace detail {
// Declared where they are used (ops.cpp).
void gelu_forward_simd(const float* u, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluForwardF32)(u, y, n);
}
void gelu_forward_simd(const double* u, double* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluForwardF64)(u, y, n);
}
void gelu_backward_simd(const float* u, const float* dy, float* du, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluBackwardF32)(u, dy, du, n);
}
void gelu_backward_simd(const double* u, const double* dy, double* du, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluBackwardF64)(u, dy, du, n);
}
}  // namespace detail
}  // namespace posenc
#endif
