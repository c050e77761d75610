// RoPE SIMD kernels (Highway dynamic dispatch: one binary, best target at run time; this file is
// compiled once per target through hwy/foreach_target.h):
//   - the rotate loop over H heads of one token, both layouts, float32 and float64, any R <= D
//     (partial rotary: channels [R, D) are never touched);
//   - the exact-mode cos/sin row: CosSinExact of src/core/angle_simd-inl.h (the exact
//     reduction of src/core/angle.hpp lane-wise, then sine and cosine together of the reduced
//     angle in double).
// rope.cpp calls these through the detail:: entry points at the bottom and keeps the plain loops
// (and the binary128 reference) as the specification they are tested against.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/encodings/rope_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "src/core/angle_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------------------------------------
// Rotate: forward and inverse side by side (Su et al. 2021, eq. 34, one 2x2 rotation per pair).
// ---------------------------------------------------------------------------------------------

// Both layouts compute every output as one multiply-add of the same operands,
//   u' = fma(u, c, -(v s)),  v' = fma(u, s, v c)      (forward)
//   u' = fma(u, c, v s),     v' = fma(v, c, -(u s))   (inverse)
// in the vector body and in the tails, so half and interleaved agree bit for bit under the
// channel permutation (rope_checks "layouts_agree"). The forward fuses the products ggml's CPU
// rotation fuses where it is compiled with FMA (x86-64 builds: GCC contracts x0 c - x1 s and
// x0 s + x1 c into fma(x0, c, -(x1 s)) and fma(x0, s, x1 c)), so that with the same cos/sin
// (--angle ggml_f32) the outputs are ggml's bit for bit (docs/conventions.md, measured). Fma1 is
// the target's own MulAdd on one lane: fused where the target has FMA, multiply-then-add where it
// emulates it, exactly as the vector body.
template <typename T>
HWY_INLINE T Fma1(T a, T b, T c) {
  const hn::CappedTag<T, 1> d1;
  return hn::GetLane(hn::MulAdd(hn::Set(d1, a), hn::Set(d1, b), hn::Set(d1, c)));
}

// half: x_h = [u_0 .. u_{n-1} | v_0 .. v_{n-1} | pass], pair i = (u_i, v_i), n = R/2.
//   c, s: (n,); x: H heads, head h at x + h * stride. Vectors run over i.
template <bool kInverse, typename T>
HWY_INLINE void RotateHalfT(int64_t n, const T* HWY_RESTRICT c, const T* HWY_RESTRICT s, T* x,
                            int64_t H, int64_t stride) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t h = 0; h < H; ++h) {
    T* HWY_RESTRICT u = x + h * stride;
    T* HWY_RESTRICT v = u + n;
    int64_t i = 0;
    for (; i + N <= n; i += N) {
      const auto cv = hn::LoadU(d, c + i), sv = hn::LoadU(d, s + i);
      const auto a = hn::LoadU(d, u + i), b = hn::LoadU(d, v + i);
      if constexpr (!kInverse) {
        // forward: u' = u c - v s; v' = v c + u s
        hn::StoreU(hn::MulSub(a, cv, hn::Mul(b, sv)), d, u + i);
        hn::StoreU(hn::MulAdd(a, sv, hn::Mul(b, cv)), d, v + i);
      } else {
        // backward of "u' = u c - v s; v' = v c + u s": the transpose, sine negated.
        hn::StoreU(hn::MulAdd(a, cv, hn::Mul(b, sv)), d, u + i);
        hn::StoreU(hn::MulSub(b, cv, hn::Mul(a, sv)), d, v + i);
      }
    }
    for (; i < n; ++i) {
      const T a = u[i], b = v[i];
      if constexpr (!kInverse) {
        u[i] = Fma1(a, c[i], -(b * s[i]));
        v[i] = Fma1(a, s[i], b * c[i]);
      } else {
        u[i] = Fma1(a, c[i], b * s[i]);
        v[i] = Fma1(b, c[i], -(a * s[i]));
      }
    }
  }
}

