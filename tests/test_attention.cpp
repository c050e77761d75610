// The tiled attention path against the reference (the specification) over awkward shapes,
// every position scheme and every mask, float32 and float64; plus hand-computed goldens,
// degenerate rows, large scores, validation messages and the POSENC_REFERENCE switch.
// float32 runs the SIMD kernels (src/attention/attention_simd.cpp): the AttentionSimd tests
// below drive them through the shapes where their code paths part (partial key blocks of 64,
// D = 20 padded to the vector length, the decode path below 16 tile rows, MHA/GQA/MQA).
//
// The table-driven tests run the groups of the library's case table (full_cases() of
// include/posenc/verify/attention_cases.hpp, which also feeds `posenc check` and `posenc
// bench`) through its check mode; the tolerances are derived in that header.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "case_tables.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/positions/positions.hpp"
#include "posenc/verify/attention_cases.hpp"

using namespace posenc;
using namespace posenc::attention_cases;

namespace {

// The full list's cases of one group through check mode; n is the group's size (the coverage
// of the test this replaced).
void run_group(const std::string& group, int n) {
  test::run_group(full_cases(), group, n, [](const spec& c) { return check_case(c); });
}

}  // namespace

// Every scheme x every mask on one awkward shape (T=17 queries after a prefix, S=64), both
// element types.
TEST(Attention, EverySchemeAndMaskAgainstReference) {
  run_group("forward_every_scheme_and_mask", scheme_count() * kMasks);
}

// A deterministic sample of the full cross product of shapes, heads, schemes and masks, float32
// and float64 alternating.
TEST(Attention, SampledCrossProductAgainstReference) {
  run_group("forward_sampled_cross_product", 160);
}

// Every length pair at T, S in {1, 3, 17, 64, 129} with causal masking (the aligned-bottom-right
// rule is where off-by-ones live).
TEST(Attention, AllLengthPairsCausal) {
  run_group("forward_all_length_pairs_causal", 25);
}

// Large score magnitudes: |s| ~ 1e4 saturates a naive exp; the max-subtracted online softmax
// must stay finite and match the reference.
TEST(Attention, LargeScoresStayStable) {
  run_group("forward_large_scores", 3);
}

// T5 with every key far ahead of or behind every query: all offsets lie beyond the bucket
// saturation, so the tiled path's offset table collapses to one entry.
TEST(Attention, T5AllOffsetsBeyondSaturation) {
  run_group("forward_bias_beyond_saturation", 2);
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
  p.pos.named = {{"alibi", {}, {named_tensor{"alibi", {1}, {}, slope}}}};
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
  p.pos.named = {{"alibi", {}, {named_tensor{"alibi", {2}, {}, slopes}}}};
  expect_msg(p, "alibi must have shape (Hq,) = (4,), got (2,)");
  p = base();
  p.window = -1;
  expect_msg(p, "window");
  p = base();
  p.scale = std::numeric_limits<double>::infinity();
  expect_msg(p, "scale");
  p = base();
  const std::vector<double> st(5 * 4, 0.0);
  p.pos.named = {{"shaw", {}, {{"shaw_keys", {5, 4}, {}, st}, {"shaw_values", {5, 4}, {}, st}}}};
  expect_msg(p, "shaw_keys must have shape (C, D) = (5, 8), got (5, 4)");
  p = base();
  const std::vector<double> tt(32 * 2, 0.0);
  p.pos.named = {{"t5", {}, {{"t5_table", {32, 2}, {}, tt}}}};
  expect_msg(p, "t5_table must have shape (num_buckets, Hq) = (32, 4), got (32, 2)");
  p = base();
  p.T = 4, p.S = 3;
  expect_msg(p, "q_positions must be given when T > S");
}

