// The attention backward pass, over the case table of tests/support/attention_cases.hpp:
//   1. the double reference backward against central finite differences of the double reference
//      forward, for every scheme x mask x head shape (MHA, GQA, MQA), every input and every
//      position parameter (T5 table, Shaw tables, ALiBi slopes);
//   2. the tiled backward (float32: Highway block products; float64: plain loops) against the
//      reference, every scheme x mask, plus a sample of the cross product of shapes;
//   3. the same bits for 1 and 2 threads; zero (never NaN) gradients for rows that see nothing;
//      validation messages.
//
// Tolerance of 2 (derived; u = unit roundoff of the element type; forward quantities as in
// tests/test_attention.cpp: A bounds every scaled score, B every bias, V = max|v| + max|a^V|,
// e_s = (D + 10) u A + 2u (A + B) bounds a score's error, tol_out the output's, e_lse the lse's):
//   W     = max_i |dO_i|_2 (max_j |v_j|_2 + max_c |a^V_c|_2) bounds |dP_ij| and |D_i|
//   e_P   = 2 e_s + e_lse + 4u                      relative error of p = exp(s - lse)
//   E_S   = 2 W e_P + (D + 4) u W + (D + 2) u W + |dO|_1 tol_out + 4u W
//           bounds |error of dS_ij| / p_ij (dS = p (dP - D) with |dP - D| <= 2W)
//   Since sum_j p_ij = 1 per row, a row's sum_j |dS_ij| <= 2W, and a key's column is summed over
//   at most N = G T rows (sum_i p_ij <= N):
//   dq    scale Kinf (E_S + 2W (S + C + 12) u)      Kinf = max|k'| + max|a^K|, C = 2K+1
//   dk    scale Qinf N (E_S + 2W (N + 12) u)        Qinf = max|q'| (rotation: a sqrt(2) max|q|)
//   dv    N Oinf (e_P + (N + 4) u)                  Oinf = max|dO|
//   dT5   T E_S;  dslope: T E_S dmax;  da^K: scale Qinf Hq T E_S;  da^V: Hq T Oinf e_P
//         (parameter gradients accumulate in double: only the dS errors count)
// plus the reference's own rounding to the element type (u |x|). For float64 both sides are
// double computations with errors of the same form: the bound is doubled.
//
// Finite differences (1): central differences at steps h and 2h, h = 1e-3 (|x| <= ~4). The
// truncation error of FD(h) is ~ |FD(2h) - FD(h)| / 3 (Richardson), the rounding error of the
// loss L = sum dO . out is at most delta_L = 64 (S + D) u (1 + A + B) sum|dO| V, so
// tol = |FD(2h) - FD(h)| + 2 delta_L / h + 64 (S + D) u (|g| + 1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "attention_cases.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"

using namespace posenc;
using namespace posenc::test;

