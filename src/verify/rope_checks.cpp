// RoPE: the property checks of group "rope" (rope_checks()). Each check is one function
// (two where they share their data), called in order by rope_checks(); `posenc check`,
// the report and the tests all read this one list. After the properties come the results of
// the case table's small list (check_cases() of include/posenc/verify/rope_cases.hpp): the
// SIMD apply kernels against the binary128 reference and the plain loops, and the fused q-and-k
// path against two applies, with the bounds derived in that header.
#include "posenc/encodings/rope.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/rope_cases.hpp"

namespace posenc {

namespace {

// The batch most checks rotate: T tokens, H heads, head dim D.
constexpr int64_t T = 48, H = 3, D = 96;

constexpr double kEps = 0x1p-53;  // unit roundoff of double

check_result make_check(std::string name, std::string claim, double err, double tol,
                        std::string detail) {
  return measured_check("rope", std::move(name), std::move(claim), err, tol, std::move(detail));
}

rope_config base_config(int64_t D, int64_t R) {
  rope_config c;
  c.head_dim = D;
  c.rotary_dim = R;
  c.theta = 10000;
  return c;
}

std::vector<double> random_vec(rng& g, size_t n) {
  std::vector<double> v(n);
  for (auto& e : v) e = g.normal();
  return v;
}

long double dotl(const double* a, const double* b, int64_t n) {
  long double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<long double>(a[i]) * b[i];
  return s;
}

// 1. Norm preservation (a = 1). Per-component error of the exact path: cos/sin carry <= 2
// ulp (2^-52 abs, see detail::angle_cos_sin_exact) and the rotation u c - v s two products and a
// sum (3 eps relative to |u| + |v|); so | |y| / |x| - 1 | <= 2 * (2^-52 + 3 eps) = 10 eps.
void norm_preserved(std::vector<check_result>& out, rng& g) {
  auto f = rope_frequencies(base_config(D, D));
  std::vector<int64_t> pos(T);
  for (auto& p : pos) p = static_cast<int64_t>(g.below(10000000));
  auto x = random_vec(g, T * H * D);
  double err = 0;
  for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
    auto y = x;
    rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D);
    for (int64_t r = 0; r < T * H; ++r) {
      const long double nx = std::sqrt(dotl(&x[r * D], &x[r * D], D));
      const long double ny = std::sqrt(dotl(&y[r * D], &y[r * D], D));
      err = std::max(err, static_cast<double>(std::fabs(ny / nx - 1)));
    }
  }
  out.push_back(make_check(
      "norm_preserved", "rotation preserves each head vector's norm (a = 1, exact, double)", err,
      10 * kEps, "positions < 1e7, D = R = 96; tol = 2 (2^-52 cos/sin + 3 eps rotation) = 10 eps"));
}

// 2. Relative position: q_m . k_n is unchanged when both positions shift by c (the RoFormer
// property, Su et al. 2021 eq. 16). Each rotated vector carries <= 5 eps |x| error (as in
// check 1), so the normalised score difference |dq.k| / (|q||k|) <= 2 * 2 * 5 eps = 20 eps.
void relative_shift(std::vector<check_result>& out, rng& g) {
  auto c = base_config(80, 80);
  c.theta = 1e6;
  auto f = rope_frequencies(c);
  double err = 0;
  for (int trial = 0; trial < 64; ++trial) {
    auto q = random_vec(g, 80), k = random_vec(g, 80);
    const int64_t m = static_cast<int64_t>(g.below(100000)),
                  n = static_cast<int64_t>(g.below(100000)),
                  sh = static_cast<int64_t>(g.below(10000000));
    auto q1 = q, k1 = k, q2 = q, k2 = k;
    const int64_t pm = m, pn = n, pm2 = m + sh, pn2 = n + sh;
    rope_apply(f, rope_layout::half, rope_angle::exact, {&pm, 1}, q1.data(), 1, 1, 80);
    rope_apply(f, rope_layout::half, rope_angle::exact, {&pn, 1}, k1.data(), 1, 1, 80);
    rope_apply(f, rope_layout::half, rope_angle::exact, {&pm2, 1}, q2.data(), 1, 1, 80);
    rope_apply(f, rope_layout::half, rope_angle::exact, {&pn2, 1}, k2.data(), 1, 1, 80);
    const long double nq = std::sqrt(dotl(q.data(), q.data(), 80));
    const long double nk = std::sqrt(dotl(k.data(), k.data(), 80));
    const long double d = dotl(q1.data(), k1.data(), 80) - dotl(q2.data(), k2.data(), 80);
    err = std::max(err, static_cast<double>(std::fabs(d) / (nq * nk)));
  }
  out.push_back(make_check(
      "relative_shift", "q_m . k_n is unchanged when m and n shift by the same c (c < 1e7)", err,
      20 * kEps,
      "theta 1e6, D = 80; normalised by |q||k|; tol = 2 vectors x 2 (both shifts) x 5 eps"));
}

