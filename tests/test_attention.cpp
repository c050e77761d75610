// The tiled attention path against the reference (the specification) over awkward shapes,
// every position scheme and every mask, float32 and float64; plus hand-computed goldens,
// degenerate rows, large scores, validation messages and the POSENC_REFERENCE switch.
// float32 runs the SIMD kernels (src/attention/attention_simd.cpp): the AttentionSimd tests
// below drive them through the shapes where their code paths part (partial key blocks of 64,
// D = 20 padded to the vector length, the decode path below 16 tile rows, MHA/GQA/MQA). One case
// table (tests/support/attention_cases.hpp) serves these tests and the backward's.
//
// Tolerance (derived; u = unit roundoff of the element type: 2^-24 float, 2^-53 double).
// Let A = max over (h, i, j) of scale * a^2 * |q_i| (|k_j| + |a^K|max) (a = RoPE attention
// factor; rotation preserves norms, so by Cauchy-Schwarz A bounds every scaled dot product and
// the absolute sums sum_d |q_d| |k_d| it rounds against), B = max |bias_ij| (ALiBi + T5), and
// V = max|v| + max|a^V|.
//   score:    D-term dot product (gamma_D <= D u), the rotation of q and k in the element
//             type (<= 4u relative each), the scale multiply (folded into q on the SIMD path)
//             and bias add (2u of |s|):
//             |ds| <= (D + 11) u A + 2u (A + B)
//   probs:    p = exp(s - m) with s - m in [-2(A+B), 0]:
//             |dp|/p <= 2|ds| + 4u (A + B) + 2u =: e_p
//             (the running max m is one of the scores, so it carries the same |ds|)
//   sums:     l and acc are sums of S non-negative / bounded terms with one rescale per key
//             block: relative error <= (S + 2 S/Bk + 4) u <= (2S + 4) u; Shaw-V adds a sum of
//             2K+1 terms: (2K+1) u
//   output:   |do| <= (2 e_p + (2S + 2K + 8) u) * V
//   lse:      |dlse| <= e_p + (2S + 4) u + u |lse|
// Both sides carry their own rounding, and the reference's (double) is far below the float
// bound, so the bound applies to their difference.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "attention_cases.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/positions/positions.hpp"

using namespace posenc;
using namespace posenc::test;

namespace {

template <typename Real>
void run_case(const case_spec& c) {
  SCOPED_TRACE(describe(c));
  fixture<Real> f;
  build(f, c);
  auto pr = f.p, pf = f.p;
  pr.out = f.out_ref.data();
  pr.lse = f.lse_ref.data();
  pf.out = f.out_fast.data();
  pf.lse = f.lse_fast.data();
  attention_reference(pr);
  attention_tiled(pf);
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  const int64_t K = c.sch == scheme::shaw ? 8 : (c.sch == scheme::all ? 3 : 0);
  // D + 11: the SIMD path folds the scale into q (one more rounding of u A).
  const double ds = (c.D + 11) * u * f.A + 2 * u * (f.A + f.B);
  const double ep = 2 * ds + 4 * u * (f.A + f.B) + 2 * u;  // exp: Highway Exp is 1 ulp = 2u
  const double tol_out = (2 * ep + (2 * c.S + 2 * K + 8) * u) * f.V;
  double max_err = 0, max_lse_err = 0;
  for (size_t n = 0; n < f.out_ref.size(); ++n) {
    ASSERT_TRUE(std::isfinite(double(f.out_fast[n]))) << n;
    max_err = std::max(max_err, std::abs(double(f.out_fast[n]) - double(f.out_ref[n])));
  }
  for (size_t n = 0; n < f.lse_ref.size(); ++n) {
    const double a = f.lse_ref[n], b = f.lse_fast[n];
    if (std::isinf(a) || std::isinf(b)) {
      ASSERT_EQ(a, b) << "row " << n;  // both -inf (fully masked) or neither
      ASSERT_LT(a, 0);
      const int64_t D = c.D;
      for (int64_t d = 0; d < D; ++d) {
        ASSERT_EQ(f.out_fast[n * D + d], Real(0));
        ASSERT_EQ(f.out_ref[n * D + d], Real(0));
      }
      continue;
    }
    const double tol = ep + (2 * c.S + 4) * u + u * std::abs(a);
    max_lse_err = std::max(max_lse_err, std::abs(a - b) / tol);
  }
  EXPECT_LE(max_err, tol_out) << "A=" << f.A << " V=" << f.V;
  EXPECT_LE(max_lse_err, 1.0);
}

const int64_t kLens[] = {1, 3, 17, 64, 129};
const int64_t kDims[] = {32, 80, 128};
const std::pair<int64_t, int64_t> kHeads[] = {{1, 1}, {4, 1}, {4, 4}, {8, 1}, {8, 4}, {8, 8}};

}  // namespace