namespace {

// The gradients of one backward call, owning their buffers.
template <typename Real>
struct grads {
  std::vector<Real> dq, dk, dv, dt5, dak, dav;
  std::vector<double> dal;
  attention_grads<Real> g;
  grads(const fixture<Real>& f, const Real* out, const Real* lse, const Real* dout) {
    const auto& p = f.p;
    dq.assign(p.T * p.Hq * p.D, Real(-7));
    dk.assign(p.S * p.Hkv * p.D, Real(-7));
    dv.assign(p.S * p.Hkv * p.D, Real(-7));
    g.out = out, g.lse = lse, g.dout = dout;
    g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    if (p.pos.has_t5()) {
      dt5.assign(p.pos.t5.weights.size(), Real(-7));
      g.dt5 = dt5.data();
    }
    if (p.pos.has_shaw()) {
      dak.assign(p.pos.shaw.keys.size(), Real(-7));
      dav.assign(p.pos.shaw.values.size(), Real(-7));
      g.dshaw_keys = dak.data();
      g.dshaw_values = dav.data();
    }
    if (!p.pos.alibi.empty()) {
      dal.assign(p.Hq, -7.0);
      g.dalibi = dal.data();
    }
  }
};

template <typename Real>
std::vector<Real> random_like(size_t n, uint64_t seed) {
  rng r(seed);
  std::vector<Real> x(n);
  for (auto& e : x) e = static_cast<Real>(r.normal());
  return x;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}
template <typename Real>
double max_abs(const std::vector<Real>& x) {
  double m = 0;
  for (Real e : x) m = std::max(m, std::abs(double(e)));
  return m;
}
template <typename Real>
double max_row_norm(const std::vector<Real>& x, int64_t D, int ord) {
  double m = 0;
  for (size_t r = 0; r + D <= x.size(); r += D) {
    double n = 0;
    for (int64_t d = 0; d < D; ++d)
      n += ord == 1 ? std::abs(double(x[r + d])) : double(x[r + d]) * x[r + d];
    m = std::max(m, ord == 1 ? n : std::sqrt(n));
  }
  return m;
}

// Largest |qpos - kpos| over valid positions (ALiBi's dbias/dslope).
template <typename Real>
double max_distance(const fixture<Real>& f, const case_spec& c) {
  if (f.qpos.empty() && f.kpos.empty()) return double(std::max(c.S, c.T));
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (auto v : f.qpos)
    if (v >= 0) lo = std::min(lo, v), hi = std::max(hi, v);
  for (auto v : f.kpos)
    if (v >= 0) lo = std::min(lo, v), hi = std::max(hi, v);
  return lo > hi ? 0.0 : double(hi - lo);
}

struct bwd_tolerances {
  double dq, dk, dv, dt5, dal, dak, dav;
};

template <typename Real>
bwd_tolerances derive(const fixture<Real>& f, const case_spec& c, const std::vector<Real>& dout,
                      const std::vector<Real>& lse) {
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  const auto& p = f.p;
  const int64_t K = p.pos.has_shaw() ? p.pos.shaw.clip : 0, C = p.pos.has_shaw() ? 2 * K + 1 : 0;
  const double amp = p.pos.rope.freqs ? p.pos.rope.freqs->attention_factor : 1.0;
  const double scale = 1.0 / std::sqrt(double(c.D));
  // Forward error terms (tests/test_attention.cpp).
  const double e_s = (c.D + 10) * u * f.A + 2 * u * (f.A + f.B);
  const double ep = 2 * e_s + 4 * u * (f.A + f.B) + 2 * u;
  const double tol_out = (2 * ep + (2 * c.S + 2 * K + 8) * u) * f.V;
  double lmax = 0;
  for (Real x : lse)
    if (std::isfinite(double(x))) lmax = std::max(lmax, std::abs(double(x)));
  const double e_lse = ep + (2 * c.S + 4) * u + u * lmax;
  // Backward.
  double avn = 0, akmax = 0;
  if (p.pos.has_shaw()) {
    avn =
        max_row_norm(std::vector<Real>(p.pos.shaw.values.begin(), p.pos.shaw.values.end()), c.D, 2);
    akmax = max_abs(std::vector<Real>(p.pos.shaw.keys.begin(), p.pos.shaw.keys.end()));
  }
  const double W = max_row_norm(dout, c.D, 2) * (max_row_norm(f.v, c.D, 2) + avn);
  const double e_P = 2 * e_s + e_lse + 4 * u;
  const double E_S = 2 * W * e_P + (2 * c.D + 10) * u * W + max_row_norm(dout, c.D, 1) * tol_out;
  const double Qinf = amp * std::sqrt(2.0) * max_abs(f.q);
  const double Kinf = amp * std::sqrt(2.0) * max_abs(f.k) + akmax;
  const double Oinf = max_abs(dout);
  const double N = double(c.Hq / c.Hkv) * double(c.T);
  const double both = std::is_same_v<Real, double> ? 2.0 : 1.0;
  bwd_tolerances t;
  t.dq = both * scale * Kinf * (E_S + 2 * W * (c.S + C + 12) * u);
  t.dk = both * scale * Qinf * N * (E_S + 2 * W * (N + 12) * u);
  t.dv = both * N * Oinf * (e_P + (N + 4) * u);
  t.dt5 = both * c.T * E_S;
  t.dal = both * c.T * E_S * max_distance(f, c);
  t.dak = both * scale * Qinf * c.Hq * c.T * E_S;
  t.dav = both * c.Hq * c.T * Oinf * e_P;
  return t;
}

// max |a - b| - tol - u |b| over the entries (<= 0 passes), with the worst index.
template <typename A, typename B>
void expect_close(const std::vector<A>& fast, const std::vector<B>& ref, double tol, double u,
                  const char* what) {
  ASSERT_EQ(fast.size(), ref.size()) << what;
  double worst = 0, worst_err = 0;
  size_t at = 0;
  for (size_t n = 0; n < ref.size(); ++n) {
    ASSERT_TRUE(std::isfinite(double(fast[n]))) << what << "[" << n << "]";
    const double err = std::abs(double(fast[n]) - double(ref[n]));
    const double ratio = err / (tol + u * std::abs(double(ref[n])) + 1e-300);
    if (ratio > worst) worst = ratio, worst_err = err, at = n;
  }
  EXPECT_LE(worst, 1.0) << what << ": |fast - reference| = " << worst_err << " at " << at
                        << " (fast " << double(fast[at]) << ", reference " << double(ref[at])
                        << "), tolerance " << tol;
}

// Tiled backward (on the tiled forward's out and lse) against the reference backward.
template <typename Real>
void run_tiled_case(const case_spec& c) {
  SCOPED_TRACE(describe(c));
  fixture<Real> f;
  build(f, c);
  auto p = f.p;
  p.out = f.out_fast.data();
  p.lse = f.lse_fast.data();
  attention_tiled(p);
  const auto dout = random_like<Real>(f.out_fast.size(), c.seed + 77);
  grads<Real> ref(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  grads<Real> fast(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  attention_backward_reference(p, ref.g);
  attention_backward_tiled(p, fast.g);
  const auto t = derive(f, c, dout, f.lse_fast);
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  expect_close(fast.dq, ref.dq, t.dq, u, "dq");
  expect_close(fast.dk, ref.dk, t.dk, u, "dk");
  expect_close(fast.dv, ref.dv, t.dv, u, "dv");
  expect_close(fast.dt5, ref.dt5, t.dt5, u, "dt5");
  expect_close(fast.dak, ref.dak, t.dak, u, "dshaw_keys");
  expect_close(fast.dav, ref.dav, t.dav, u, "dshaw_values");
  expect_close(fast.dal, ref.dal, t.dal, u, "dalibi");
}

// The reference backward against central finite differences of the reference forward.
void run_fd_case(const case_spec& c) {
  SCOPED_TRACE(describe(c));
  fixture<double> f;
  build(f, c);
  auto p = f.p;
  std::vector<double> out(c.T * c.Hq * c.D), lse(c.T * c.Hq);
  p.out = out.data();
  p.lse = lse.data();
  const auto dout = random_like<double>(out.size(), c.seed + 91);
  attention_reference(p);
  grads<double> ref(f, out.data(), lse.data(), dout.data());
  attention_backward_reference(p, ref.g);

  const double u = std::numeric_limits<double>::epsilon() / 2;
  double dO1 = 0;
  for (double x : dout) dO1 += std::abs(x);
  const double dL = 64 * (c.S + c.D) * u * (1 + f.A + f.B) * dO1 * f.V;
  auto loss = [&] {
    attention_reference(p);
    double L = 0;
    for (size_t n = 0; n < out.size(); ++n) L += dout[n] * out[n];
    return L;
  };
  auto check = [&](double* x, size_t n, const double* g, const char* what) {
    int failures = 0;
    for (size_t e = 0; e < n && failures < 3; ++e) {
      const double x0 = x[e], h = 1e-3;
      auto fd = [&](double step) {
        x[e] = x0 + step;
        const double lp = loss();
        x[e] = x0 - step;
        const double lm = loss();
        x[e] = x0;
        return (lp - lm) / (2 * step);
      };
      const double f1 = fd(h), f2 = fd(2 * h);
      const double tol =
          std::abs(f2 - f1) + 2 * dL / h + 64 * (c.S + c.D) * u * (std::abs(g[e]) + 1);
      if (!(std::abs(f1 - g[e]) <= tol)) {
        ++failures;
        ADD_FAILURE() << what << "[" << e << "]: finite difference " << f1 << ", backward " << g[e]
                      << ", tolerance " << tol;
      }
    }
  };
  check(f.q.data(), f.q.size(), ref.dq.data(), "dq");
  check(f.k.data(), f.k.size(), ref.dk.data(), "dk");
  check(f.v.data(), f.v.size(), ref.dv.data(), "dv");
  if (p.pos.has_t5()) check(f.tabs.t5.data(), f.tabs.t5.size(), ref.dt5.data(), "dt5");
  if (p.pos.has_shaw()) {
    check(f.tabs.shaw_keys.data(), f.tabs.shaw_keys.size(), ref.dak.data(), "dshaw_keys");
    check(f.tabs.shaw_values.data(), f.tabs.shaw_values.size(), ref.dav.data(), "dshaw_values");
  }
  if (!p.pos.alibi.empty()) check(f.slopes.data(), f.slopes.size(), ref.dal.data(), "dalibi");
}

constexpr int kSchemes = static_cast<int>(scheme::all) + 1;
constexpr int kMasks = static_cast<int>(mask::positions) + 1;

}  // namespace

// (1) Every scheme x every mask on a small GQA shape, then every scheme on MHA and MQA with
// every mask at once.
TEST(AttentionBackward, ReferenceMatchesFiniteDifferences) {
  for (int sch = 0; sch < kSchemes; ++sch)
    for (int msk = 0; msk < kMasks; ++msk)
      run_fd_case(case_spec{6, 9, 8, 4, 2, static_cast<scheme>(sch), static_cast<mask>(msk),
                            uint64_t(300 + sch * 16 + msk)});
  for (int sch = 0; sch < kSchemes; ++sch)
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{3, 3}, {4, 1}}) {
      run_fd_case(case_spec{5, 8, 8, hq, hkv, static_cast<scheme>(sch), mask::everything,
                            uint64_t(500 + sch * 4 + hkv)});
      run_fd_case(case_spec{7, 4, 6, hq, hkv, static_cast<scheme>(sch), mask::positions,
                            uint64_t(600 + sch * 4 + hkv)});  // T > S
    }
}

