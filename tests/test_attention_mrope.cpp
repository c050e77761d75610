// M-RoPE (Wang et al. 2024, "Qwen2-VL", sec. 2.1) as the engine's q/k transform
// (mrope_scheme, src/attention/hook_mrope.cpp). The case table (scheme mrope)
// checks it against the reference and finite differences with derived tolerances; here:
//   - the engine's result is bit-identical to mrope_apply on q and k followed by attention
//     without a position scheme (forward out and lse, and the backward's dq, dk, dv against
//     the plain backward's mapped back by mrope_apply's inverse), float32 and float64, prefill
//     and decode shapes, both pair layouts, contiguous and interleaved sections, every angle
//     mode (exact and the float32 pipelines), partial rotation;
//   - text tokens (equal ids in all three rows) give RoPE's attention at those ids, bit for bit;
//   - a KV cache that takes (3, n) ids decodes like the full forward;
//   - bad ids and sections are refused with the field named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/positions/positions.hpp"

using namespace posenc;

namespace {

// Ids of `n` tokens: text, then an image of grid (1, h, w), then text (positions_mrope), offset
// by `start`; n = text + h w + rest.
std::vector<int64_t> image_ids(int64_t n, int64_t start) {
  const int64_t h = 4, w = std::max<int64_t>(1, std::min<int64_t>(6, (n - 2) / 4));
  const int64_t img = n >= 2 + h * w ? h * w : 0;
  std::vector<mrope_segment> seg = {
      {n >= 2 + h * w ? 2 : n, img ? 1 : 0, img ? h : 0, img ? w : 0}};
  if (img) seg.push_back({n - 2 - img, 0, 0, 0});
  return positions_mrope(seg, start);
}

template <typename Real>
struct mrope_case {
  int64_t T, S, Hq = 8, Hkv = 2, D = 80;
  rope_freqs fr;
  std::array<int64_t, 3> section{};
  bool interleaved = false;
  rope_layout layout = rope_layout::half;
  rope_angle angle = rope_angle::exact;
  std::vector<Real> q, k, v, dout;
  std::vector<int64_t> kids, qids, kpos, qpos;