// 3. +k then -k: inverse(apply(x, p), p) = x for a = 1. Two rotations: 2 x 5 eps relative.
// 4. Adjoint: <apply(x), y> = <x, inverse(y)> with a != 1 (yarn), the backward identity;
// normalised by a |x||y|: both sides carry 5 eps |x||y| a -> tol 10 eps.
void inverse_and_adjoint(std::vector<check_result>& out, rng& g) {
  auto c = base_config(D, 64);
  auto f = rope_frequencies(c);
  std::vector<int64_t> pos(T);
  for (auto& p : pos) p = static_cast<int64_t>(g.below(1u << 30));
  auto x = random_vec(g, T * H * D);
  double err = 0;
  for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
    auto y = x;
    rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D);
    rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D, true);
    for (int64_t r = 0; r < T * H; ++r) {
      const long double nx = std::sqrt(dotl(&x[r * D], &x[r * D], D));
      for (int64_t d = 0; d < D; ++d)
        err = std::max(err, static_cast<double>(std::fabs(y[r * D + d] - x[r * D + d]) / nx));
    }
  }
  out.push_back(make_check("inverse_is_identity",
                           "rotating by +p then by -p (inverse) returns x (a = 1)", err, 10 * kEps,
                           "positions < 2^30, R = 64 of D = 96; tol = 2 x 5 eps"));

  auto cy = base_config(D, 64);
  cy.type = rope_type::yarn;
  cy.factor = 8;
  cy.original_max_position_embeddings = 4096;
  auto fy = rope_frequencies(cy);
  auto yv = random_vec(g, T * H * D);
  double aerr = 0;
  for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
    auto fx = x, bt = yv;
    rope_apply(fy, layout, rope_angle::exact, pos, fx.data(), T, H, D);
    rope_apply(fy, layout, rope_angle::exact, pos, bt.data(), T, H, D, true);
    const long double lhs = dotl(fx.data(), yv.data(), T * H * D);
    const long double rhs = dotl(x.data(), bt.data(), T * H * D);
    const long double nx = std::sqrt(dotl(x.data(), x.data(), T * H * D));
    const long double ny = std::sqrt(dotl(yv.data(), yv.data(), T * H * D));
    aerr =
        std::max(aerr, static_cast<double>(std::fabs(lhs - rhs) / (fy.attention_factor * nx * ny)));
  }
  out.push_back(make_check(
      "adjoint_identity",
      "<a R(p) x, y> = <x, a R(p)^T y>: inverse is the backward pass (yarn, a != 1)", aerr,
      10 * kEps, "yarn factor 8, a = 0.1 ln 8 + 1; normalised by a |x||y|; tol 2 x 5 eps"));
}