// (2) The tiled path against the reference, every scheme x every mask, both element types.
TEST(AttentionBackward, TiledMatchesReferenceEverySchemeAndMask) {
  for (int sch = 0; sch < kSchemes; ++sch)
    for (int msk = 0; msk < kMasks; ++msk) {
      const case_spec c{17,
                        70,
                        80,
                        8,
                        4,
                        static_cast<scheme>(sch),
                        static_cast<mask>(msk),
                        uint64_t(700 + sch * 16 + msk)};
      run_tiled_case<float>(c);
      run_tiled_case<double>(c);
    }
}

// A deterministic sample of shapes: lengths across block edges (1, 3, 63, 64, 65, 129), odd head
// dims, MHA / GQA / MQA.
TEST(AttentionBackward, TiledMatchesReferenceSampledShapes) {
  const int64_t lens[] = {1, 3, 63, 64, 65, 129};
  const int64_t dims[] = {1, 7, 32, 59, 96};
  const std::pair<int64_t, int64_t> heads[] = {{1, 1}, {4, 1}, {4, 4}, {6, 2}, {8, 8}};
  rng r(77);
  for (int n = 0; n < 60; ++n) {
    case_spec c{lens[r.below(6)],
                lens[r.below(6)],
                dims[r.below(5)],
                0,
                0,
                static_cast<scheme>(r.below(kSchemes)),
                static_cast<mask>(r.below(kMasks)),
                uint64_t(900 + n)};
    const auto hh = heads[r.below(5)];
    c.Hq = hh.first, c.Hkv = hh.second;
    if (c.T > c.S && (c.msk == mask::cu_seqlens || c.msk == mask::everything))
      c.msk = mask::positions;
    if (c.sch == scheme::rope_interleaved_partial && c.D < 4) c.sch = scheme::rope_half;
    if ((c.sch == scheme::rope_half || c.sch == scheme::all) && c.D % 2) c.D += 1;
    if (n % 2)
      run_tiled_case<float>(c);
    else
      run_tiled_case<double>(c);
  }
}

