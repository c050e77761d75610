// KV cache: decoding token by token (and prefill + decode) equals the full causal forward for
// every position scheme, positions continue after the prefix, and capacity is enforced.
//
// Tolerance: both sides run the tiled kernel on bit-identical rotated keys (rope_apply works
// per token row, so rotating all S keys at once or one at a time gives the same bits) with the
// same key-block boundaries (blocks start at key 0 in both), so only the query-block grouping
// differs, which does not change any per-row sum. We still allow the summation-order bound of
// tests/test_attention.cpp, (2S + 2K + 8) u V with u the unit roundoff, V = max|v| + max|a^V|,
// and report the measured value (expected 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "posenc/attention/kv_cache.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/shaw.hpp"
#include "posenc/encodings/t5_bias.hpp"

using namespace posenc;

namespace {

enum class scheme { none, rope_half, rope_interleaved, alibi, t5, shaw, all, xpos, temperature };

template <typename Real>
struct decode_case {
  int64_t N = 70, Hq = 4, Hkv = 2, D = 48;
  std::vector<Real> q, k, v;
  rope_freqs freqs;
  std::vector<double> slopes;
  t5_bias_table t5;
  std::vector<Real> t5w;  // t5's table in Real, viewed by pos.named
  shaw_tables shaw;
  std::vector<Real> shaw_k, shaw_v;  // shaw's tables in Real, viewed by pos.named
  attention_position<Real> pos;
  rope_layout layout = rope_layout::half;  // RoPE's, when freqs are set
  double V = 0;
  int64_t K = 0;

  decode_case(scheme s, uint64_t seed) {
    rng r(seed);
    auto fill = [&](std::vector<Real>& x, int64_t n) {
      x.resize(n);
      for (auto& e : x) e = static_cast<Real>(r.normal());
    };
    fill(q, N * Hq * D);
    fill(k, N * Hkv * D);
    fill(v, N * Hkv * D);
    for (auto x : v) V = std::max(V, std::abs(double(x)));
    if (s == scheme::rope_half || s == scheme::rope_interleaved || s == scheme::all) {
      rope_config c;
      c.head_dim = D;
      c.rotary_dim = s == scheme::rope_interleaved ? 32 : D;
      c.theta = 500000;
      freqs = rope_frequencies(c);
      layout = s == scheme::rope_half ? rope_layout::half : rope_layout::interleaved;
      pos.named.push_back(rope_scheme(freqs, layout));
    }
    if (s == scheme::alibi || s == scheme::all) {  // float64 slopes in every call
      slopes = alibi_slopes(Hq);
      pos.named.push_back({"alibi", {}, {named_tensor{"alibi", {Hq}, {}, slopes}}});
    }
    if (s == scheme::t5 || s == scheme::all) {
      t5_params tp;
      tp.bidirectional = false;
      tp.num_buckets = 16;
      tp.max_distance = 40;
      t5 = t5_init(tp, Hq, seed + 1, 1.0);
      t5w.assign(t5.weights.begin(), t5.weights.end());
      named_tensor t{"t5_table", {tp.num_buckets, Hq}, {}, {}};
      if constexpr (std::is_same_v<Real, float>)
        t.f32 = t5w;
      else
        t.f64 = t5w;
      pos.named.push_back({"t5", {{"t5_max_distance", double(tp.max_distance)}}, {t}});
    }
    if (s == scheme::xpos)
      pos.named = {{"xpos", {{"xpos_scale_base", 64.0}, {"xpos_center", 30.0}}}};
    if (s == scheme::temperature) pos.named = {temperature_scheme({8.0, 0.5})};
    if (s == scheme::shaw || s == scheme::all) {
      shaw = shaw_init(5, D, seed + 2, 0.5);
      shaw_k.assign(shaw.keys.begin(), shaw.keys.end());
      shaw_v.assign(shaw.values.begin(), shaw.values.end());
      named_tensor tk{"shaw_keys", {2 * shaw.clip + 1, D}, {}, {}}, tv = tk;
      tv.name = "shaw_values";
      if constexpr (std::is_same_v<Real, float>)
        tk.f32 = shaw_k, tv.f32 = shaw_v;
      else
        tk.f64 = shaw_k, tv.f64 = shaw_v;
      pos.named.push_back({"shaw", {}, {tk, tv}});
      K = 5;
      double m = 0;
      for (auto x : shaw.values) m = std::max(m, std::abs(double(x)));
      V += m;
    }
  }