// 5. Composition: R(p) R(q) = R(p + q). Three rotations: tol 3 x 5 eps.
void composition(std::vector<check_result>& out, rng& g) {
  auto f = rope_frequencies(base_config(64, 64));
  double err = 0;
  for (int trial = 0; trial < 64; ++trial) {
    auto x = random_vec(g, 64);
    const int64_t p = static_cast<int64_t>(g.below(1u << 24)),
                  q = static_cast<int64_t>(g.below(1u << 24)), pq = p + q;
    auto a = x, b = x;
    rope_apply(f, rope_layout::interleaved, rope_angle::exact, {&p, 1}, a.data(), 1, 1, 64);
    rope_apply(f, rope_layout::interleaved, rope_angle::exact, {&q, 1}, a.data(), 1, 1, 64);
    rope_apply(f, rope_layout::interleaved, rope_angle::exact, {&pq, 1}, b.data(), 1, 1, 64);
    const long double nx = std::sqrt(dotl(x.data(), x.data(), 64));
    for (int i = 0; i < 64; ++i)
      err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i]) / nx));
  }
  out.push_back(make_check("composition", "R(p) R(q) = R(p + q) for p, q < 2^24", err, 15 * kEps,
                           "D = R = 64; tol = 3 rotations x 5 eps"));
}

// 6. Layouts agree: interleaved channel 2i <-> half channel i, 2i+1 <-> i + R/2. The same
// operations on the same values in the same order, so bit-identical (tol 0).
// 7. Pass-through channels [R, D) are bit-exact.
void layouts_agree_and_pass_through(std::vector<check_result>& out, rng& g) {
  const int64_t R = 24, DD = 80;
  auto f = rope_frequencies(base_config(DD, R));
  std::vector<int64_t> pos(T);
  for (auto& p : pos) p = static_cast<int64_t>(g.below(1000000));
  auto xh = random_vec(g, T * H * DD);
  auto xi = xh;
  for (int64_t r = 0; r < T * H; ++r)
    for (int64_t i = 0; i < R / 2; ++i) {
      xi[r * DD + 2 * i] = xh[r * DD + i];
      xi[r * DD + 2 * i + 1] = xh[r * DD + i + R / 2];
    }
  auto x0 = xh;
  double err = 0, perr = 0;
  for (auto angle : {rope_angle::exact, rope_angle::f32}) {
    auto yh = xh, yi = xi;
    rope_apply(f, rope_layout::half, angle, pos, yh.data(), T, H, DD);
    rope_apply(f, rope_layout::interleaved, angle, pos, yi.data(), T, H, DD);
    for (int64_t r = 0; r < T * H; ++r) {
      for (int64_t i = 0; i < R / 2; ++i) {
        err = std::max(err, std::fabs(yi[r * DD + 2 * i] - yh[r * DD + i]));
        err = std::max(err, std::fabs(yi[r * DD + 2 * i + 1] - yh[r * DD + i + R / 2]));
      }
      // NOLINTBEGIN(bugprone-suspicious-memory-comparison): bitwise equality is the claim
      for (int64_t d = R; d < DD; ++d) {
        perr += std::memcmp(&yh[r * DD + d], &x0[r * DD + d], sizeof(double)) != 0;
        perr += std::memcmp(&yi[r * DD + d], &x0[r * DD + d], sizeof(double)) != 0;
      }
      // NOLINTEND(bugprone-suspicious-memory-comparison)
    }
  }
  out.push_back(make_check(
      "layouts_agree", "half and interleaved agree bit for bit after the channel permutation", err,
      0, "R = 24 of D = 80, both angle modes; same arithmetic per pair -> tol 0"));
  out.push_back(make_check("pass_through_bit_exact",
                           "channels [R, D) are untouched (count of differing values)", perr, 0,
                           "R = 24 of D = 80, both layouts and angle modes"));
}