// Every scheme x every mask on one awkward shape (T=17 queries after a prefix, S=64), both
// element types.
TEST(Attention, EverySchemeAndMaskAgainstReference) {
  for (int sch = 0; sch <= static_cast<int>(scheme::all); ++sch)
    for (int msk = 0; msk <= static_cast<int>(mask::positions); ++msk) {
      case_spec c{17,
                  64,
                  80,
                  8,
                  4,
                  static_cast<scheme>(sch),
                  static_cast<mask>(msk),
                  uint64_t(100 + sch * 16 + msk)};
      run_case<float>(c);
      run_case<double>(c);
    }
}

// A deterministic sample of the full cross product of shapes, heads, schemes and masks
// (the whole product is ~50k cases; this covers every value of every axis many times).
TEST(Attention, SampledCrossProductAgainstReference) {
  rng r(2024);
  for (int n = 0; n < 160; ++n) {
    case_spec c{kLens[r.below(5)],
                kLens[r.below(5)],
                kDims[r.below(3)],
                kHeads[r.below(6)].first,
                0,
                static_cast<scheme>(r.below(8)),
                static_cast<mask>(r.below(9)),
                uint64_t(1000 + n)};
    c.Hkv = kHeads[r.below(6)].second;
    if (c.Hq % c.Hkv) c.Hkv = 1;
    // cu_seqlens aligns queries with the last keys: only for T <= S.
    if (c.T > c.S && c.msk == mask::cu_seqlens) c.msk = mask::doc_ids;
    if (c.T > c.S && c.msk == mask::everything) c.msk = mask::positions;
    if (n % 2)
      run_case<float>(c);
    else
      run_case<double>(c);
  }
}

// Every length pair at T, S in {1, 3, 17, 64, 129} with causal masking (the aligned-bottom-right
// rule is where off-by-ones live).
TEST(Attention, AllLengthPairsCausal) {
  for (int64_t T : kLens)
    for (int64_t S : kLens) {
      case_spec c{T,
                  S,
                  32,
                  4,
                  1,
                  scheme::alibi,
                  T > S ? mask::positions : mask::causal,
                  uint64_t(T * 1000 + S)};
      c.msk = mask::causal;
      if (T > S) c.msk = mask::positions;  // default positions need T <= S
      run_case<float>(c);
    }
}

// Large score magnitudes: |s| ~ 1e4 saturates a naive exp; the max-subtracted online softmax
// must stay finite and match the reference.
TEST(Attention, LargeScoresStayStable) {
  for (scheme s : {scheme::none, scheme::alibi, scheme::shaw}) {
    case_spec c{17, 64, 32, 4, 4, s, mask::causal, 77, 2000.0};
    run_case<double>(c);
    run_case<float>(c);
  }
}

// T5 with every key far ahead of or behind every query: all offsets lie beyond the bucket
// saturation (2 max_distance + num_buckets = 288), so the tiled path's offset table collapses
// to one entry. (The double path once sized that table negatively here and threw.)
TEST(Attention, T5AllOffsetsBeyondSaturation) {
  for (int64_t shift : {5000, -5000})
    for (scheme s : {scheme::t5_bidir, scheme::t5_causal}) {
      case_spec c{17, 64, 32, 4, 2, s, mask::positions, 91, 1.0, shift};
      run_case<double>(c);
      run_case<float>(c);
    }
}