  mrope_case(int64_t T_, int64_t S_, rope_layout layout, rope_angle angle, bool interleaved,
             bool partial, uint64_t seed)
      : T(T_), S(S_) {
    rope_config rc;
    rc.head_dim = D;
    rc.rotary_dim = partial ? 48 : D;
    rc.theta = 1000000;
    fr = rope_frequencies(rc);
    const int64_t half = rc.rotary_dim / 2;
    const int64_t hw = interleaved ? half / 3 : 3 * half / 8;
    section = {half - 2 * hw, hw, hw};
    this->interleaved = interleaved;
    this->layout = layout;
    this->angle = angle;
    rng g(seed);
    q.resize(T * Hq * D), k.resize(S * Hkv * D), v.resize(S * Hkv * D), dout.resize(T * Hq * D);
    for (auto* a : {&q, &k, &v, &dout})
      for (auto& x : *a) x = static_cast<Real>(g.uniform() * 2 - 1);
    // Keys: the sequence's ids; queries: the last T tokens' (3 rows of T).
    kids = image_ids(S, 7);
    for (int r = 0; r < 3; ++r)
      qids.insert(qids.end(), kids.begin() + r * S + (S - T), kids.begin() + (r + 1) * S);
    kpos.assign(kids.begin(), kids.begin() + S);  // the temporal row drives the masks
    qpos.assign(kpos.end() - T, kpos.end());
  }
  // M-RoPE at the case's ids (or the given ones).
  named_scheme mrope(std::span<const int64_t> q_ids, std::span<const int64_t> k_ids) const {
    return mrope_scheme(fr, section, interleaved, layout, angle, q_ids, k_ids);
  }
  named_scheme mrope() const { return mrope(qids, kids); }
  attention_params<Real> params() const {
    attention_params<Real> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data();
    p.T = T, p.S = S, p.Hq = Hq, p.Hkv = Hkv, p.D = D;
    p.causal = true;
    p.q_positions = qpos, p.k_positions = kpos;
    return p;
  }
};

template <typename Real>
int bit_identical_cases() {
  int cases = 0;
  for (const auto& [T, S] : {std::pair<int64_t, int64_t>{64, 130}, {33, 33}, {1, 300}, {3, 70}})
    for (const auto layout : {rope_layout::half, rope_layout::interleaved})
      for (const auto angle :
           {rope_angle::exact, rope_angle::f32, rope_angle::hf_f32, rope_angle::ggml_f32})
        for (const bool interleaved : {false, true})
          for (const bool partial : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << "T=" << T << " S=" << S << " layout " << static_cast<int>(layout)
                         << " angle " << static_cast<int>(angle) << " interleaved " << interleaved
                         << " partial " << partial);
            mrope_case<Real> c(T, S, layout, angle, interleaved, partial,
                               static_cast<uint64_t>(9000 + cases));
            auto p = c.params();
            std::vector<Real> hooked(T * c.Hq * c.D), lse_hooked(T * c.Hq);
            p.out = hooked.data(), p.lse = lse_hooked.data();
            p.pos.named = {c.mrope()};
            attention_forward(p);

            const auto comp = mrope_components(c.section, interleaved, c.fr.rotary_dim / 2);
            std::vector<Real> qr = c.q, kr = c.k;
            mrope_apply(c.fr, comp, layout, angle, c.qids, qr.data(), T, c.Hq, c.D);
            mrope_apply(c.fr, comp, layout, angle, c.kids, kr.data(), S, c.Hkv, c.D);
            auto p2 = c.params();
            p2.q = qr.data(), p2.k = kr.data();
            std::vector<Real> plain(T * c.Hq * c.D), lse_plain(T * c.Hq);
            p2.out = plain.data(), p2.lse = lse_plain.data();
            attention_forward(p2);
            EXPECT_EQ(hooked, plain);
            EXPECT_EQ(lse_hooked, lse_plain);

            // Backward: dq = R^T dq', dk = R^T dk' (mrope_apply's inverse), dv as is.
            std::vector<Real> dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
            std::vector<Real> dq2(c.q.size()), dk2(c.k.size()), dv2(c.v.size());
            attention_grads<Real> g;
            g.out = hooked.data(), g.lse = lse_hooked.data(), g.dout = c.dout.data();
            g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
            attention_backward(p, g);
            attention_grads<Real> g2 = g;
            g2.out = plain.data(), g2.lse = lse_plain.data();
            g2.dq = dq2.data(), g2.dk = dk2.data(), g2.dv = dv2.data();
            attention_backward(p2, g2);
            mrope_apply(c.fr, comp, layout, angle, c.qids, dq2.data(), T, c.Hq, c.D, true);
            mrope_apply(c.fr, comp, layout, angle, c.kids, dk2.data(), S, c.Hkv, c.D, true);
            EXPECT_EQ(dq, dq2);
            EXPECT_EQ(dk, dk2);
            EXPECT_EQ(dv, dv2);
            ++cases;
          }
  return cases;
}

}  // namespace

TEST(AttentionMrope, HookIsBitIdenticalToMropeApplyThenAttention) {
  EXPECT_EQ(bit_identical_cases<float>(), 128);
  EXPECT_EQ(bit_identical_cases<double>(), 128);
}

// A text-only sequence has the same id in all three rows: M-RoPE is then RoPE at that id, and
// the engine's M-RoPE attention equals its RoPE attention (whose fused float32 path is itself
// bit-identical to rope_apply followed by attention), bit for bit.
TEST(AttentionMrope, TextTokensGiveRopeAttention) {
  for (const bool interleaved : {false, true}) {
    mrope_case<float> c(17, 40, rope_layout::half, rope_angle::exact, interleaved, true, 5);
    for (int r = 0; r < 3; ++r) {
      std::copy(c.kpos.begin(), c.kpos.end(), c.kids.begin() + r * c.S);
      std::copy(c.qpos.begin(), c.qpos.end(), c.qids.begin() + r * c.T);
    }
    auto p = c.params();
    std::vector<float> a(c.T * c.Hq * c.D), b(a.size());
    p.out = a.data();
    p.pos.named = {c.mrope()};
    attention_forward(p);
    auto p2 = c.params();
    p2.out = b.data();
    p2.pos.named = {rope_scheme(c.fr)};
    attention_forward(p2);
    EXPECT_EQ(a, b) << "interleaved " << interleaved;
  }
}