// 8. rope_apply (double, exact) against the binary128 reference, normalised by a (|u|+|v|)
// of each pair: cos/sin 2^-52 + rotation 3 eps -> tol 5 eps. float data: cos/sin rounded to
// float (2^-24 each) and float rotation (3 x 2^-24), so tol 5 x 2^-24.
void apply_vs_reference(std::vector<check_result>& out, rng& g) {
  for (int which = 0; which < 2; ++which) {
    auto c = base_config(D, D);
    c.type = rope_type::yarn;
    c.factor = 4;
    c.original_max_position_embeddings = 32768;
    auto f = rope_frequencies(c);
    std::vector<int64_t> pos(T);
    for (auto& p : pos) p = static_cast<int64_t>(g.below(10000000));
    auto x = random_vec(g, T * H * D);
    double err = 0;
    for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
      std::vector<double> ref(x.size());
      rope_apply_reference(f, layout, pos, x.data(), ref.data(), T, H, D);
      std::vector<double> y(x.size());
      if (which == 0) {
        y = x;
        rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D);
      } else {
        std::vector<float> xf(x.begin(), x.end());
        // Compare against the reference of the float-rounded input.
        std::vector<double> xr(xf.begin(), xf.end());
        rope_apply_reference(f, layout, pos, xr.data(), ref.data(), T, H, D);
        rope_apply(f, layout, rope_angle::exact, pos, xf.data(), T, H, D);
        y.assign(xf.begin(), xf.end());
        x = xr;
      }
      const int64_t n = D / 2;
      for (int64_t r = 0; r < T * H; ++r)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t iu = layout == rope_layout::half ? i : 2 * i;
          const int64_t iv = layout == rope_layout::half ? i + n : 2 * i + 1;
          const double scale =
              f.attention_factor * (std::fabs(x[r * D + iu]) + std::fabs(x[r * D + iv]) + 1e-300);
          err = std::max(err, std::fabs(y[r * D + iu] - ref[r * D + iu]) / scale);
          err = std::max(err, std::fabs(y[r * D + iv] - ref[r * D + iv]) / scale);
        }
    }
    if (which == 0)
      out.push_back(make_check("apply_vs_reference_f64",
                               "rope_apply (double, exact) matches the binary128 reference", err,
                               5 * kEps,
                               "yarn s = 4, positions < 1e7; error / (a (|u| + |v|)) per pair; "
                               "tol = 2^-52 cos/sin + 3 eps rotation = 5 eps"));
    else
      out.push_back(make_check(
          "apply_vs_reference_f32", "rope_apply (float, exact) matches the binary128 reference",
          err, 5 * 0x1p-24,
          "yarn s = 4, positions < 1e7; cos/sin rounded to float + float rotation: 5 x 2^-24"));
  }
}

// 9. Angle error of each mode against the reference, positions up to 1e7 and frequencies
// theta^(-2i/R) for theta = 1e4 and 5e5, R = 128.
//   exact: |cos err|, |sin err| <= 2^-52 (argument exact, reduction to 2^-100, libm 1 ulp).
//   f32: the angle float(p) float(w) differs from p w by at most
//     |p w| (2^-24 [w rounding] + 2^-24 [p rounding, 0 below 2^24] + 2^-24 [product]),
//   and sinf/cosf and the result add 2^-23; the check reports max(err / bound) <= 1 and, in
//   the detail, the largest absolute error seen.
void angle_error(std::vector<check_result>& out, rng& g) {
  double eerr = 0, cratio = 0, cabs = 0;
  const int64_t probes[] = {0, 1, 7, 100, 4095, 65537, 1000003, 8388607, 9999991, 10000000};
  for (double theta : {1e4, 5e5}) {
    auto cc = base_config(128, 128);
    cc.theta = theta;
    auto f = rope_frequencies(cc);
    std::vector<int64_t> pos(std::begin(probes), std::end(probes));
    for (int k = 0; k < 40; ++k) pos.push_back(static_cast<int64_t>(g.below(10000001)));
    std::vector<double> ce(64), se(64);
    std::vector<float> cf(64), sf(64);
    for (int64_t p : pos) {
      rope_cos_sin(f, rope_angle::exact, p, ce.data(), se.data());
      rope_cos_sin(f, rope_angle::f32, p, cf.data(), sf.data());
      for (int i = 0; i < 64; ++i) {
        long double rc, rs;
        rope_reference_cos_sin(p, f.inv_freq[i], &rc, &rs);
        eerr = std::max({eerr, static_cast<double>(std::fabs(ce[i] - rc)),
                         static_cast<double>(std::fabs(se[i] - rs))});
        const double e =
            static_cast<double>(std::max(std::fabs(cf[i] - rc), std::fabs(sf[i] - rs)));
        const double bound = 3 * 0x1p-24 * static_cast<double>(p) * f.inv_freq[i] + 0x1p-23;
        cabs = std::max(cabs, e);
        cratio = std::max(cratio, e / bound);
      }
    }
  }
  out.push_back(make_check("angle_error_exact",
                           "exact-mode cos/sin error vs the binary128 reference, pos <= 1e7", eerr,
                           2 * 0x1p-52,
                           "argument exact (two-product), reduction to ~2^-100, libm <= 1 ulp "
                           "plus first-order correction: tol 2 ulp(1) = 2^-51"));
  out.push_back(make_check(
      "angle_error_f32", "f32 cos/sin error / (3 * 2^-24 * p * w + 2^-23) at pos <= 1e7", cratio,
      1.0,
      fmt::format("largest absolute cos/sin error measured: {:.3g} (float angle rounding grows "
                  "like p w 2^-24)",
                  cabs)));
}