TEST(Attention, ReferenceSelectableAtRunTime) {
  // POSENC_REFERENCE=1 makes attention_forward the reference: bit-identical outputs.
  fixture<float> f;
  build(f, spec{17, 33, 32, 4, 2, scheme::all, mask::everything, 5});
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

// Every scheme x every mask, the shapes cycling through the awkward lists.
TEST(AttentionSimd, EverySchemeAndMaskAgainstReference) {
  run_group("simd_every_scheme_and_mask", scheme_count() * kMasks);
}

// All T x S combinations for the benchmark's kind of call: causal GQA, none and T5/ALiBi.
TEST(AttentionSimd, CausalGqaAllLengths) {
  run_group("simd_causal_gqa_all_lengths", 15);
}

// Decode shapes (few tile rows or few items) split into key chunks whose partial softmax states
// are merged in chunk order: every scheme and mask, T = 1 and 4, S = 1000 and 8192, MHA, GQA
// and MQA (in-place dot products below 8 rows per item, per-item packed key blocks above).
TEST(AttentionSimd, SplitDecodeAgainstReference) {
  run_group("simd_split_decode", scheme_count() * 4);
}

// run(p) on the fixture's call with 1 thread, then 2 and 3: the same out and lse bits each time.
template <typename Real>
void expect_bits_for_any_thread_count(const fixture<Real>& f,
                                      void (*run)(const attention_params<Real>&),
                                      const std::string& what) {
  auto p = f.p;
  std::vector<Real> out1(f.out_fast.size()), out2(f.out_fast.size());
  std::vector<Real> lse1(f.lse_fast.size()), lse2(f.lse_fast.size());
  const int saved = num_threads();
  set_num_threads(1);
  p.out = out1.data(), p.lse = lse1.data();
  run(p);
  for (int nth : {2, 3}) {
    set_num_threads(nth);
    p.out = out2.data(), p.lse = lse2.data();
    run(p);
    EXPECT_EQ(out1, out2) << what << ", " << nth << " threads";
    EXPECT_EQ(lse1, lse2) << what << ", " << nth << " threads";
  }
  set_num_threads(saved);
}

// The split decode merges chunks in chunk order and its chunking depends on the shape only:
// the same bits for any thread count. S = 1000 with 2 kv heads takes chunks of 128 keys;
// S = 4096 with 8 kv heads, chunks of 512 (and 3 threads share its 64 items unevenly).
TEST(AttentionSimd, SplitDecodeThreadCountDoesNotChangeTheBits) {
  for (int64_t S : {1000, 4096})
    for (scheme sch : {scheme::none, scheme::all, relative_scheme(), offset_bias_scheme()}) {
      const int64_t Hkv = S == 1000 ? 2 : 8;
      const spec c{1, S, 64, 8, Hkv, sch, mask::causal, 4243};
      fixture<float> f;
      build(f, c);
      expect_bits_for_any_thread_count(f, &attention_tiled<float>, fmt::format("S = {}", S));
    }
}

// CoPE's own path splits the heads over the threads; every row is the same arithmetic, so the
// bits do not depend on the thread count (prefill with 8 heads over 1, 2 and 3 threads).
TEST(AttentionCope, ThreadCountDoesNotChangeTheBits) {
  int row = kSchemes;  // CoPE's row of the case tables (a scheme reached by name)
  while (std::string(name(static_cast<scheme>(row))) != "cope") ++row;
  const spec c{33, 40, 16, 8, 2, static_cast<scheme>(row), mask::causal, 4244};
  fixture<double> f;
  build(f, c);
  expect_bits_for_any_thread_count(f, &attention_forward<double>, "CoPE");
}

namespace {

// attention_tiled on the fixtures of cases a and b (the same values in two layouts) gives the
// same output and log-sum-exp bits, on 1 and 2 threads.
void expect_same_bits(const spec& a, const spec& b) {
  fixture<float> fa, fb;
  build(fa, a);
  build(fb, b);
  const int saved = num_threads();
  for (int nth : {1, 2}) {
    set_num_threads(nth);
    std::vector<float> oa(fa.out_fast.size()), ob(oa.size());
    std::vector<float> la(fa.lse_fast.size()), lb(la.size());
    auto pa = fa.p;
    auto pb = fb.p;
    pa.out = oa.data(), pa.lse = la.data();
    pb.out = ob.data(), pb.lse = lb.data();
    attention_tiled(pa);
    attention_tiled(pb);
    EXPECT_EQ(oa, ob) << describe(a) << " against " << describe(b) << ", " << nth << " threads";
    EXPECT_EQ(la, lb) << describe(a) << " against " << describe(b) << ", " << nth << " threads";
  }
  set_num_threads(saved);
}

}  // namespace

// Token-major and head-major K and V at split-decode shapes (T = 1, S = 8192: 512-key chunks,
// kv head fastest in the token-major item order) run the same chunks through the same
// arithmetic per row, so the two layouts give the same bits: GQA (4 rows per head) and MHA,
// float32 and float16, 1 and 2 threads, every scheme kind (RoPE through hook 1's copy, ALiBi/T5
// biases, Shaw's tables).
TEST(AttentionSimd, TokenMajorAndHeadMajorGiveTheSameBits) {
  for (auto [Hq, Hkv] : {std::pair<int64_t, int64_t>{8, 2}, {4, 4}})
    for (kv_storage kv : {kv_storage::f32, kv_storage::f16})
      for (scheme sch : {scheme::none, scheme::all, relative_scheme(), offset_bias_scheme()}) {
        spec c{1, 8192, 64, Hq, Hkv, sch, mask::causal, 5150};
        c.kv = kv;
        spec ch = c;
        ch.head_major = true;
        expect_same_bits(c, ch);
      }
}

// Keys in 8-key blocks and keys in rows (both head-major) at decode shapes give the same bits:
// on AVX-512 the blocked decode takes two keys a 16-lane vector (DecodeDotsPairs), the rows 8
// lanes a key (DecodeDots), and each (row, key) must still accumulate and reduce the same way.
// Rows per kv head 1 (MHA), 4 (GQA) and 6 (4 + 2 register blocks); S = 8195 ends in a partial
// block (a group of 4 keys and single keys); float32 and float16; 1 and 2 threads.
TEST(AttentionSimd, BlockedAndRowKeysGiveTheSameBits) {
  for (auto [Hq, Hkv] : {std::pair<int64_t, int64_t>{4, 4}, {8, 2}, {6, 1}})
    for (kv_storage kv : {kv_storage::f32, kv_storage::f16})
      for (scheme sch : {scheme::none, offset_bias_scheme()}) {
        spec c{1, 8195, 128, Hq, Hkv, sch, mask::causal, 5151};
        c.kv = kv;
        c.head_major = true;
        spec cb = c;
        cb.k_blocked = true;
        expect_same_bits(c, cb);
      }
}

// Large scores on the SIMD path: the running max moves across key blocks by a lot (rescale
// alpha << 1) and masked lanes stay exactly 0 (Exp(-inf) = 0, no NaN).
TEST(AttentionSimd, LargeScoresStayFinite) {
  run_group("simd_large_scores", 1);
}

namespace {

const int64_t kLens[] = {1, 3, 17, 64, 129};
const int64_t kSimdDims[] = {32, 80, 128, 20};
const std::pair<int64_t, int64_t> kSimdHeads[] = {{1, 1}, {4, 4}, {8, 1}, {8, 4}, {8, 8}, {4, 1}};

}  // namespace

RC_GTEST_PROP(AttentionSimd, RandomAwkwardShapes, ()) {
  const auto hs = *rc::gen::elementOf(
      std::vector<std::pair<int64_t, int64_t>>(std::begin(kSimdHeads), std::end(kSimdHeads)));
  const int64_t T = *rc::gen::elementOf(std::vector<int64_t>(std::begin(kLens), std::end(kLens)));
  const int64_t S = *rc::gen::elementOf(std::vector<int64_t>(std::begin(kLens), std::end(kLens)));
  const int64_t D =
      *rc::gen::elementOf(std::vector<int64_t>(std::begin(kSimdDims), std::end(kSimdDims)));
  const auto sch = static_cast<scheme>(*rc::gen::inRange(0, scheme_count()));
  const auto msk = static_cast<mask>(*rc::gen::inRange(0, kMasks));
  spec c{T, S, D, hs.first, hs.second, sch, msk, *rc::gen::arbitrary<uint32_t>()};
  if (c.T > c.S && needs_t_within_s(c)) std::swap(c.T, c.S);
  c.passes = forward;
  c.dtypes = f32;
  c.name = "random_awkward_shape";
  const auto r = check_case(c);
  if (!r.passed) RC_LOG() << r.name << ": " << r.claim << "\n" << r.detail << "\n";
  RC_ASSERT(r.passed);
}

// RoPE inside the tiles: the float32 path rotates q rows as an item loads them and key rows as
// they are packed (no rotated copies). The result must be bit-identical to rope_apply on q and
// k followed by attention without a position scheme: prefill (keys packed) and decode (keys
// read in place), half and interleaved, full and partial rotary width, exact and float32 angle
// pipelines, an attention factor != 1 (YaRN), positions that are not 0..S-1.
TEST(AttentionSimd, FusedRopeIsBitIdenticalToRopeApplyThenAttention) {
  struct shape {
    int64_t T, S;
  };
  int cases = 0;
  for (const shape sh : {shape{64, 130}, shape{33, 33}, shape{1, 300}, shape{3, 70}})
    for (const auto layout : {rope_layout::half, rope_layout::interleaved})
      for (const auto angle : {rope_angle::exact, rope_angle::f32})
        for (const bool partial : {false, true})
          for (const bool yarn : {false, true}) {
            const int64_t T = sh.T, S = sh.S, Hq = 8, Hkv = 2, D = 80;
            rope_config rc;
            rc.head_dim = D;
            rc.rotary_dim = partial ? 48 : D;
            rc.theta = 10000;
            if (yarn) {
              rc.type = rope_type::yarn;
              rc.factor = 4;
              rc.original_max_position_embeddings = 64;
              rc.max_position_embeddings = 256;
            }
            const rope_freqs fr = rope_frequencies(rc);
            rng g(static_cast<uint64_t>(7000 + cases));
            std::vector<float> q(T * Hq * D), k(S * Hkv * D), v(S * Hkv * D);
            for (auto* a : {&q, &k, &v})
              for (auto& x : *a) x = static_cast<float>(g.uniform() * 2 - 1);
            std::vector<int64_t> kpos(S), qpos(T);
            for (int64_t j = 0; j < S; ++j) kpos[j] = 5 + 3 * j;
            for (int64_t i = 0; i < T; ++i) qpos[i] = kpos[S - T + i];

            attention_params<float> p;
            p.q = q.data(), p.k = k.data(), p.v = v.data();
            p.T = T, p.S = S, p.Hq = Hq, p.Hkv = Hkv, p.D = D;
            p.causal = true;
            p.q_positions = qpos, p.k_positions = kpos;
            std::vector<float> fused(T * Hq * D), lse_fused(T * Hq);
            p.out = fused.data(), p.lse = lse_fused.data();
            p.pos.named = {rope_scheme(fr, layout, angle)};
            attention_forward(p);

            std::vector<float> qr = q, kr = k;
            rope_apply(fr, layout, angle, qpos, qr.data(), T, Hq, D);
            rope_apply(fr, layout, angle, kpos, kr.data(), S, Hkv, D);
            attention_params<float> p2 = p;
            p2.pos = {};
            p2.q = qr.data(), p2.k = kr.data();
            std::vector<float> plain(T * Hq * D), lse_plain(T * Hq);
            p2.out = plain.data(), p2.lse = lse_plain.data();
            attention_forward(p2);

            EXPECT_EQ(fused, plain)
                << "T=" << T << " S=" << S << " layout " << static_cast<int>(layout) << " angle "
                << static_cast<int>(angle) << " partial " << partial << " yarn " << yarn;
            EXPECT_EQ(lse_fused, lse_plain);
            ++cases;
          }
  EXPECT_EQ(cases, 64);
}

// Half-precision keys and values (float16, bfloat16) against the reference on the same stored
// values: every scheme, the prefill, decode and split-decode paths, MHA / GQA / MQA.
// xPos's row form (the scaled rotation applied inside the tiles) against keys transformed by
// apply(), the whole-array form a KV cache uses when it stores transformed keys: the same bits,
// for prefill (packed) and decode shapes, with a scale centre off zero.
TEST(AttentionSimd, FusedXposKeysAreBitIdenticalToTheCachesTransformedKeys) {
  int cases = 0;
  for (const int64_t T : {int64_t{64}, int64_t{33}, int64_t{1}}) {
    const int64_t S = 130, Hq = 8, Hkv = 2, D = 80;
    rng g(static_cast<uint64_t>(7100 + T));
    std::vector<float> q(T * Hq * D), k(S * Hkv * D), v(S * Hkv * D);
    for (auto* a : {&q, &k, &v})
      for (auto& x : *a) x = static_cast<float>(g.uniform() * 2 - 1);
    attention_position<float> pos;
    pos.named = {{"xpos", {{"xpos_scale_base", 64.0}, {"xpos_center", 30.0}}}};

    attention_params<float> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data();
    p.T = T, p.S = S, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.causal = true, p.pos = pos;
    std::vector<float> fused(T * Hq * D), lse_fused(T * Hq);
    p.out = fused.data(), p.lse = lse_fused.data();
    attention_forward(p);

    kv_cache<float> cache(S, Hkv, D, pos);
    cache.append(k.data(), v.data(), S);
    attention_params<float> pc;
    pc.q = q.data(), pc.T = T, pc.Hq = Hq, pc.D = D, pc.causal = true, pc.pos = pos;
    std::vector<float> cached(T * Hq * D), lse_cached(T * Hq);
    pc.out = cached.data(), pc.lse = lse_cached.data();
    std::vector<int64_t> qpos(T);
    for (int64_t i = 0; i < T; ++i) qpos[i] = S - T + i;
    pc.q_positions = qpos;
    attention_forward_cached(pc, cache);

    EXPECT_EQ(fused, cached) << "T=" << T;
    EXPECT_EQ(lse_fused, lse_cached) << "T=" << T;
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

TEST(AttentionSimd, HalfPrecisionKeysAndValuesAgainstReference) {
  run_group("simd_half_kv", half_kv_scheme_count() * 6);  // every scheme but CoPE, Self-Extend, DCA
}

// Head-major keys and values (kv_head_stride, the KV cache's layout) against the reference read
// through the same layout: every scheme, prefill, decode with few and with many rows per item,
// float32 and half storage, float32 and float64. The rows past each head's S are NaN.
TEST(AttentionSimd, HeadMajorKeysAndValuesAgainstReference) {
  run_group("simd_head_major", scheme_count() * 3);
}

// Keys in 8-key blocks (k_blocked) against the reference read through the same layout: every
// scheme, prefill, decode with few and many rows, partial last blocks, half storage, float32 and
// float64. The unused slots of each head's blocks are NaN.
TEST(AttentionSimd, BlockedKeysAgainstReference) {
  run_group("simd_k_blocked", scheme_count() * 4);
}

// The storage rounding's effect against the unrounded float32 keys and values, bounded from
// the format's unit roundoff u (2^-11 float16, 2^-8 bfloat16): each stored value is x (1 + d),
// |d| <= u (the inputs here are normal numbers in both formats), so a score moves by at most
// |ds| <= scale u sum_e |q_e k_e| =: E, and with P' = softmax(s + ds), |P' - P|_1 <= 2 (e^{2E} - 1)
// (each weight moves by a factor within e^{+-2E} after renormalisation), so every output
// coordinate moves by at most (e^{2E} - 1) 2 max|v| + u max|v| (the values' own rounding), plus
// the float32 evaluation error of both calls, far below it here. Measured against that bound,
// not a guessed tolerance.
TEST(AttentionSimd, HalfPrecisionStorageErrorWithinItsDerivedBound) {
  for (kv_storage kv : {kv_storage::f16, kv_storage::bf16}) {
    const int64_t T = 3, S = 500, Hq = 4, Hkv = 2, D = 64;
    rng g(99);
    std::vector<float> q(T * Hq * D), k(S * Hkv * D), v(S * Hkv * D);
    for (auto* a : {&q, &k, &v})
      for (auto& x : *a) x = static_cast<float>(g.uniform() * 2 - 1);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    to_half(kv, k, k16);
    to_half(kv, v, v16);
    attention_params<float> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data();
    p.T = T, p.S = S, p.Hq = Hq, p.Hkv = Hkv, p.D = D;
    p.causal = true;
    std::vector<float> exact(T * Hq * D), half(T * Hq * D);
    p.out = exact.data();
    attention_forward(p);
    auto ph = p;
    ph.k = ph.v = nullptr;
    ph.kv = kv, ph.k16 = k16.data(), ph.v16 = v16.data();
    ph.out = half.data();
    attention_forward(ph);

    const double u = unit_roundoff(kv), scale = 1 / std::sqrt(double(D));
    double E = 0, vmax = 0;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < D; ++e)
            dot += std::abs(q[(i * Hq + h) * D + e] * k[(j * Hkv + h / 2) * D + e]);
          E = std::max(E, scale * u * dot);
        }
    for (float x : v) vmax = std::max(vmax, double(std::abs(x)));
    const double bound = (std::exp(2 * E) - 1) * 2 * vmax + u * vmax;
    double worst = 0;
    for (size_t n = 0; n < exact.size(); ++n)
      worst = std::max(worst, std::abs(double(exact[n]) - double(half[n])));
    EXPECT_LE(worst, bound) << name(kv);
    EXPECT_GT(worst, 0.0) << name(kv) << ": the storage rounding must show";
    std::printf("%s: max |out(stored) - out(float32)| = %.3g, derived bound %.3g\n",
                name(kv).c_str(), worst, bound);
  }
}

// kv_head_stride: a multiple of D, at least S * D, named in the message; the backward refuses
// the head-major layout by name; a stride with spare rows per head (a cache's capacity) works.
TEST(AttentionSimd, HeadMajorStrideMisuseIsAClearError) {
  const int64_t S = 4, D = 8;
  std::vector<float> q(D), k(2 * S * D, 0.5f), v(2 * S * D, 1.0f), out(D);
  attention_params<float> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
  p.T = 1, p.S = S, p.Hq = p.Hkv = 1, p.D = D;
  auto message = [&] {
    try {
      attention_forward(p);
    } catch (const invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (int64_t bad : {int64_t{-8}, S * D - D, S * D + 3}) {
    p.kv_head_stride = bad;
    const std::string m = message();
    EXPECT_NE(m.find("kv_head_stride must be 0"), std::string::npos) << bad << ": " << m;
    EXPECT_NE(m.find(std::to_string(bad)), std::string::npos) << m;
  }
  p.kv_head_stride = 2 * S * D;  // capacity 2 S: rows S.. of the head unused
  EXPECT_EQ(message(), "no error");
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  std::vector<float> lse(1), dout(D), dq(D), dk(S * D), dv(S * D);
  attention_grads<float> gr;
  gr.out = out.data(), gr.lse = lse.data(), gr.dout = dout.data();
  gr.dq = dq.data(), gr.dk = dk.data(), gr.dv = dv.data();
  try {
    attention_backward(p, gr);
    ADD_FAILURE() << "the backward must refuse kv_head_stride";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kv_head_stride"), std::string::npos) << e.what();
  }
}

TEST(AttentionSimd, HalfPrecisionMisuseIsAClearError) {
  std::vector<float> q(4 * 8), k(4 * 8), out(4 * 8);
  std::vector<uint16_t> k16(4 * 8), v16(4 * 8);
  attention_params<float> p;
  p.q = q.data(), p.out = out.data();
  p.T = p.S = 4, p.Hq = p.Hkv = 1, p.D = 8;
  p.kv = kv_storage::f16;
  p.k16 = k16.data(), p.v16 = v16.data();
  p.k = k.data();
  EXPECT_THROW(
      {
        try {
          attention_forward(p);
        } catch (const invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("k and v must be null"), std::string::npos);
          throw;
        }
      },
      invalid_argument);
  p.k = nullptr;
  p.v16 = nullptr;
  EXPECT_THROW(attention_forward(p), invalid_argument);
  p.v16 = v16.data();
  std::vector<float> lse(4), dout(4 * 8), dq(4 * 8), dk(4 * 8), dv(4 * 8);
  attention_grads<float> gr;
  gr.out = out.data(), gr.lse = lse.data(), gr.dout = dout.data();
  gr.dq = dq.data(), gr.dk = dk.data(), gr.dv = dv.data();
  EXPECT_THROW(
      {
        try {
          attention_backward(p, gr);
        } catch (const invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("forward-only"), std::string::npos);
          throw;
        }
      },
      invalid_argument);
}

// bfloat16 products (attention_products::bf16) against the reference on the same stored
// values, within the bound derived in attention_cases.hpp ("bfloat16 products"): every scheme but
// CoPE, packed prefill and decode shapes, bfloat16 / float32 / float16 storage, D = 33 included.
TEST(AttentionSimd, BfloatProductsAgainstReference) {
  run_group("simd_bf16_products", half_kv_scheme_count() * 4);
}

// Which products ran: on a CPU with vdpbf16ps (attention_bf16_native) a packed prefill with
// products = bf16 rounds p to bfloat16, so its output differs from the float32 products' on the
// same bfloat16 inputs (which are exact operands for both); elsewhere the call runs float32
// products and the two agree bit for bit. Either way both stay within the bfloat16 bound.
TEST(AttentionSimd, BfloatProductsRunWhereTheCpuHasThem) {
  spec c{100, 100, 64, 8, 2, scheme::none, mask::causal, 42};
  c.kv = kv_storage::bf16;
  c.q_half = true;
  c.products = attention_products::bf16;
  c.passes = forward;
  c.dtypes = f32;
  fixture<float> f;
  build(f, c);
  auto p = f.p;
  std::vector<float> o16(f.out_fast.size()), o32(f.out_fast.size());
  p.out = o16.data();
  attention_forward(p);
  p.products = attention_products::f32;
  p.out = o32.data();
  attention_forward(p);
  size_t differ = 0;
  for (size_t x = 0; x < o16.size(); ++x) differ += o16[x] != o32[x];
  if (attention_bf16_native())
    EXPECT_GT(differ, o16.size() / 4) << "products = bf16 ran float32 products on a vdpbf16ps CPU";
  else
    EXPECT_EQ(differ, 0u) << "without vdpbf16ps, products = bf16 runs float32 products";
}

TEST(AttentionSimd, BfloatProductsMisuseIsAClearError) {
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::vector<double> qd(4 * 8), kd(4 * 8), vd(4 * 8), od(4 * 8);
  attention_params<double> pd;
  pd.q = qd.data(), pd.k = kd.data(), pd.v = vd.data(), pd.out = od.data();
  pd.T = pd.S = 4, pd.Hq = pd.Hkv = 1, pd.D = 8;
  pd.products = attention_products::bf16;
  EXPECT_NE(message([&] { attention_forward(pd); }).find("products = bf16 needs a float32 call"),
            std::string::npos);
  std::vector<float> q(4 * 8), k(4 * 8), v(4 * 8), out(4 * 8);
  std::vector<uint16_t> q16(4 * 8);
  attention_params<float> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
  p.T = p.S = 4, p.Hq = p.Hkv = 1, p.D = 8;
  p.q_storage = kv_storage::bf16;
  p.q16 = q16.data();
  EXPECT_NE(message([&] { attention_forward(p); }).find("q must be null"), std::string::npos);
  p.q = nullptr;
  p.q16 = nullptr;
  EXPECT_NE(message([&] { attention_forward(p); }).find("q16 and out must not be null"),
            std::string::npos);
  p.q16 = q16.data();
  EXPECT_NO_THROW(attention_forward(p));
  p.q_storage = kv_storage::f32;
  p.q = q.data();
  EXPECT_NE(message([&] { attention_forward(p); }).find("q16 is read only with q_storage"),
            std::string::npos);
  p.q16 = nullptr;
  p.products = attention_products::bf16;
  std::vector<float> lse(4), dout(4 * 8), dq(4 * 8), dk(4 * 8), dv(4 * 8);
  attention_grads<float> gr;
  gr.out = out.data(), gr.lse = lse.data(), gr.dout = dout.data();
  gr.dq = dq.data(), gr.dk = dk.data(), gr.dv = dv.data();
  EXPECT_NE(message([&] { attention_backward(p, gr); }).find("products = bf16 is forward-only"),
            std::string::npos);
}

// CoPE runs alone on its own path: with the query temperature on as well (a q/k transform the
// CoPE path would not apply) the call is refused by name instead of silently dropping it.
TEST(AttentionCope, TemperatureWithCopeIsRefused) {
  const int64_t T = 2, D = 4;
  std::vector<double> q(T * D, 0.5), k(T * D, 0.25), v(T * D, 1.0), out(T * D), emb(2 * D, 0.1);
  attention_params<double> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
  p.T = p.S = T, p.Hq = p.Hkv = 1, p.D = D, p.causal = true;
  p.pos.named = {{"cope", {}, {named_tensor{"cope", {2, D}, {}, emb}}}};
  EXPECT_NO_THROW(attention_forward(p));
  p.pos.named.push_back(temperature_scheme({4, 0.1}));
  try {
    attention_forward(p);
    ADD_FAILURE() << "CoPE with the temperature must be refused";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cope cannot be combined with temperature"),
              std::string::npos)
        << e.what();
  }
}