  // Full causal forward over all N tokens at positions start..start+N-1.
  std::vector<Real> full(int64_t start) {
    std::vector<Real> out(N * Hq * D);
    std::vector<int64_t> kp(N);
    for (int64_t j = 0; j < N; ++j) kp[j] = start + j;
    attention_params<Real> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
    p.T = N, p.S = N, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.causal = true, p.pos = pos;
    p.k_positions = kp;
    attention_forward(p);
    return out;
  }

  // Prefill `prefill` tokens at once, then decode one token at a time through the cache.
  std::vector<Real> decoded(int64_t prefill, int64_t start) {
    std::vector<Real> out(N * Hq * D);
    kv_cache<Real> cache(N, Hkv, D, pos, start);
    int64_t t = 0;
    while (t < N) {
      const int64_t n = t == 0 && prefill > 0 ? prefill : 1;
      const auto used = cache.append(&k[t * Hkv * D], &v[t * Hkv * D], n);
      EXPECT_EQ(used.front(), start + t);  // continues after the prefix
      attention_params<Real> p;
      p.q = &q[t * Hq * D], p.out = &out[t * Hq * D];
      p.T = n, p.Hq = Hq, p.D = D, p.causal = true, p.pos = pos;
      attention_forward_cached(p, cache);
      t += n;
    }
    EXPECT_EQ(cache.size(), N);
    return out;
  }
};

template <typename Real>
void check_scheme(scheme s) {
  SCOPED_TRACE(static_cast<int>(s));
  decode_case<Real> c(s, 40 + static_cast<int>(s));
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  const double tol = (2 * c.N + 2 * c.K + 8) * u * c.V;
  for (int64_t start : {int64_t{0}, int64_t{1000}}) {
    const auto ref = c.full(start);
    for (int64_t prefill : {int64_t{0}, int64_t{13}}) {
      const auto got = c.decoded(prefill, start);
      double err = 0;
      for (size_t n = 0; n < ref.size(); ++n)
        err = std::max(err, std::abs(double(got[n]) - double(ref[n])));
      EXPECT_LE(err, tol) << "start " << start << " prefill " << prefill;
    }
  }
}

}  // namespace

TEST(KvCache, DecodeEqualsFullForEveryScheme) {
  for (scheme s : {scheme::none, scheme::rope_half, scheme::rope_interleaved, scheme::alibi,
                   scheme::t5, scheme::shaw, scheme::all, scheme::xpos, scheme::temperature}) {
    check_scheme<float>(s);
    check_scheme<double>(s);
  }
}

// The seeds' warning made concrete: resetting each new token to position 0 instead of
// continuing after the prefix changes the output under RoPE (by O(1), not rounding).
TEST(KvCache, ResettingPositionsIsWrong) {
  decode_case<double> c(scheme::rope_half, 9);
  const auto ref = c.full(0);
  kv_cache<double> cache(c.N, c.Hkv, c.D, c.pos);
  cache.append(c.k.data(), c.v.data(), c.N - 1);
  cache.append(&c.k[(c.N - 1) * c.Hkv * c.D], &c.v[(c.N - 1) * c.Hkv * c.D], 1,
               std::vector<int64_t>{0});  // the bug: new token at position 0
  std::vector<double> out(c.Hq * c.D);
  attention_params<double> p;
  p.q = &c.q[(c.N - 1) * c.Hq * c.D], p.out = out.data();
  p.T = 1, p.Hq = c.Hq, p.D = c.D, p.causal = true, p.pos = c.pos;
  const int64_t qp[] = {0};
  p.q_positions = qp;
  attention_forward_cached(p, cache);
  double diff = 0;
  for (int64_t d = 0; d < c.Hq * c.D; ++d)
    diff = std::max(diff, std::abs(out[d] - ref[(c.N - 1) * c.Hq * c.D + d]));
  EXPECT_GT(diff, 1e-3);
}