// 10. Scaling identities. Linear s = 3 at position 3 p equals default at p: the angles
// (3 p)(w / 3) and p w differ by the rounding of w / 3 (1 eps relative to the angle, which
// is < 1e6; the products are exact in the double-double angle), so tol = 2 eps * 1e6 +
// 2^-51 in cos/sin.
// Dynamic at seq_len <= M equals default exactly; yarn / llama3 at factor 1 up to 3 eps.
void scaling_identities(std::vector<check_result>& out, rng& g) {
  auto base = base_config(64, 64);
  auto fd = rope_frequencies(base);
  auto cl = base;
  cl.type = rope_type::linear;
  cl.factor = 3;
  auto fl = rope_frequencies(cl);
  double err = 0;
  std::vector<double> c1(32), s1(32), c2(32), s2(32);
  for (int k = 0; k < 64; ++k) {
    const int64_t p = static_cast<int64_t>(g.below(1000000));
    rope_cos_sin(fd, rope_angle::exact, p, c1.data(), s1.data());
    rope_cos_sin(fl, rope_angle::exact, 3 * p, c2.data(), s2.data());
    for (int i = 0; i < 32; ++i)
      err = std::max({err, std::fabs(c1[i] - c2[i]), std::fabs(s1[i] - s2[i])});
  }
  out.push_back(
      make_check("linear_is_interpolation", "linear factor 3 at position 3 p equals default at p",
                 err, 2 * kEps * 1e6 + 0x1p-51,
                 "Chen et al. 2023 eq. 4; angle rounding 2 eps x angle (<= 1e6) + 2^-51 cos/sin"));

  double derr = 0;
  auto cdyn = base;
  cdyn.type = rope_type::dynamic;
  cdyn.factor = 2;
  cdyn.max_position_embeddings = 4096;
  auto cy = base;
  cy.type = rope_type::yarn;
  cy.factor = 1;
  cy.original_max_position_embeddings = 4096;
  auto cl3 = base;
  cl3.type = rope_type::llama3;
  cl3.factor = 1;
  cl3.original_max_position_embeddings = 8192;
  for (const auto& f2 : {rope_frequencies(cdyn, 0), rope_frequencies(cdyn, 4096),
                         rope_frequencies(cy), rope_frequencies(cl3)}) {
    for (size_t i = 0; i < fd.inv_freq.size(); ++i)
      derr = std::max(derr, std::fabs(f2.inv_freq[i] - fd.inv_freq[i]) / fd.inv_freq[i]);
    derr = std::max(derr, std::fabs(f2.attention_factor - 1));
  }
  out.push_back(make_check(
      "scaling_reduces_to_default",
      "dynamic at seq_len <= M, yarn and llama3 at factor 1 give the default frequencies", derr,
      3 * kEps,
      "dynamic reduces exactly (base (s L/M - s + 1)^x = base); the yarn ramp blend "
      "w r + w (1 - r) and the llama3 blend round twice and add: 3 eps relative"));
}

}  // namespace

std::vector<check_result> rope_checks() {
  std::vector<check_result> out;
  rng g(20240603);  // one stream through the checks, in this order
  norm_preserved(out, g);
  relative_shift(out, g);
  inverse_and_adjoint(out, g);
  composition(out, g);
  layouts_agree_and_pass_through(out, g);
  apply_vs_reference(out, g);
  angle_error(out, g);
  scaling_identities(out, g);
  for (const auto& c : rope_cases::check_cases()) out.push_back(rope_cases::check_case(c));
  return out;
}

}  // namespace posenc
