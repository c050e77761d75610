// Self-Extend and Dual Chunk Attention, the schemes that place RoPE per (query, key) pair
// (src/attention/attention_rope_pairs.cpp; the fast path against the reference, the gradients
// against finite differences, run by the case tables' groups of every scheme reached by name):
//   1. the regions and positions against the papers' and vLLM's formulas, written out here;
//   2. the peers run unchanged: LongLM's self_extend_forward (tests/golden/self_extend) and
//      vLLM's DualChunkRotaryEmbedding and dual-chunk attention (tests/golden/dca);
//   3. reductions to plain RoPE attention (the tiled path, other code): Self-Extend with G = 1 or
//      a window past every distance, DCA with one chunk;
//   4. errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"

using namespace posenc;
using json = nlohmann::json;

namespace {

json load_golden(const char* rel) {
  std::ifstream in(std::filesystem::path(POSENC_SOURCE_DIR) / rel);
  EXPECT_TRUE(in) << rel;
  return json::parse(in);
}

// (T, H, D) nested lists -> flat.
std::vector<double> flat(const json& x) {
  std::vector<double> out;
  for (const auto& t : x)
    for (const auto& h : t)
      for (const auto& d : h) out.push_back(d.get<double>());
  return out;
}

rope_freqs freqs_for(int64_t D, double theta) {
  rope_config rc;
  rc.head_dim = D;
  rc.rotary_dim = D;
  rc.theta = theta;
  return rope_frequencies(rc);
}

// One causal attention call over T = S tokens at positions 0 .. S - 1 with RoPE and, when
// `scheme` is not empty, that per-pair scheme with `params`.
template <typename Real>
std::vector<Real> attend(const std::vector<Real>& q, const std::vector<Real>& k,
                         const std::vector<Real>& v, int64_t S, int64_t Hq, int64_t Hkv, int64_t D,
                         const rope_freqs& f, rope_angle angle, const std::string& scheme,
                         std::vector<std::pair<std::string, double>> params,
                         bool reference = false) {
  std::vector<Real> out(S * Hq * D, Real(-7));
  attention_params<Real> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
  p.T = p.S = S, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.causal = true;
  p.pos.named = {rope_scheme(f, rope_layout::half, angle)};
  if (!scheme.empty()) p.pos.named.push_back({scheme, std::move(params)});
  if (reference)
    attention_reference(p);
  else
    attention_tiled(p);
  return out;
}

using params_t = std::vector<std::pair<std::string, double>>;
std::vector<double> args_of(const scheme_decl& d, const params_t& given, int64_t Hq) {
  return named_scheme_args(d, given, Hq);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// A StreamingLLM case: S tokens of random q, k, v (one kv head, 2 query heads, D = 16) and the
// scheme's attention over them with n sinks and window W, the output the two StreamingLLM tests
// hold a step-by-step cache against.
struct streaming_case {
  static constexpr int64_t S = 30, Hq = 2, Hkv = 1, D = 16;
  std::vector<double> q, k, v, out;
  rope_freqs f = freqs_for(D, 10000);
  streaming_case(uint64_t seed, int64_t n, int64_t W)
      : q(S * Hq * D), k(S * Hkv * D), v(S * Hkv * D) {
    rng r(seed);
    for (auto* x : {&q, &k, &v})
      for (auto& e : *x) e = r.normal();
    out = attend<double>(q, k, v, S, Hq, Hkv, D, f, rope_angle::exact, "streaming_llm",
                         {{"streaming_sink_tokens", double(n)}, {"streaming_window", double(W)}});
  }
};

}  // namespace

// (1) Self-Extend (Jin et al. 2024, sec. 3.2): neighbours (qpos - kpos < w) keep their
// positions; the others sit at qpos // G + w - w // G and kpos // G.
TEST(RopePairs, SelfExtendRegionsAndPositions) {
  const scheme_decl& d = scheme_decl_of("self_extend");
  const auto a = args_of(d, {{"self_extend_group", 4}, {"self_extend_window", 8}}, 2);
  ASSERT_EQ(rope_pairs_regions(d), 2);
  EXPECT_STREQ(rope_pairs_region_name(d, 0), "neighbour");
  for (int64_t qp = 0; qp < 80; ++qp)
    for (int64_t kp = 0; kp <= qp; ++kp) {
      const int r = rope_pairs_region(d, a, qp, kp);
      ASSERT_EQ(r, qp - kp < 8 ? 0 : 1) << qp << " " << kp;
      const auto [x, y] = rope_pairs_positions(d, a, r, qp, kp);
      if (r == 0) {
        EXPECT_EQ(x, qp);
        EXPECT_EQ(y, kp);
      } else {
        EXPECT_EQ(x, qp / 4 + 8 - 2);
        EXPECT_EQ(y, kp / 4);
      }
    }
  // At the window's edge the grouped distance continues the neighbours' (G divides w, qpos).
  const auto [x, y] = rope_pairs_positions(d, a, 1, 40, 32);
  EXPECT_EQ(x - y, 8);
}

// DCA as vLLM's DualChunkRotaryEmbedding (chunk_len s = chunk_size - local_size): keys at
// kpos mod s; queries at qpos mod s (same chunk), min(qpos mod s + s, chunk_size) (previous
// chunk), min(2 s - 1, chunk_size) (earlier chunks).
TEST(RopePairs, DcaRegionsAndPositions) {
  const scheme_decl& d = scheme_decl_of("dca");
  const auto a = args_of(d, {{"dca_chunk_size", 24}, {"dca_local_size", 8}}, 2);
  ASSERT_EQ(rope_pairs_regions(d), 3);
  const int64_t s = 16, c = 24;
  for (int64_t qp = 0; qp < 100; ++qp)
    for (int64_t kp = 0; kp <= qp; ++kp) {
      const int64_t qc = qp / s, kc = kp / s;
      const int want = kc == qc ? 0 : kc == qc - 1 ? 1 : 2;
      const int r = rope_pairs_region(d, a, qp, kp);
      ASSERT_EQ(r, want) << qp << " " << kp;
      const auto [x, y] = rope_pairs_positions(d, a, r, qp, kp);
      EXPECT_EQ(y, kp % s);
      EXPECT_EQ(x, want == 0   ? qp % s
                   : want == 1 ? std::min(qp % s + s, c)
                               : std::min(2 * s - 1, c));
      // Every distance stays within chunk_size (the trained window).
      EXPECT_LE(x - y, c);
      EXPECT_GE(x - y, 0);
    }
}

// StreamingLLM (Xiao et al. 2024): the window keeps true positions, the sinks sit at their
// slots with the query at the cache's last slot, every other key is evicted (region -1). And the
// same attention as a rolling cache run step by step: for each query, plain RoPE attention over
// the cached keys at their slots (sinks 0 .. n - 1, recent tokens n ..), the query at its slot.
TEST(RopePairs, StreamingLlmIsARollingCacheWithPositionsInTheCache) {
  const scheme_decl& d = scheme_decl_of("streaming_llm");
  const int64_t n = 3, W = 5;
  const auto a =
      args_of(d, {{"streaming_sink_tokens", double(n)}, {"streaming_window", double(W)}}, 2);
  for (int64_t qp = 0; qp < 40; ++qp)
    for (int64_t kp = 0; kp <= qp; ++kp) {
      const int r = rope_pairs_region(d, a, qp, kp);
      ASSERT_EQ(r, qp - kp < W ? 0 : kp < n ? 1 : -1) << qp << " " << kp;
      if (r == 1) {
        const auto [x, y] = rope_pairs_positions(d, a, r, qp, kp);
        EXPECT_EQ(x, std::min(qp, n + W - 1));
        EXPECT_EQ(y, kp);
      }
    }
  const streaming_case c(5, n, W);
  const int64_t S = c.S, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const auto &q = c.q, &k = c.k, &v = c.v, &out = c.out;
  const auto& f = c.f;
  double dev = 0;
  for (int64_t i = 0; i < S; ++i) {
    // The cache after token i: the sinks, then the W most recent tokens (all of them while
    // i < n + W), at slots 0, 1, ...; the query at the last slot.
    std::vector<int64_t> tokens;
    for (int64_t j = 0; j <= i; ++j)
      if (j < n || i - j < W) tokens.push_back(j);
    const auto m = static_cast<int64_t>(tokens.size());
    std::vector<double> kc, vc;
    std::vector<int64_t> kslot(m), qslot = {m - 1};
    for (int64_t s = 0; s < m; ++s) {
      kslot[s] = s;
      for (int64_t e = 0; e < D; ++e) {
        kc.push_back(k[tokens[s] * D + e]);
        vc.push_back(v[tokens[s] * D + e]);
      }
    }
    std::vector<double> o(Hq * D);
    attention_params<double> p;
    p.q = q.data() + i * Hq * D, p.k = kc.data(), p.v = vc.data(), p.out = o.data();
    p.T = 1, p.S = m, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.causal = true;
    p.q_positions = qslot;
    p.k_positions = kslot;
    p.pos.named = {rope_scheme(f)};
    attention_tiled(p);
    for (int64_t x = 0; x < Hq * D; ++x) dev = std::max(dev, std::abs(o[x] - out[i * Hq * D + x]));
  }
  // Rotations at other (slot) positions with the same distances: a few ulp of the scores.
  EXPECT_LT(dev, 1e-13);
}

// The same StreamingLLM as a KV-cache policy: append each token, evict_streaming(n, W) (remove +
// shift), attend the token's query at the cache's last position. In exact mode the keys are
// rotated afresh at their cache positions; in rerotate mode (llama.cpp's K-shift) turned by the
// shifts, a few roundings in double.
TEST(RopePairs, StreamingLlmCachePolicyMatchesTheScheme) {
  const int64_t n = 3, W = 5;
  const streaming_case c(9, n, W);
  const int64_t S = c.S, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const auto &q = c.q, &k = c.k, &v = c.v, &want = c.out;
  const auto& f = c.f;
  for (kv_shift_mode mode : {kv_shift_mode::exact, kv_shift_mode::rerotate}) {
    attention_position<double> pos;
    pos.named = {rope_scheme(f)};
    kv_cache<double> cache(n + W + 1, Hkv, D, pos, 0, kv_storage::f32, mode);
    double dev = 0;
    int64_t forgotten = 0;
    for (int64_t i = 0; i < S; ++i) {
      cache.append(&k[i * Hkv * D], &v[i * Hkv * D], 1);
      forgotten += cache.evict_streaming(n, W);
      ASSERT_EQ(cache.size(), std::min(i + 1, n + W));
      ASSERT_EQ(cache.next_position(), cache.size());
      std::vector<double> o(Hq * D);
      attention_params<double> p;
      p.q = &q[i * Hq * D], p.out = o.data();
      p.T = 1, p.Hq = Hq, p.D = D, p.causal = true;
      attention_forward_cached(p, cache);
      for (int64_t x = 0; x < Hq * D; ++x)
        dev = std::max(dev, std::abs(o[x] - want[i * Hq * D + x]));
    }
    EXPECT_EQ(forgotten, S - (n + W));
    EXPECT_LT(dev, mode == kv_shift_mode::exact ? 1e-13 : 1e-12)
        << (mode == kv_shift_mode::exact ? "exact" : "rerotate");
  }
}

// (2) LongLM's self_extend_forward run unchanged (tests/golden/self_extend/longlm.json): the
// Llama_4_40.py cases (integer group offset, as here) and the Llama.py ones where G divides w
// (its true-division offset w - w / G is then the same integer). transformers 4.38's float32
// rotary tables = rope_angle::hf_f32; the patch's softmax is float32 (a few 2^-24 per weight).
TEST(RopePairs, SelfExtendMatchesLongLM) {
  const json g = load_golden("tests/golden/self_extend/longlm.json");
  const int64_t S = g["config"]["seq_len"], Hq = g["config"]["num_heads"],
                D = g["config"]["head_dim"];
  const auto f = freqs_for(D, g["config"]["rope_theta"]);
  int compared = 0;
  for (const auto& c : g["cases"]) {
    const std::string file = c["file"];
    const int64_t G = c["group_size_1"], w = c["group_size_2"], Hkv = c["num_kv_heads"];
    if (file.find("Llama_4_40") == std::string::npos && w % G != 0) continue;
    const auto& in = g["inputs"]["by_num_kv_heads"][std::to_string(Hkv)];
    const auto out = attend<double>(
        flat(in["q"]), flat(in["k"]), flat(in["v"]), S, Hq, Hkv, D, f, rope_angle::hf_f32,
        "self_extend", {{"self_extend_group", double(G)}, {"self_extend_window", double(w)}});
    const double dev = max_abs_diff(out, flat(c["output_before_o_proj"]));
    EXPECT_LT(dev, 1e-6) << file << " G=" << G << " w=" << w << " Hkv=" << Hkv;
    // The group positions LongLM's generator recorded.
    const scheme_decl& d = scheme_decl_of("self_extend");
    const auto a =
        args_of(d, {{"self_extend_group", double(G)}, {"self_extend_window", double(w)}}, Hq);
    for (int64_t t = 0; t < S; ++t) {
      const auto [x, y] = rope_pairs_positions(d, a, 1, t, t);
      if (file.find("Llama_4_40") != std::string::npos) {
        EXPECT_DOUBLE_EQ(double(x), c["group_query_position"][t].get<double>()) << t;
      }
      EXPECT_DOUBLE_EQ(double(y), c["group_key_position"][t].get<double>()) << t;
    }
    ++compared;
  }
  EXPECT_EQ(compared, 6);
}

// vLLM's DualChunkRotaryEmbedding (tests/golden/dca/vllm.json): its query, query_succ,
// query_inter and key are RoPE (float32 tables: hf_f32) at the positions of each region. Its
// float32 cos / sin come from torch's float32 kernels (within an ulp, 2^-24 near 1) where
// hf_f32 rounds the exact cosine of the same float32 angle once: each output entry mixes two
// inputs with |x| <= 1, so the bound is 2 * 2^-24.
TEST(RopePairs, DcaRotationsMatchVllm) {
  const json g = load_golden("tests/golden/dca/vllm.json");
  const auto& cfg = g["config"];
  const int64_t S = cfg["seq_len"], Hq = cfg["num_heads"], Hkv = cfg["num_kv_heads"],
                D = cfg["head_size"];
  const auto f = freqs_for(D, cfg["base"]);
  const scheme_decl& d = scheme_decl_of("dca");
  const auto a = args_of(d,
                         {{"dca_chunk_size", cfg["chunk_size"].get<double>()},
                          {"dca_local_size", cfg["local_size"].get<double>()}},
                         Hq);
  const auto q = flat(g["inputs"]["q"]), k = flat(g["inputs"]["k"]);
  const auto& r = g["rope"]["float64"];
  // Region 0, 1, 2 query positions for token t (kpos irrelevant for the query's position), and
  // the key's.
  const char* names[] = {"query", "query_succ", "query_inter"};
  for (int reg = 0; reg < 3; ++reg) {
    std::vector<int64_t> pos(S);
    for (int64_t t = 0; t < S; ++t) pos[t] = rope_pairs_positions(d, a, reg, t, 0).first;
    auto x = q;
    rope_apply(f, rope_layout::half, rope_angle::hf_f32, pos, x.data(), S, Hq, D, false);
    EXPECT_LE(max_abs_diff(x, flat(r[names[reg]])), 0x1p-23) << names[reg];
  }
  std::vector<int64_t> kpos(S);
  for (int64_t t = 0; t < S; ++t) kpos[t] = rope_pairs_positions(d, a, 0, t, t).second;
  auto y = k;
  rope_apply(f, rope_layout::half, rope_angle::hf_f32, kpos, y.data(), S, Hkv, D, false);
  EXPECT_LE(max_abs_diff(y, flat(r["key"])), 0x1p-23);
}

// vLLM's dual-chunk attention backend (prefill, and prefill + one decode step), with and
// without its length scaling (original_max_position_embeddings 64 > S: none; 24 < S: scores
// times m^2). Its partial attentions merge through float32 log-sum-exps (about 2^-24 relative).
TEST(RopePairs, DcaAttentionMatchesVllm) {
  const json g = load_golden("tests/golden/dca/vllm.json");
  const auto& cfg = g["config"];
  const int64_t S = cfg["seq_len"], Hq = cfg["num_heads"], Hkv = cfg["num_kv_heads"],
                D = cfg["head_size"];
  const auto f = freqs_for(D, cfg["base"]);
  const auto q = flat(g["inputs"]["q"]), k = flat(g["inputs"]["k"]), v = flat(g["inputs"]["v"]);
  int compared = 0;
  for (const auto& c : g["attention"]) {
    const double L0 = c["original_max_position_embeddings"];
    const std::vector<std::pair<std::string, double>> params = {
        {"dca_chunk_size", cfg["chunk_size"].get<double>()},
        {"dca_local_size", cfg["local_size"].get<double>()},
        {"dca_original_max_position_embeddings", L0}};
    const auto want = flat(c["output"]);
    if (c["dtype"] == "float64") {
      const auto out = attend<double>(q, k, v, S, Hq, Hkv, D, f, rope_angle::hf_f32, "dca", params);
      EXPECT_LT(max_abs_diff(out, want), 1e-6) << c["mode"] << " L0=" << L0;
    } else {
      auto cast = [](const std::vector<double>& x) {
        return std::vector<float>(x.begin(), x.end());
      };
      const auto out = attend<float>(cast(q), cast(k), cast(v), S, Hq, Hkv, D, f,
                                     rope_angle::hf_f32, "dca", params);
      EXPECT_LT(max_abs_diff(std::vector<double>(out.begin(), out.end()), want), 2e-6) << "float32";
    }
    ++compared;
  }
  EXPECT_EQ(compared, 4);
}

// (3) Reductions to RoPE: G = 1 (the grouped positions are the true ones), a window past every
// distance (no pair is grouped), DCA with chunks longer than the sequence (one chunk). The
// per-pair path in double and float32 against the tiled RoPE kernels.
TEST(RopePairs, ReduceToRopeWhereThePositionsAreTheTrueOnes) {
  const int64_t S = 70, Hq = 4, Hkv = 2, D = 32;
  rng r(17);
  std::vector<double> q(S * Hq * D), k(S * Hkv * D), v(S * Hkv * D);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = r.normal();
  const auto f = freqs_for(D, 10000);
  const auto rope = attend<double>(q, k, v, S, Hq, Hkv, D, f, rope_angle::exact, "", {});
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> same = {
      {"self_extend", {{"self_extend_group", 1}, {"self_extend_window", 3}}},
      {"self_extend", {{"self_extend_group", 5}, {"self_extend_window", 70}}},
      {"dca", {{"dca_chunk_size", 100}, {"dca_local_size", 20}}}};
  for (const auto& [name, params] : same) {
    for (bool ref : {false, true}) {
      const auto out =
          attend<double>(q, k, v, S, Hq, Hkv, D, f, rope_angle::exact, name, params, ref);
      EXPECT_LT(max_abs_diff(out, rope), 1e-13) << name << (ref ? " reference" : " fast");
    }
    std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
    const auto a = attend<float>(qf, kf, vf, S, Hq, Hkv, D, f, rope_angle::exact, name, params);
    const auto b = attend<float>(qf, kf, vf, S, Hq, Hkv, D, f, rope_angle::exact, "", {});
    EXPECT_LT(max_abs_diff(std::vector<double>(a.begin(), a.end()),
                           std::vector<double>(b.begin(), b.end())),
              2e-5)
        << name << " float32";
  }
  // And where they are not the true ones, the output moves.
  const auto se = attend<double>(q, k, v, S, Hq, Hkv, D, f, rope_angle::exact, "self_extend",
                                 {{"self_extend_group", 4}, {"self_extend_window", 8}});
  EXPECT_GT(max_abs_diff(se, rope), 1e-3);
}

// (4) Errors: every one names the scheme and what it needs.
TEST(RopePairs, Errors) {
  const int64_t S = 6, H = 2, D = 8;
  std::vector<float> q(S * H * D, 0.5f), k(S * H * D, 0.25f), v(S * H * D, 1.f), out(S * H * D);
  const auto f = freqs_for(D, 10000);
  auto call = [&](auto&& edit) {
    attention_params<float> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
    p.T = p.S = S, p.Hq = p.Hkv = H, p.D = D, p.causal = true;
    p.pos.named = {rope_scheme(f),
                   {"self_extend", {{"self_extend_group", 2}, {"self_extend_window", 2}}}};
    edit(p);
    try {
      attention_forward(p);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(call([](auto&) {}), "");
  EXPECT_NE(call([](auto& p) {
              p.pos.named.erase(p.pos.named.begin());
            }).find("self_extend needs RoPE on"),
            std::string::npos);
  EXPECT_NE(call([](auto& p) { p.causal = false; }).find("needs causal attention"),
            std::string::npos);
  EXPECT_NE(call([](auto& p) { p.pos.keys_transformed = true; }).find("unrotated keys"),
            std::string::npos);
  EXPECT_NE(call([&](auto& p) {
              p.pos.named.push_back({"alibi", {}});
            }).find("self_extend cannot be combined with alibi"),
            std::string::npos);
  EXPECT_NE(call([](auto& p) {
              p.pos.named.push_back({"dca", {}});
            }).find("self_extend cannot be combined with dca"),
            std::string::npos);
  EXPECT_NE(call([](auto& p) {
              p.pos.named[1].params = {{"self_extend_group", 0}};
            }).find("self_extend_group must be an integer in [1, 2^40]"),
            std::string::npos);
  EXPECT_NE(call([](auto& p) {
              p.pos.named = {{"dca", {{"dca_chunk_size", 8}, {"dca_local_size", 8}}}};
            }).find("dca_local_size must be an integer in [0, dca_chunk_size)"),
            std::string::npos);
  EXPECT_NE(call([](auto& p) { p.products = attention_products::bf16; }).find("products = bf16"),
            std::string::npos);
}