TEST(KvCache, CapacityAndPositions) {
  rope_config rc;
  rc.head_dim = 8;
  rc.rotary_dim = 8;
  const auto f = rope_frequencies(rc);
  attention_position<float> pos;
  pos.named = {rope_scheme(f)};
  kv_cache<float> cache(4, 1, 8, pos, 7);
  std::vector<float> k(5 * 8, 1.0f), v(5 * 8, 2.0f);
  EXPECT_EQ(cache.next_position(), 7);
  EXPECT_EQ(cache.append(k.data(), v.data(), 3), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(cache.next_position(), 10);
  try {
    cache.append(k.data(), v.data(), 2);
    FAIL() << "append past capacity must throw";
  } catch (const invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("capacity 4"), std::string::npos) << m;
    EXPECT_NE(m.find("holds 3"), std::string::npos) << m;
  }
  EXPECT_EQ(cache.size(), 3);  // unchanged by the rejected append
  // Keys are stored rotated: position 7 of an all-ones key differs from the input...
  EXPECT_NE(cache.keys()[0], 1.0f);
  // ...values are stored as given.
  EXPECT_EQ(cache.values()[0], 2.0f);
  EXPECT_EQ(cache.append(k.data(), v.data(), 1), (std::vector<int64_t>{10}));
  EXPECT_EQ(cache.size(), 4);
  EXPECT_THROW(cache.append(k.data(), v.data(), 1), invalid_argument);
  EXPECT_EQ(cache.positions().size(), 4u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(cache.next_position(), 7);
  EXPECT_THROW(kv_cache<float>(0, 1, 8), invalid_argument);
  EXPECT_THROW(kv_cache<float>(4, 0, 8), invalid_argument);
  EXPECT_THROW(kv_cache<float>(4, 1, 8, {}, -1), invalid_argument);
  EXPECT_THROW(cache.append(k.data(), v.data(), 1, std::vector<int64_t>{-3}), invalid_argument);
  // attention_forward_cached rejects keys of its own.
  std::vector<float> q(8), out(8);
  cache.append(k.data(), v.data(), 1);
  attention_params<float> p;
  p.q = q.data(), p.out = out.data(), p.T = 1, p.Hq = 1, p.D = 8;
  p.k = k.data();
  EXPECT_THROW(attention_forward_cached(p, cache), invalid_argument);
  p.k = nullptr;
  p.D = 4;
  EXPECT_THROW(attention_forward_cached(p, cache), invalid_argument);
  p.D = 8;
  EXPECT_NO_THROW(attention_forward_cached(p, cache));
}

// The storage is head-major, over appends of several tokens: token j of kv head hk at
// (hk * slots + j) * D with slots = capacity for D = 4 (rows); for D = 16 (a multiple of 8) the
// slots are rounded up to whole 8-key blocks and element e of key j sits at
// hk * slots * D + (j / 8) * 8 D + (e / 8) * 64 + (j % 8) * 8 + e % 8, the values still rows.
TEST(KvCache, StorageIsHeadMajorRowsOrEightKeyBlocks) {
  for (int64_t D : {4, 16}) {
    SCOPED_TRACE(D);
    const int64_t cap = 10, Hkv = 3, slots = D == 4 ? 10 : 16;
    kv_cache<double> cache(cap, Hkv, D);
    EXPECT_EQ(cache.keys_blocked(), D == 16);
    EXPECT_EQ(cache.head_capacity(), slots);
    EXPECT_EQ(cache.head_stride(), slots * D);
    auto val = [&](int64_t j, int64_t hk, int64_t e, bool is_v) {
      return 1000.0 * j + 100.0 * hk + e + (is_v ? 0.5 : 0.0);
    };
    int64_t j0 = 0;
    for (int64_t n : {2, 3, 1, 4}) {
      std::vector<double> k(n * Hkv * D), v(n * Hkv * D);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t hk = 0; hk < Hkv; ++hk)
          for (int64_t e = 0; e < D; ++e) {
            k[(t * Hkv + hk) * D + e] = val(j0 + t, hk, e, false);
            v[(t * Hkv + hk) * D + e] = val(j0 + t, hk, e, true);
          }
      cache.append(k.data(), v.data(), n);
      j0 += n;
    }
    for (int64_t j = 0; j < j0; ++j)
      for (int64_t hk = 0; hk < Hkv; ++hk) {
        EXPECT_EQ(cache.row_offset(j, hk), (hk * slots + j) * D);
        for (int64_t e = 0; e < D; ++e) {
          const int64_t at = D == 4
                                 ? (hk * slots + j) * D + e
                                 : hk * slots * D + j / 8 * 8 * D + e / 8 * 64 + j % 8 * 8 + e % 8;
          EXPECT_EQ(cache.key_offset(j, hk, e), at);
          EXPECT_EQ(cache.keys()[at], val(j, hk, e, false));
          EXPECT_EQ(cache.values()[(hk * slots + j) * D + e], val(j, hk, e, true));
        }
      }
  }
}