// Golden values computed with python3's math module (no numpy), D = 1, one head, no scheme:
// q = [1], k = [0, 1, 2], v = [10, 20, 40], scale 1: scores 0, 1, 2;
// softmax = e^s / (1 + e + e^2) with 1 + e + e^2 = 11.107337927389695:
//   out = (10 + 20 e + 40 e^2) / 11.107337927389695 = 32.404513383792626
//   lse = log(11.107337927389695) = 2.40760596444438
// Causal with T = 1, S = 3: the query is token 2, sees all three keys: same values.
// Causal with T = 3, S = 3 and q = [1, 1, 1]: row 0 sees key 0 only -> out 10, lse 0;
// row 1 sees keys 0, 1 -> (10 + 20 e) / (1 + e) = 17.310585786300050, lse = log(1 + e) =
// 1.3132616875182228.
TEST(Attention, HandComputedGolden) {
  for (bool causal : {false, true}) {
    const double q[] = {1}, k[] = {0, 1, 2}, v[] = {10, 20, 40};
    double out = 0, lse = 0;
    attention_params<double> p;
    p.q = q, p.k = k, p.v = v, p.out = &out, p.lse = &lse;
    p.T = 1, p.S = 3, p.Hq = 1, p.Hkv = 1, p.D = 1, p.scale = 1.0, p.causal = causal;
    attention_tiled(p);
    EXPECT_NEAR(out, 32.404513383792626, 1e-13);
    EXPECT_NEAR(lse, 2.40760596444438, 1e-14);
    attention_reference(p);
    EXPECT_NEAR(out, 32.404513383792626, 1e-13);
  }
  const double q[] = {1, 1, 1}, k[] = {0, 1, 2}, v[] = {10, 20, 40};
  double out[3], lse[3];
  attention_params<double> p;
  p.q = q, p.k = k, p.v = v, p.out = out, p.lse = lse;
  p.T = 3, p.S = 3, p.Hq = 1, p.Hkv = 1, p.D = 1, p.scale = 1.0, p.causal = true;
  attention_tiled(p);
  EXPECT_NEAR(out[0], 10.0, 1e-14);
  EXPECT_NEAR(lse[0], 0.0, 1e-15);
  EXPECT_NEAR(out[1], 17.310585786300050, 1e-13);
  EXPECT_NEAR(lse[1], 1.3132616875182228, 1e-14);
  EXPECT_NEAR(out[2], 32.404513383792626, 1e-13);
  // Window 2 on the same causal problem: row 2 sees keys 1, 2 only:
  // (20 e + 40 e^2) / (e + e^2) = 34.62117157260009, lse = log(e + e^2) = 2.3132616875182226.
  p.window = 2;
  attention_tiled(p);
  EXPECT_NEAR(out[2], 34.62117157260009, 1e-13);
  EXPECT_NEAR(lse[2], 2.3132616875182226, 1e-14);
}

// ALiBi golden: the same D = 1 problem with slope 0.5, bidirectional, query at position 2:
// biases -0.5 * |2 - j| = -1, -0.5, 0, scores -1, 0.5, 2;
// Z = e^-1 + e^0.5 + e^2 = 9.40565681080222,
// out = (10 e^-1 + 20 e^0.5 + 40 e^2) / Z = 35.320814959078646.
TEST(Attention, AlibiGolden) {
  const double q[] = {1}, k[] = {0, 1, 2}, v[] = {10, 20, 40}, slope[] = {0.5};
  double out = 0, lse = 0;
  attention_params<double> p;
  p.q = q, p.k = k, p.v = v, p.out = &out, p.lse = &lse;
  p.T = 1, p.S = 3, p.Hq = 1, p.Hkv = 1, p.D = 1, p.scale = 1.0;
  p.pos.alibi = slope;
  attention_tiled(p);
  EXPECT_NEAR(out, 35.320814959078646, 1e-13);
  EXPECT_NEAR(lse, std::log(9.40565681080222), 1e-14);
}