// interleaved: x_h = [u_0 v_0 | u_1 v_1 | ... | pass], pair i = (x[2i], x[2i+1]).
// Forward: with U = [u_0 u_0 u_1 u_1 ..] and V = [v_0 v_0 v_1 v_1 ..] (DupEven, DupOdd of x),
// p = [c_0 s_0 c_1 s_1 ..] and q = [-s_0 c_0 -s_1 c_1 ..], y = fma(U, p, V q) gives
//   y[2i] = fma(u, c, -(v s)),  y[2i+1] = fma(u, s, v c)
// the half layout's fused products, one multiply and one multiply-add per vector as there.
// Inverse: with ce = [c_0 c_0 ..] and se = [s_0 -s_0 ..], y = fma(x, ce, swap_pairs(x) se) gives
//   y[2i] = fma(u, c, v s),  y[2i+1] = fma(v, c, -(u s))       (the transpose)
// as the half layout's inverse. The tables (p, q or ce, se) are expanded on the stack in chunks
// of kChunk pairs (no allocation) and reused by all H heads of the token.
// [x_1 x_1 x_3 x_3 ..]; on a 1-lane target (HWY_SCALAR, which has no DupOdd) never called: the
// vector loop below needs pairs of lanes.
template <class V>
HWY_INLINE V DupOddLanes(V a) {
#if HWY_TARGET == HWY_SCALAR
  return a;
#else
  return hn::DupOdd(a);
#endif
}

template <bool kInverse, typename T>
HWY_INLINE void RotateInterleavedT(int64_t n, const T* HWY_RESTRICT c, const T* HWY_RESTRICT s,
                                   T* x, int64_t H, int64_t stride) {
  constexpr int64_t kChunk = 128;  // pairs per chunk: 2 x 256 T of stack
  HWY_ALIGN T ta[2 * kChunk];      // forward p, inverse ce
  HWY_ALIGN T tb[2 * kChunk];      // forward q, inverse se
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t m = std::min(kChunk, n - j0), w = 2 * m;
    for (int64_t i = 0; i < m; ++i) {
      const T ci = c[j0 + i], si = s[j0 + i];
      if constexpr (kInverse) {
        ta[2 * i] = ta[2 * i + 1] = ci;
        tb[2 * i] = si;
        tb[2 * i + 1] = -si;
      } else {
        ta[2 * i] = ci;
        ta[2 * i + 1] = si;
        tb[2 * i] = -si;
        tb[2 * i + 1] = ci;
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      T* HWY_RESTRICT y = x + h * stride + 2 * j0;
      int64_t i = 0;
      // Pairs must not straddle vectors: the vector loop needs N even (a 1-lane target, HWY_SCALAR,
      // takes the pair loop below for everything).
      for (; N >= 2 && i + N <= w; i += N) {
        const auto a = hn::LoadU(d, y + i);
        const auto pa = hn::Load(d, ta + i), pb = hn::Load(d, tb + i);
        if constexpr (kInverse)
          hn::StoreU(hn::MulAdd(a, pa, hn::Mul(hn::Reverse2(d, a), pb)), d, y + i);
        else
          hn::StoreU(hn::MulAdd(hn::DupEven(a), pa, hn::Mul(DupOddLanes(a), pb)), d, y + i);
      }
      for (; i < w; i += 2) {  // whole pairs: w is even, and so is i
        const T a = y[i], b = y[i + 1];
        if constexpr (kInverse) {
          y[i] = Fma1(a, ta[i], b * tb[i]);
          y[i + 1] = Fma1(b, ta[i + 1], a * tb[i + 1]);
        } else {
          y[i] = Fma1(a, ta[i], b * tb[i]);
          y[i + 1] = Fma1(a, ta[i + 1], b * tb[i + 1]);
        }
      }
    }
  }
}

template <typename T>
HWY_INLINE void RotateT(int layout_interleaved, int64_t R, const T* c, const T* s, T* x, int64_t H,
                        int64_t stride, bool inverse) {
  const int64_t n = R / 2;
  if (layout_interleaved) {
    if (inverse)
      RotateInterleavedT<true>(n, c, s, x, H, stride);
    else
      RotateInterleavedT<false>(n, c, s, x, H, stride);
  } else {
    if (inverse)
      RotateHalfT<true>(n, c, s, x, H, stride);
    else
      RotateHalfT<false>(n, c, s, x, H, stride);
  }
}