// Keys in 8-key blocks give the same bits as the same keys in rows: decode and a few-row step
// through a blocked cache (float32, float16, bfloat16; D = 48, 70 tokens: a partial last block)
// against attention_forward on the cache's keys copied out to head-major rows, same stride.
TEST(KvCache, BlockedKeysDecodeToTheSameBitsAsRows) {
  for (kv_storage kv : {kv_storage::f32, kv_storage::f16, kv_storage::bf16}) {
    SCOPED_TRACE(name(kv));
    decode_case<float> c(scheme::all, 77);
    const int64_t N = c.N, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
    kv_cache<float> cache(N, Hkv, D, c.pos, 0, kv);
    ASSERT_TRUE(cache.keys_blocked());
    cache.append(c.k.data(), c.v.data(), N);
    for (int64_t T : {1, 4}) {
      std::vector<float> got(T * Hq * D), want(T * Hq * D);
      attention_params<float> p;
      p.q = &c.q[(N - T) * Hq * D], p.out = got.data();
      p.T = T, p.Hq = Hq, p.D = D, p.causal = true, p.pos = c.pos;
      attention_forward_cached(p, cache);
      // The same keys as rows (row_offset), values as stored.
      const int64_t n = Hkv * cache.head_stride();
      std::vector<float> k(n), v(n);
      std::vector<uint16_t> k16(n), v16(n);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t hk = 0; hk < Hkv; ++hk)
          for (int64_t e = 0; e < D; ++e) {
            const int64_t r = cache.row_offset(j, hk) + e, b = cache.key_offset(j, hk, e);
            if (kv == kv_storage::f32) {
              k[r] = cache.keys()[b];
              v[r] = cache.values()[r];
            } else {
              k16[r] = cache.keys16()[b];
              v16[r] = cache.values16()[r];
            }
          }
      attention_params<float> r;
      r.q = p.q, r.out = want.data();
      r.kv = kv;
      if (kv == kv_storage::f32)
        r.k = k.data(), r.v = v.data();
      else
        r.k16 = k16.data(), r.v16 = v16.data();
      r.kv_head_stride = cache.head_stride();
      r.T = T, r.S = N, r.Hq = Hq, r.Hkv = Hkv, r.D = D, r.causal = true, r.pos = c.pos;
      r.pos.keys_transformed = true;
      std::vector<int64_t> kp(cache.positions().begin(), cache.positions().end());
      r.k_positions = kp;
      std::vector<int64_t> qp(kp.end() - T, kp.end());
      r.q_positions = qp;
      attention_forward(r);
      EXPECT_TRUE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) << T;
    }
  }
}

// Half-precision storage: the cache transforms each key in float32, then rounds keys and values
// to float16 / bfloat16. It stores exactly those bits (rope_apply at the positions, then the
// same rounding, computed here independently), and decoding through it equals the full causal
// forward on them within the summation-order bound of the float32 tests above (the decode path
// sums each q.k in a different order than the prefill's block product); the cache holds 2 bytes
// per element and no float copy.
TEST(KvCache, HalfPrecisionStorageDecodesLikeTheFullForwardOnTheStoredValues) {
  for (kv_storage kv : {kv_storage::f16, kv_storage::bf16})
    for (scheme s : {scheme::none, scheme::rope_half, scheme::rope_interleaved, scheme::all}) {
      SCOPED_TRACE(name(kv) + " scheme " + std::to_string(static_cast<int>(s)));
      decode_case<float> c(s, 900 + static_cast<int>(s));
      const int64_t N = c.N, Hq = c.Hq, Hkv = c.Hkv, D = c.D, start = 7;
      std::vector<int64_t> kp(N);
      for (int64_t j = 0; j < N; ++j) kp[j] = start + j;
      // The stored values, computed independently of the cache.
      std::vector<float> kr = c.k;
      if (c.freqs.rotary_dim > 0)
        rope_apply(c.freqs, c.layout, rope_angle::exact, kp, kr.data(), N, Hkv, D);
      std::vector<uint16_t> k16(kr.size()), v16(c.v.size());
      to_half(kv, kr, k16);
      to_half(kv, c.v, v16);
      std::vector<float> ref(N * Hq * D);
      attention_params<float> p;
      p.q = c.q.data(), p.out = ref.data();
      p.kv = kv, p.k16 = k16.data(), p.v16 = v16.data();
      p.T = N, p.S = N, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.causal = true, p.pos = c.pos;
      p.pos.keys_transformed = true;
      p.k_positions = kp;
      attention_forward(p);

      std::vector<float> out(N * Hq * D);
      kv_cache<float> cache(N, Hkv, D, c.pos, start, kv);
      EXPECT_EQ(cache.keys(), nullptr);
      ASSERT_NE(cache.keys16(), nullptr);
      for (int64_t t = 0; t < N; ++t) {
        cache.append(&c.k[t * Hkv * D], &c.v[t * Hkv * D], 1);
        attention_params<float> pc;
        pc.q = &c.q[t * Hq * D], pc.out = &out[t * Hq * D];
        pc.T = 1, pc.Hq = Hq, pc.D = D, pc.causal = true, pc.pos = c.pos;
        attention_forward_cached(pc, cache);
      }
      // Stored head-major: value j of head hk at row_offset(j, hk), its key's elements at
      // key_offset(j, hk, e) (8-key blocks: D = 48).
      ASSERT_TRUE(cache.keys_blocked());
      for (int64_t j = 0; j < N; ++j)
        for (int64_t hk = 0; hk < Hkv; ++hk) {
          const int64_t x = (j * Hkv + hk) * D, y = cache.row_offset(j, hk);
          for (int64_t e = 0; e < D; ++e)
            EXPECT_EQ(k16[x + e], cache.keys16()[cache.key_offset(j, hk, e)]) << j << " " << hk;
          EXPECT_TRUE(std::equal(&v16[x], &v16[x] + D, cache.values16() + y)) << j << " " << hk;
        }
      const double u = std::numeric_limits<float>::epsilon() / 2;
      const double tol = (2 * c.N + 2 * c.K + 8) * u * c.V;
      double worst = 0;
      for (size_t n = 0; n < out.size(); ++n)
        worst = std::max(worst, std::abs(double(out[n]) - double(ref[n])));
      EXPECT_LE(worst, tol);
    }
  EXPECT_THROW(kv_cache<double>(4, 1, 8, {}, 0, kv_storage::f16), invalid_argument);
}