// Prefill 13 tokens (text, an image, text), then decode one token at a time with (3, 1) ids,
// against the full forward. Same bits per rotated key row (mrope_apply works per token), so
// only the summation grouping can differ: the bound of tests/test_kv_cache.cpp, (2S + 8) u V.
TEST(AttentionMrope, KvCacheTakesThreeIdsPerToken) {
  mrope_case<float> c(70, 70, rope_layout::half, rope_angle::exact, false, false, 11);
  auto p = c.params();
  std::vector<float> ref(c.T * c.Hq * c.D), out(ref.size());
  p.out = ref.data();
  p.pos.named = {c.mrope()};
  attention_forward(p);

  attention_position<float> pos;
  pos.named = {c.mrope({}, {})};
  kv_cache<float> cache(c.S, c.Hkv, c.D, pos, 7);
  EXPECT_EQ(cache.ids_per_token(), 3);
  int64_t t = 0;
  while (t < c.S) {
    const int64_t n = t == 0 ? 13 : 1;
    std::vector<int64_t> ids;
    for (int r = 0; r < 3; ++r)
      ids.insert(ids.end(), c.kids.begin() + r * c.S + t, c.kids.begin() + r * c.S + t + n);
    cache.append(&c.k[t * c.Hkv * c.D], &c.v[t * c.Hkv * c.D], n, ids);
    attention_params<float> pc;
    pc.q = &c.q[t * c.Hq * c.D], pc.out = &out[t * c.Hq * c.D];
    pc.T = n, pc.Hq = c.Hq, pc.D = c.D, pc.causal = true, pc.pos = pos;
    attention_forward_cached(pc, cache);  // q ids: the last n tokens' from the cache
    t += n;
  }
  EXPECT_TRUE(std::equal(c.kpos.begin(), c.kpos.end(), cache.positions().begin()));
  EXPECT_EQ(cache.next_position(), *std::max_element(c.kids.begin(), c.kids.end()) + 1);
  double V = 0, err = 0;
  for (float x : c.v) V = std::max(V, double(std::abs(x)));
  for (size_t n = 0; n < ref.size(); ++n)
    err = std::max(err, std::abs(double(out[n]) - double(ref[n])));
  EXPECT_LE(err, (2 * c.S + 8) * std::numeric_limits<float>::epsilon() / 2 * V);

  // Text appended without ids continues at the next position in all three rows.
  kv_cache<float> c2(4, c.Hkv, c.D, pos);
  const auto used = c2.append(c.k.data(), c.v.data(), 2);
  EXPECT_EQ(used, (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_THROW(c2.append(c.k.data(), c.v.data(), 1, std::vector<int64_t>{5}), invalid_argument);
  EXPECT_THROW(c2.append(c.k.data(), c.v.data(), 1, std::vector<int64_t>{5, -1, 5}),
               invalid_argument);
  EXPECT_EQ(c2.size(), 2);
}

TEST(AttentionMrope, BadIdsAndSectionsAreRefusedByName) {
  mrope_case<float> c(5, 9, rope_layout::half, rope_angle::exact, false, false, 3);
  std::vector<float> out(c.T * c.Hq * c.D);
  auto expect_error = [&](auto edit, const std::string& msg) {
    auto p = c.params();
    p.out = out.data();
    p.pos.named = {c.mrope()};
    edit(p);
    try {
      attention_forward(p);
      ADD_FAILURE() << "no error, expected " << msg;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
  };
  const std::vector<int64_t> short_ids(3 * c.T - 1, 0);
  expect_error([&](auto& p) { p.pos.named = {c.mrope(short_ids, c.kids)}; },
               "mrope_q_ids must have shape (3, T) = (3, 5)");
  expect_error([&](auto& p) { p.pos.named = {c.mrope({}, c.kids)}; },
               "mrope_q_ids (3, 5) is required with mrope");
  std::vector<int64_t> neg = c.kids;
  neg[c.S + 2] = -1;
  expect_error([&](auto& p) { p.pos.named = {c.mrope(c.qids, neg)}; },
               "mrope_k_ids[1, 2] must be in [0, 2^62]");
  expect_error([&](auto& p) { p.pos.named[0].params[0].second = 1; }, "mrope section");
  expect_error([&](auto& p) { p.pos.named.push_back(rope_scheme(c.fr)); },
               "rope cannot be combined with mrope");
}

TEST(AttentionMrope, CopeWithMropeIsRefusedNamingBoth) {
  // CoPE's path applies no q/k transform: M-RoPE next to it was once dropped without a word
  // (the output was CoPE's alone). Every entry point must refuse the pair by name.
  mrope_case<float> c(5, 9, rope_layout::half, rope_angle::exact, false, false, 4);
  std::vector<float> out(c.T * c.Hq * c.D);
  const std::vector<float> emb(6 * c.D, 0.25f);
  auto p = c.params();
  p.out = out.data();
  p.pos.named = {c.mrope(), {"cope", {}, {named_tensor{"cope", {6, c.D}, emb, {}}}}};
  try {
    attention_forward(p);
    ADD_FAILURE() << "cope + mrope ran";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cope cannot be combined with mrope"), std::string::npos)
        << e.what();
  }
  p.pos.named.erase(p.pos.named.begin());
  EXPECT_NO_THROW(attention_forward(p));  // CoPE alone still runs
}