TEST(Attention, FullyMaskedRowsAreZeroNotNan) {
  std::vector<float> q(3 * 2 * 4, 1.0f), k(3 * 1 * 4, 1.0f), v(3 * 1 * 4, 2.0f), out(24, 5.0f),
      lse(6, 5.0f);
  const uint8_t pad[] = {0, 0, 0};
  attention_params<float> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data(), p.lse = lse.data();
  p.T = 3, p.S = 3, p.Hq = 2, p.Hkv = 1, p.D = 4;
  p.key_padding = pad;
  for (int ref = 0; ref < 2; ++ref) {
    ref ? attention_reference(p) : attention_tiled(p);
    for (float x : out) EXPECT_EQ(x, 0.0f);
    for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  }
  // S = 0: every row sees nothing.
  p.S = 0, p.k = nullptr, p.v = nullptr, p.key_padding = {};
  const int64_t qp[] = {0, 1, 2};
  p.q_positions = qp;
  attention_tiled(p);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

TEST(Attention, ValidationNamesTheArgument) {
  std::vector<double> q(2 * 4 * 8), k(3 * 2 * 8), v(3 * 2 * 8), out(2 * 4 * 8);
  auto base = [&] {
    attention_params<double> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
    p.T = 2, p.S = 3, p.Hq = 4, p.Hkv = 2, p.D = 8;
    return p;
  };
  auto expect_msg = [&](const attention_params<double>& p, const std::string& what) {
    try {
      attention_forward(p);
      ADD_FAILURE() << "no error, expected one naming " << what;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto p = base();
  p.Hkv = 3;
  expect_msg(p, "Hkv");
  p = base();
  const uint8_t pad2[] = {1, 1};
  p.key_padding = pad2;
  expect_msg(p, "key_padding must have shape (S,) = (3,)");
  p = base();
  const int64_t qp[] = {0, 1, 2};
  p.q_positions = qp;
  expect_msg(p, "q_positions must have shape (2,)");
  p = base();
  const int64_t cu[] = {0, 2};
  p.cu_seqlens = cu;
  expect_msg(p, "cu_seqlens must end at the number of tokens 3");
  p = base();
  const double slopes[] = {1, 2};
  p.pos.alibi = slopes;
  expect_msg(p, "alibi slopes must have shape (Hq,) = (4,)");
  p = base();
  p.window = -1;
  expect_msg(p, "window");
  p = base();
  p.scale = std::numeric_limits<double>::infinity();
  expect_msg(p, "scale");
  p = base();
  shaw_tables st = shaw_init(2, 4, 1, 1.0);
  attention_tables<double> tabs;
  p.pos.shaw = tabs.shaw_view(st);
  expect_msg(p, "shaw keys must have shape (2K+1, D) = (5, 8)");
  p = base();
  t5_bias_table tt = t5_init(t5_params{}, 2, 1, 1.0);
  p.pos.t5 = tabs.t5_view(tt);
  expect_msg(p, "t5 weights must have shape (num_buckets, Hq) = (32, 4)");
  p = base();
  p.T = 4, p.S = 3;
  expect_msg(p, "q_positions must be given when T > S");
}

TEST(Attention, ReferenceSelectableAtRunTime) {
  // POSENC_REFERENCE=1 makes attention_forward the reference: bit-identical outputs.
  fixture<float> f;
  build(f, case_spec{17, 33, 32, 4, 2, scheme::all, mask::everything, 5});
  auto p = f.p;
  p.out = f.out_ref.data();
  attention_reference(p);
  ::setenv("POSENC_REFERENCE", "1", 1);
  EXPECT_TRUE(attention_reference_selected());
  p.out = f.out_fast.data();
  attention_forward(p);
  EXPECT_EQ(f.out_fast, f.out_ref);
  ::setenv("POSENC_REFERENCE", "0", 1);
  EXPECT_FALSE(attention_reference_selected());
  ::unsetenv("POSENC_REFERENCE");
  EXPECT_FALSE(attention_reference_selected());
}

// Property (the seeds' permutation argument): without position and without a mask,
// Attn(PX) = P Attn(X) for any permutation P of the tokens; with the keys' and values' rows
// permuted alone, the output does not change at all. Tolerance: summation order changes, so
// the same derivation as above applies; for double with |s| <= ~10 it is below 1e-12 * V.
RC_GTEST_PROP(AttentionProp, PermutationEquivariantWithoutPosition, ()) {
  const int64_t T = *rc::gen::inRange<int64_t>(1, 20), D = 8, H = 2;
  rng r(*rc::gen::arbitrary<uint64_t>());
  std::vector<double> x(T * H * D);
  for (auto& e : x) e = r.normal();
  std::vector<int64_t> perm(T);
  for (int64_t i = 0; i < T; ++i) perm[i] = i;
  for (int64_t i = T - 1; i > 0; --i) std::swap(perm[i], perm[r.below(i + 1)]);
  std::vector<double> px(x.size());
  for (int64_t i = 0; i < T; ++i)
    std::copy(&x[perm[i] * H * D], &x[perm[i] * H * D] + H * D, &px[i * H * D]);
  std::vector<double> o(x.size()), po(x.size());
  attention_params<double> p;
  p.T = T, p.S = T, p.Hq = H, p.Hkv = H, p.D = D;
  p.q = p.k = p.v = x.data(), p.out = o.data();
  attention_tiled(p);
  p.q = p.k = p.v = px.data(), p.out = po.data();
  attention_tiled(p);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t c = 0; c < H * D; ++c)
      RC_ASSERT(std::abs(po[i * H * D + c] - o[perm[i] * H * D + c]) <= 1e-12);
}

// ---- the float32 SIMD kernels (formerly tests/test_attention_simd.cpp) ----------------------
namespace {

const int64_t kSimdDims[] = {32, 80, 128, 20};
const std::pair<int64_t, int64_t> kSimdHeads[] = {{1, 1}, {4, 4}, {8, 1}, {8, 4}, {8, 8}, {4, 1}};

// cu_seqlens (and "everything", which includes it) aligns queries with the last keys: T <= S.
case_spec simd_case(int64_t T, int64_t S, int64_t D, std::pair<int64_t, int64_t> heads, scheme sch,
                    mask msk, uint64_t seed) {
  if (T > S && (msk == mask::cu_seqlens || msk == mask::everything)) std::swap(T, S);
  return case_spec{T, S, D, heads.first, heads.second, sch, msk, seed};
}

}  // namespace

// Every scheme x every mask, the shapes cycling through the awkward lists.
TEST(AttentionSimd, EverySchemeAndMaskAgainstReference) {
  int idx = 0;
  for (int s = 0; s <= static_cast<int>(scheme::all); ++s)
    for (int m = 0; m <= static_cast<int>(mask::positions); ++m, ++idx) {
      run_case<float>(simd_case(kLens[idx % 5], kLens[(idx / 5 + idx) % 5], kSimdDims[idx % 4],
                                kSimdHeads[idx % 6], static_cast<scheme>(s), static_cast<mask>(m),
                                1000u + static_cast<uint64_t>(idx)));
      if (HasFatalFailure()) return;
    }
}

// All T x S combinations for the benchmark's kind of call: causal GQA, none and T5/ALiBi.
TEST(AttentionSimd, CausalGqaAllLengths) {
  int idx = 0;
  for (int64_t T : kLens)
    for (int64_t S : kLens) {
      if (T > S) continue;  // bottom-right causal with T > S needs explicit positions
      const scheme sch =
          idx % 3 == 0 ? scheme::none : (idx % 3 == 1 ? scheme::alibi : scheme::t5_causal);
      run_case<float>(
          case_spec{T, S, kSimdDims[idx % 3], 8, 2, sch, mask::causal, 77u + uint64_t(idx)});
      if (HasFatalFailure()) return;
      ++idx;
    }
}

// Large scores on the SIMD path: the running max moves across key blocks by a lot (rescale
// alpha << 1) and masked lanes stay exactly 0 (Exp(-inf) = 0, no NaN).
TEST(AttentionSimd, LargeScoresStayFinite) {
  case_spec c{64, 129, 32, 4, 2, scheme::none, mask::causal, 5};
  c.q_scale = 30;
  run_case<float>(c);
}

RC_GTEST_PROP(AttentionSimd, RandomAwkwardShapes, ()) {
  const auto hs = *rc::gen::elementOf(
      std::vector<std::pair<int64_t, int64_t>>(std::begin(kSimdHeads), std::end(kSimdHeads)));
  const auto c = simd_case(
      *rc::gen::elementOf(std::vector<int64_t>(std::begin(kLens), std::end(kLens))),
      *rc::gen::elementOf(std::vector<int64_t>(std::begin(kLens), std::end(kLens))),
      *rc::gen::elementOf(std::vector<int64_t>(std::begin(kSimdDims), std::end(kSimdDims))), hs,
      static_cast<scheme>(*rc::gen::inRange(0, static_cast<int>(scheme::all) + 1)),
      static_cast<mask>(*rc::gen::inRange(0, static_cast<int>(mask::positions) + 1)),
      *rc::gen::arbitrary<uint32_t>());
  run_case<float>(c);
  RC_ASSERT(!::testing::Test::HasFailure());
}