// xPos in a cache: keys are stored transformed (rotated and scaled at their positions, the bits
// the full forward's transform gives them), the call maps only q, and a call that asks for a
// different xPos is refused. Llama 4's temperature is carried from the cache into a call that
// sets none.
TEST(KvCache, CarriesXposAndTemperatureIntoTheCall) {
  for (scheme s : {scheme::xpos, scheme::temperature}) {
    decode_case<double> c(s, 77);
    const auto ref = c.full(0);
    kv_cache<double> cache(c.N, c.Hkv, c.D, c.pos);
    std::vector<double> out(c.N * c.Hq * c.D);
    for (int64_t t = 0; t < c.N; ++t) {
      cache.append(&c.k[t * c.Hkv * c.D], &c.v[t * c.Hkv * c.D], 1);
      attention_params<double> p;
      p.q = &c.q[t * c.Hq * c.D], p.out = &out[t * c.Hq * c.D];
      p.T = 1, p.Hq = c.Hq, p.D = c.D, p.causal = true;  // p.pos left unset: the cache's
      attention_forward_cached(p, cache);
    }
    const double tol = (2 * c.N + 8) * 0x1p-53 * c.V;
    double err = 0;
    for (size_t n = 0; n < ref.size(); ++n) err = std::max(err, std::abs(out[n] - ref[n]));
    EXPECT_LE(err, tol) << static_cast<int>(s);
    // Without the cache's scheme the answer differs by O(1): the check above can fail.
    decode_case<double> plain(scheme::none, 77);
    double off = 0;
    const auto o2 = plain.full(0);
    for (size_t n = 0; n < ref.size(); ++n) off = std::max(off, std::abs(o2[n] - ref[n]));
    EXPECT_GT(off, 1e-3) << static_cast<int>(s);
  }
  decode_case<double> c(scheme::xpos, 78);
  kv_cache<double> cache(c.N, c.Hkv, c.D, c.pos);
  cache.append(c.k.data(), c.v.data(), 1);
  // Stored keys are transformed: they differ from the raw keys.
  double moved = 0;
  for (int64_t e = 0; e < c.Hkv * c.D; ++e)
    moved = std::max(moved, std::abs(cache.keys()[e] - c.k[e]));
  EXPECT_GT(moved, 1e-3);
  std::vector<double> out(c.Hq * c.D);
  attention_params<double> p;
  p.q = c.q.data(), p.out = out.data(), p.T = 1, p.Hq = c.Hq, p.D = c.D, p.pos = c.pos;
  p.pos.named[0].params.emplace_back("xpos_gamma", 0.5);  // not the cache's
  EXPECT_THROW(attention_forward_cached(p, cache), invalid_argument);
  p.pos = c.pos;  // the cache's xPos repeated: allowed
  EXPECT_NO_THROW(attention_forward_cached(p, cache));
  p.pos.named.clear();
  rope_config rc;
  rc.head_dim = c.D;
  rc.rotary_dim = c.D;
  const rope_freqs fr = rope_frequencies(rc);
  p.pos.named = {rope_scheme(fr)};  // a second q/k transform beside the cache's xPos
  EXPECT_THROW(attention_forward_cached(p, cache), invalid_argument);
}