void RotateF32(int layout_interleaved, int64_t R, const float* c, const float* s, float* x,
               int64_t H, int64_t stride, bool inverse) {
  RotateT(layout_interleaved, R, c, s, x, H, stride, inverse);
}

void RotateF64(int layout_interleaved, int64_t R, const double* c, const double* s, double* x,
               int64_t H, int64_t stride, bool inverse) {
  RotateT(layout_interleaved, R, c, s, x, H, stride, inverse);
}

// ---------------------------------------------------------------------------------------------
// Exact-mode cos/sin row
// ---------------------------------------------------------------------------------------------

// c[i] = scale * cos(pos w[i]), s[i] = scale * sin(pos w[i]), i < n, pos an integer <= 2^53:
// CosSinExact lane-wise (src/core/angle_simd-inl.h: the exact reduction, SinCosReduced and the
// first-order correction), |c/scale - cos(p w)|, |s/scale - sin(p w)| <= 2.5 * 2^-53 < 2.8e-16,
// the bound rope.hpp states. Tails and targets without a native FMA (SSE4, scalar) run the
// scalar twin detail::angle_cos_sin_exact (std::fma, exact everywhere, and libm, <= 2^-52).
void ExactCosSinRow(int64_t pos, const double* HWY_RESTRICT w, int64_t n, double scale,
                    double* HWY_RESTRICT c, double* HWY_RESTRICT s) {
  const double pd = static_cast<double>(pos);
  int64_t i = 0;
#if HWY_NATIVE_FMA
  const hn::ScalableTag<double> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto p = hn::Set(d, pd), sc = hn::Set(d, scale);
  for (; i + N <= n; i += N) {
    hn::Vec<decltype(d)> cv, sv;
    CosSinExact(d, p, hn::LoadU(d, w + i), cv, sv);
    hn::StoreU(hn::Mul(sc, cv), d, c + i);
    hn::StoreU(hn::Mul(sc, sv), d, s + i);
  }
#endif
  for (; i < n; ++i) {
    double cc, ss;
    ::posenc::detail::angle_cos_sin_exact(pd, w[i], cc, ss);
    c[i] = scale * cc;
    s[i] = scale * ss;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace posenc {
HWY_EXPORT(RotateF32);
HWY_EXPORT(RotateF64);
HWY_EXPORT(ExactCosSinRow);

namespace detail {

// Declared in rope.cpp (the only caller): the dispatching entry points.
void rope_rotate_simd(bool interleaved, int64_t R, const float* c, const float* s, float* x,
                      int64_t H, int64_t stride, bool inverse);
void rope_rotate_simd(bool interleaved, int64_t R, const double* c, const double* s, double* x,
                      int64_t H, int64_t stride, bool inverse);
void rope_exact_row_simd(int64_t pos, const double* w, int64_t n, double scale, double* c,
                         double* s);

void rope_rotate_simd(bool interleaved, int64_t R, const float* c, const float* s, float* x,
                      int64_t H, int64_t stride, bool inverse) {
  HWY_DYNAMIC_DISPATCH(RotateF32)(interleaved ? 1 : 0, R, c, s, x, H, stride, inverse);
}
void rope_rotate_simd(bool interleaved, int64_t R, const double* c, const double* s, double* x,
                      int64_t H, int64_t stride, bool inverse) {
  HWY_DYNAMIC_DISPATCH(RotateF64)(interleaved ? 1 : 0, R, c, s, x, H, stride, inverse);
}
void rope_exact_row_simd(int64_t pos, const double* w, int64_t n, double scale, double* c,
                         double* s) {
  HWY_DYNAMIC_DISPATCH(ExactCosSinRow)(pos, w, n, scale, c, s);
}

}  // namespace detail
}  // namespace posenc
#endif
