// The attention backward pass, over the library's case table (full_cases() of
// include/posenc/verify/attention_cases.hpp, which also feeds `posenc check` and `posenc
// bench`; the tolerances and the finite-difference bound are derived in that header):
//   1. the double reference backward against central finite differences of the double reference
//      forward (grad mode), for every scheme x mask x head shape (MHA, GQA, MQA), every input and
//      every position parameter (T5 table, Shaw tables, ALiBi slopes);
//   2. the tiled backward (float32: Highway block products; float64: plain loops) against the
//      reference (check mode), every scheme x mask, plus a sample of the cross product of shapes;
//   3. the same bits for 1 and 2 threads; zero (never NaN) gradients for rows that see nothing;
//      validation messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "case_tables.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/positions/positions.hpp"
#include "posenc/verify/attention_cases.hpp"

using namespace posenc;
using namespace posenc::attention_cases;

namespace {

// Runs the full list's cases of one group through check mode (or grad mode); n is the group's
// size (the coverage of the test this replaced).
void run_group(const std::string& group, int n, bool fd) {
  test::run_group(full_cases(), group, n,
                  [fd](const spec& c) { return fd ? grad_case(c) : check_case(c); });
}

}  // namespace

// (1) Every scheme x every mask on a small GQA shape, then every scheme on MHA and MQA with
// every mask at once, and with T > S.
TEST(AttentionBackward, ReferenceMatchesFiniteDifferences) {
  run_group("grad_every_scheme_and_mask", scheme_count() * kMasks, true);
  run_group("grad_mha_mqa", scheme_count() * 4, true);
}

// (2) The tiled path against the reference, every scheme x every mask, both element types.
TEST(AttentionBackward, TiledMatchesReferenceEverySchemeAndMask) {
  run_group("backward_every_scheme_and_mask", scheme_count() * kMasks, false);
}

// A deterministic sample of shapes: lengths across block edges (1, 3, 63, 64, 65, 129), odd head
// dims, MHA / GQA / MQA, float32 and float64 alternating.
TEST(AttentionBackward, TiledMatchesReferenceSampledShapes) {
  run_group("backward_sampled_shapes", 60, false);
}

// The per-pair RoPE schemes' float32 backward over several blocks and region chunks.
TEST(AttentionBackward, TiledMatchesReferencePerPairSchemesAcrossBlocks) {
  int n = 0;
  for (int s = kSchemes; s < scheme_count(); ++s) n += rope_pairs_scheme(static_cast<scheme>(s));
  ASSERT_GT(n, 0);
  run_group("backward_pairs_blocks", n, false);
}

// A scheme on a path of its own with a float32 tiled form (CoPE), forward and backward against
// the reference across its tiles of 32 queries and strips of 256 keys, a decode step, padding
// and documents.
TEST(AttentionBackward, TiledMatchesReferenceOwnPathAcrossTilesAndStrips) {
  int n = 0;
  for (int s = kSchemes; s < scheme_count(); ++s) n += 4 * own_path(static_cast<scheme>(s));
  ASSERT_GT(n, 0);
  run_group("path_tiles", n, false);
}

// (3) The same bits for any thread count: the member schemes, and each per-pair RoPE scheme on
// its own path.
TEST(AttentionBackward, ThreadCountDoesNotChangeTheBits) {
  std::vector<scheme> schemes = {scheme::none, scheme::all, relative_scheme(),
                                 offset_bias_scheme()};
  for (int s = kSchemes; s < scheme_count(); ++s)
    if (rope_pairs_scheme(static_cast<scheme>(s))) schemes.push_back(static_cast<scheme>(s));
  for (scheme sch : schemes) {
    const spec c{40, 150, 64, 8, 2, sch, mask::causal, 4242};
    fixture<float> f;
    build(f, c);
    auto p = f.p;
    p.out = f.out_fast.data();
    p.lse = f.lse_fast.data();
    attention_tiled(p);
    const auto dout = random_normal<float>(f.out_fast.size(), 5);
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
    EXPECT_EQ(one.dnamed, two.dnamed);
  }
}