// (3) The same bits for any thread count.
TEST(AttentionBackward, ThreadCountDoesNotChangeTheBits) {
  for (scheme sch : {scheme::none, scheme::all, scheme::shaw, scheme::t5_causal}) {
    const case_spec c{40, 150, 64, 8, 2, sch, mask::causal, 4242};
    fixture<float> f;
    build(f, c);
    auto p = f.p;
    p.out = f.out_fast.data();
    p.lse = f.lse_fast.data();
    attention_tiled(p);
    const auto dout = random_like<float>(f.out_fast.size(), 5);
    grads<float> one(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
    grads<float> two(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
    const int saved = num_threads();
    set_num_threads(1);
    attention_backward_tiled(p, one.g);
    set_num_threads(2);
    attention_backward_tiled(p, two.g);
    set_num_threads(saved);
    EXPECT_EQ(one.dq, two.dq);
    EXPECT_EQ(one.dk, two.dk);
    EXPECT_EQ(one.dv, two.dv);
    EXPECT_EQ(one.dt5, two.dt5);
    EXPECT_EQ(one.dak, two.dak);
    EXPECT_EQ(one.dav, two.dav);
  }
}

// Rows that see no key (a pad query; every key padded) give exactly zero gradients.
TEST(AttentionBackward, FullyMaskedRowsGiveZeroNotNan) {
  for (int which = 0; which < 2; ++which) {
    const int64_t T = 3, S = 4, H = 2, D = 8;
    auto q = random_like<double>(T * H * D, 1), k = random_like<double>(S * H * D, 2),
         v = random_like<double>(S * H * D, 3), dO = random_like<double>(T * H * D, 4);
    std::vector<double> out(T * H * D), lse(T * H);
    std::vector<uint8_t> pad(S, which == 0 ? 1 : 0);
    std::vector<int64_t> qpos = {0, pad_position, 2}, kpos = {0, 1, 2, 3};
    attention_params<double> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data(), p.lse = lse.data();
    p.T = T, p.S = S, p.Hq = H, p.Hkv = H, p.D = D;
    p.key_padding = pad;
    p.q_positions = qpos;
    p.k_positions = kpos;
    attention_tiled(p);
    attention_grads<double> g;
    std::vector<double> dq(T * H * D, 9), dk(S * H * D, 9), dv(S * H * D, 9);
    g.out = out.data(), g.lse = lse.data(), g.dout = dO.data();
    g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    for (auto fn : {&attention_backward_tiled<double>, &attention_backward_reference<double>}) {
      fn(p, g);
      for (int64_t d = 0; d < H * D; ++d) EXPECT_EQ(dq[1 * H * D + d], 0.0);  // the pad query
      if (which == 1) {  // nothing visible anywhere
        for (double x : dq) EXPECT_EQ(x, 0.0);
        for (double x : dk) EXPECT_EQ(x, 0.0);
        for (double x : dv) EXPECT_EQ(x, 0.0);
      }
      for (double x : dq) EXPECT_TRUE(std::isfinite(x));
    }
  }
}

TEST(AttentionBackward, ValidationNamesTheArgument) {
  fixture<double> f;
  build(f, case_spec{4, 5, 8, 2, 1, scheme::none, mask::none, 1});
  std::vector<double> out(4 * 2 * 8), lse(8), dO(out.size()), dq(out.size()), dk(5 * 8), dv(5 * 8),
      dt5(64);
  auto p = f.p;
  p.out = out.data();
  attention_grads<double> g;
  g.out = out.data(), g.lse = lse.data(), g.dout = dO.data();
  g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
  auto expect_msg = [&](const attention_grads<double>& gg, const std::string& what) {
    for (auto fn : {&attention_backward_tiled<double>, &attention_backward_reference<double>}) {
      try {
        fn(p, gg);
        ADD_FAILURE() << "no error, expected one naming " << what;
      } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      }
    }
  };
  auto g2 = g;
  g2.lse = nullptr;
  expect_msg(g2, "out, lse, dout and dq must not be null");
  g2 = g;
  g2.dv = nullptr;
  expect_msg(g2, "dk and dv must not be null");
  g2 = g;
  g2.dt5 = dt5.data();
  expect_msg(g2, "dt5 was requested but the T5 hook is off");
  g2 = g;
  double dal[2];
  g2.dalibi = dal;
  expect_msg(g2, "dalibi was requested but the ALiBi hook is off");
}

TEST(AttentionBackward, ReferenceSelectableAtRunTime) {
  fixture<float> f;
  build(f, case_spec{9, 20, 16, 4, 2, scheme::all, mask::everything, 8});
  auto p = f.p;
  p.out = f.out_fast.data();
  p.lse = f.lse_fast.data();
  attention_tiled(p);
  const auto dout = random_like<float>(f.out_fast.size(), 3);
  grads<float> a(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  grads<float> b(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  attention_backward_reference(p, a.g);
  ::setenv("POSENC_REFERENCE", "1", 1);
  attention_backward(p, b.g);
  ::unsetenv("POSENC_REFERENCE");
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dt5, b.dt5);
}