// Attention sinks (attention_params::sinks, gpt-oss's convention) on every forward path, rows
// with no visible key included (out = 0, lse = the sink).
TEST(AttentionSinks, EveryPathAgainstReference) {
  run_group("sinks_forward", (scheme_count() - 1) * 2);  // every scheme but CoPE
}

// A hand-computed row: one query, two keys, a sink: the weights are e^s_j / (e^sink + sum e^s).
TEST(AttentionSinks, HandComputedRowAndMisuse) {
  const double q[2] = {1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4}, sink[1] = {0.5};
  double out[2], lse[1];
  attention_params<double> p;
  p.q = q, p.k = k, p.v = v, p.out = out, p.lse = lse;
  p.T = 1, p.S = 2, p.Hq = 1, p.Hkv = 1, p.D = 2;
  p.scale = 1.0;
  p.sinks = sink;
  attention_forward(p);
  const double e0 = std::exp(1.0), e1 = 1.0, es = std::exp(0.5), L = e0 + e1 + es;
  EXPECT_NEAR(out[0], (e0 * 1 + e1 * 3) / L, 1e-15);
  EXPECT_NEAR(out[1], (e0 * 2 + e1 * 4) / L, 1e-15);
  EXPECT_NEAR(lse[0], std::log(L), 1e-15);
  const double two[2] = {0.5, 0.5};
  p.sinks = two;
  EXPECT_THROW(attention_forward(p), posenc::invalid_argument);
  const double inf[1] = {std::numeric_limits<double>::infinity()};
  p.sinks = inf;
  EXPECT_THROW(attention_forward(p), posenc::invalid_argument);
}