// Rows that see no key (a pad query; every key padded) give exactly zero gradients.
TEST(AttentionBackward, FullyMaskedRowsGiveZeroNotNan) {
  for (int which = 0; which < 2; ++which) {
    const int64_t T = 3, S = 4, H = 2, D = 8;
    auto q = random_normal<double>(T * H * D, 1), k = random_normal<double>(S * H * D, 2),
         v = random_normal<double>(S * H * D, 3), dO = random_normal<double>(T * H * D, 4);
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

// A key whose probability is subnormal (s - lse = -95: P = 5.5e-42, below FLT_MIN) contributes
// exactly 0 to the float32 gradients, not a subnormal: every FMA that meets a subnormal costs a
// microcode assist on Intel CPUs (the ALiBi backward ran 3x slower; docs/decisions.md).
TEST(AttentionBackward, SubnormalProbabilitiesGiveNoSubnormalGradients) {
  const int64_t T = 1, S = 2, H = 1, D = 8;
  std::vector<float> q(D, 0.0f), k(S * D, 0.0f), v(S * D), dO(D), out(D), lse(1);
  q[0] = 1.0f;
  k[D + 0] = static_cast<float>(-95.0 * std::sqrt(double(D)));  // scale 1/sqrt(D): s = -95
  for (int64_t e = 0; e < S * D; ++e) v[e] = 0.25f + 0.125f * static_cast<float>(e % 5);
  for (int64_t e = 0; e < D; ++e) dO[e] = 1.0f - 0.25f * static_cast<float>(e % 3);
  attention_params<float> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data(), p.lse = lse.data();
  p.T = T, p.S = S, p.Hq = H, p.Hkv = H, p.D = D;
  attention_tiled(p);
  std::vector<float> dq(D), dk(S * D), dv(S * D);
  attention_grads<float> g;
  g.out = out.data(), g.lse = lse.data(), g.dout = dO.data();
  g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
  attention_backward_tiled(p, g);
  for (float x : dq) EXPECT_NE(std::fpclassify(x), FP_SUBNORMAL) << x;
  for (float x : dk) EXPECT_NE(std::fpclassify(x), FP_SUBNORMAL) << x;
  for (float x : dv) EXPECT_NE(std::fpclassify(x), FP_SUBNORMAL) << x;
  for (int64_t e = 0; e < D; ++e) {
    EXPECT_EQ(dv[D + e], 0.0f) << e;  // P(key 1) dO: 5.5e-42 dO without the flush
    EXPECT_EQ(dk[D + e], 0.0f) << e;
  }
  // Key 0 carries the whole row: dv row 0 = dO (P = 1).
  for (int64_t e = 0; e < D; ++e) EXPECT_FLOAT_EQ(dv[e], dO[e]) << e;
}

TEST(AttentionBackward, ValidationNamesTheArgument) {
  fixture<double> f;
  build(f, spec{4, 5, 8, 2, 1, scheme::none, mask::none, 1});
  std::vector<double> out(4 * 2 * 8), lse(8), dO(out.size()), dq(out.size()), dk(5 * 8), dv(5 * 8),
      dt5(64);  // a T5 table's gradient (32, 2), asked for with no T5 on
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
  g2.named = {{"t5_table", dt5}};
  expect_msg(g2, "dt5_table was requested but no scheme on in this call");
  g2 = g;
  double dal[2];
  g2.named = {{"alibi", {}, dal}};
  expect_msg(g2, "dalibi was requested but no scheme on in this call");
}

TEST(AttentionBackward, ReferenceSelectableAtRunTime) {
  fixture<float> f;
  build(f, spec{9, 20, 16, 4, 2, scheme::all, mask::everything, 8});
  auto p = f.p;
  p.out = f.out_fast.data();
  p.lse = f.lse_fast.data();
  attention_tiled(p);
  const auto dout = random_normal<float>(f.out_fast.size(), 3);
  grads<float> a(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  grads<float> b(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  attention_backward_reference(p, a.g);
  ::setenv("POSENC_REFERENCE", "1", 1);
  attention_backward(p, b.g);
  ::unsetenv("POSENC_REFERENCE");
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dnamed, b.dnamed);
}

// Attention sinks: the tiled backward against the reference (dq, dk, dv, dsinks), and the
// reference's dsinks against finite differences, every scheme but CoPE.
TEST(AttentionBackward, SinksAgainstReferenceAndFiniteDifferences) {
  run_group("sinks_backward", scheme_count() - 1, false);
  run_group("sinks_grad", scheme_count() - 1, true);
}
