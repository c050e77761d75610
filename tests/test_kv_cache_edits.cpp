// KV cache position edits (remove, shift, divide; llama.cpp's seq_rm, seq_add, seq_div): in
// exact mode any sequence of edits leaves bit for bit the cache an append at the final
// positions makes (keys, values, positions, attention); in rerotate mode each edit is one turn
// of the stored key by the change (the rotation alone, no second attention factor) rounded to
// the storage format; tokens moved below position 0 are dropped; bad edits change nothing; the
// drift of repeated shifts is measured against one rotation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "posenc/attention/kv_cache.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/half.hpp"
#include "posenc/core/rng.hpp"

using namespace posenc;

namespace {

// Stored words of keys and values, token-major, widened to double (bits compare exactly:
// float32 and 16-bit words widen exactly).
struct snapshot {
  std::vector<double> k, v;
  std::vector<int64_t> pos;
  int64_t next = 0;
  bool operator==(const snapshot&) const = default;
};
snapshot snap(const kv_cache<float>& c) {
  snapshot s;
  const int64_t H = c.kv_heads(), D = c.head_dim();
  for (int64_t j = 0; j < c.size(); ++j)
    for (int64_t hk = 0; hk < H; ++hk)
      for (int64_t e = 0; e < D; ++e) {
        const int64_t ko = c.key_offset(j, hk, e), vo = c.row_offset(j, hk) + e;
        if (c.storage() == kv_storage::f32) {
          s.k.push_back(c.keys()[ko]);
          s.v.push_back(c.values()[vo]);
        } else {
          s.k.push_back(half_to_float(c.storage(), c.keys16()[ko]));
          s.v.push_back(half_to_float(c.storage(), c.values16()[vo]));
        }
      }
  s.pos.assign(c.positions().begin(), c.positions().end());
  s.next = c.next_position();
  return s;
}

struct edit_case {
  int64_t N = 20, H = 2, D;
  std::vector<float> k, v;
  rope_freqs freqs;
  attention_position<float> pos;
  explicit edit_case(int64_t d, rope_type t = rope_type::default_) : D(d) {
    rng r(7 + static_cast<uint64_t>(d));
    k.resize(N * H * D);
    v.resize(N * H * D);
    for (auto& x : k) x = static_cast<float>(r.normal());
    for (auto& x : v) x = static_cast<float>(r.normal());
    rope_config c;
    c.head_dim = c.rotary_dim = D;
    c.theta = 10000;
    if (t == rope_type::yarn) {
      c.type = t;
      c.factor = 4;
      c.original_max_position_embeddings = 64;
    }
    freqs = rope_frequencies(c);
    pos.named = {rope_scheme(freqs)};
  }
  // Tokens [t0, t1) of the case.
  const float* kk(int64_t t) const { return k.data() + t * H * D; }
  const float* vv(int64_t t) const { return v.data() + t * H * D; }
};

}  // namespace

// Exact mode: edits, then the same tokens appended fresh at their final positions.
TEST(KvCacheEdits, ExactModeEqualsOneAppendAtTheFinalPositions) {
  for (int64_t D : {16, 12})  // keys in 8-key blocks, and in rows
    for (kv_storage st : {kv_storage::f32, kv_storage::f16, kv_storage::bf16}) {
      const edit_case c(D);
      kv_cache<float> cache(32, c.H, D, c.pos, 0, st, kv_shift_mode::exact);
      std::vector<int64_t> p(c.N);
      for (int64_t i = 0; i < c.N; ++i) p[i] = 100 + i;
      cache.append(c.k.data(), c.v.data(), c.N, p);
      // Tokens 0..19 at 100..119: drop 100, 101; move 105..109 back by 3 (onto 102..106, beside
      // 102..104); context shift by -50 (positions 52..69); Self-Extend-style grouping by 3 of
      // everything from 60 (onto 20..23); then 15 shifts of -1 (one at a time).
      EXPECT_EQ(cache.remove(100, 102), 2);
      EXPECT_EQ(cache.shift(105, 110, -3), 0);
      EXPECT_EQ(cache.shift(0, kv_cache<float>::to_end, -50), 0);
      cache.divide(60, kv_cache<float>::to_end, 3);
      for (int s = 0; s < 15; ++s) EXPECT_EQ(cache.shift(0, kv_cache<float>::to_end, -1), 0);
      // Recompute the final positions by hand.
      std::vector<int64_t> want;
      for (int64_t i = 2; i < c.N; ++i) {
        int64_t q = 100 + i;
        if (q >= 105 && q < 110) q -= 3;
        q -= 50;
        if (q >= 60) q /= 3;
        want.push_back(q - 15);
      }
      kv_cache<float> fresh(32, c.H, D, c.pos, 0, st, kv_shift_mode::exact);
      fresh.append(c.kk(2), c.vv(2), c.N - 2, want);
      EXPECT_EQ(snap(cache), snap(fresh)) << "D " << D << " storage " << name(st);
      // The same bits out of attention.
      rng r(3);
      std::vector<float> q(2 * 4 * D), o1(q.size()), o2(q.size());
      for (auto& x : q) x = static_cast<float>(r.normal());
      for (auto* out : {&o1, &o2}) {
        attention_params<float> a;
        a.q = q.data();
        a.out = out->data();
        a.T = 2;
        a.Hq = 4;
        a.D = D;
        a.causal = true;
        a.pos = c.pos;
        attention_forward_cached(a, out == &o1 ? cache : fresh);
      }
      EXPECT_EQ(o1, o2);
    }
}

// Rerotate mode: one edit turns each stored key by the change with the rotation alone (the
// frequencies at magnitude 1, also for YaRN whose a = 0.1 ln 4 + 1 is in the stored key), the
// forward kernel at the signed change, rounded to the storage format.
TEST(KvCacheEdits, RerotateTurnsTheStoredKeyByTheChange) {
  for (rope_type t : {rope_type::default_, rope_type::yarn})
    for (kv_storage st : {kv_storage::f32, kv_storage::f16, kv_storage::bf16})
      for (int64_t delta : {-37, 5}) {
        const edit_case c(16, t);
        kv_cache<float> cache(32, c.H, 16, c.pos, 0, st, kv_shift_mode::rerotate);
        std::vector<int64_t> p(c.N);
        for (int64_t i = 0; i < c.N; ++i) p[i] = 40 + 2 * i;
        cache.append(c.k.data(), c.v.data(), c.N, p);
        const snapshot before = snap(cache);
        cache.shift(50, 70, delta);
        const snapshot after = snap(cache);
        rope_freqs unit = c.freqs;
        unit.attention_factor = 1;
        std::vector<int64_t> moved, at;
        for (int64_t j = 0; j < c.N; ++j) {
          const bool in = p[j] >= 50 && p[j] < 70;
          EXPECT_EQ(after.pos[j], in ? p[j] + delta : p[j]);
          std::vector<float> key(before.k.begin() + j * 32, before.k.begin() + (j + 1) * 32);
          if (in) {
            // The forward kernel at angle delta omega_i: cos / sin at |delta|, the sine negated
            // for delta < 0 (as ggml rotates at a negative position; not the transpose kernel,
            // which fuses the other product: tests/test_kv_shift_llama_cpp.cpp).
            const int64_t d = delta < 0 ? -delta : delta;
            std::vector<float> cs(8), sn(8);
            rope_cos_sin(unit, rope_angle::exact, d, cs.data(), sn.data());
            if (delta < 0)
              for (float& x : sn) x = -x;
            rope_rotate(rope_layout::half, 16, cs.data(), sn.data(), key.data(), 2, 16, false);
          }
          for (int64_t e = 0; e < 32; ++e) {
            const float want =
                st == kv_storage::f32 ? key[e] : half_to_float(st, float_to_half(st, key[e]));
            ASSERT_EQ(after.k[j * 32 + e], want) << "token " << j << " element " << e;
          }
        }
        EXPECT_EQ(after.v, before.v);
      }
}

TEST(KvCacheEdits, RemoveShiftAndDivideKeepOrderAndPositions) {
  const edit_case c(8);
  kv_cache<float> cache(32, c.H, 8, {}, 5);                 // no q/k transform: positions only
  cache.append(c.k.data(), c.v.data(), 10);                 // positions 5..14
  EXPECT_EQ(cache.remove(12, kv_cache<float>::to_end), 3);  // the newest three
  EXPECT_EQ(cache.next_position(), 12);
  EXPECT_EQ(cache.remove(0, 7), 2);
  EXPECT_EQ(snap(cache).pos, (std::vector<int64_t>{7, 8, 9, 10, 11}));
  EXPECT_EQ(snap(cache).v[0], c.v[2 * c.H * 8]);  // token 2's value is first now
  EXPECT_EQ(cache.shift(0, 10, -8), 1);           // 7 falls below 0: dropped, as llama.cpp
  EXPECT_EQ(snap(cache).pos, (std::vector<int64_t>{0, 1, 10, 11}));
  cache.divide(0, kv_cache<float>::to_end, 4);
  EXPECT_EQ(snap(cache).pos, (std::vector<int64_t>{0, 0, 2, 2}));
  EXPECT_EQ(cache.next_position(), 3);
  cache.append(c.kk(10), c.vv(10), 1);
  EXPECT_EQ(snap(cache).pos.back(), 3);
  EXPECT_EQ(cache.remove(0, kv_cache<float>::to_end), 5);
  EXPECT_EQ(cache.next_position(), 5);  // empty: start_position
}

TEST(KvCacheEdits, BadEditsAreClearErrorsAndChangeNothing) {
  const edit_case c(16);
  kv_cache<float> cache(32, c.H, 16, c.pos);
  cache.append(c.k.data(), c.v.data(), 4);
  const snapshot before = snap(cache);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { cache.remove(3, 2); }).find("p0 <= p1"), std::string::npos);
  EXPECT_NE(message([&] { cache.shift(-1, 2, 1); }).find("[p0, p1)"), std::string::npos);
  EXPECT_NE(message([&] { cache.divide(0, 4, 0); }).find("d must be >= 1"), std::string::npos);
  EXPECT_NE(message([&] { cache.shift(0, 4, int64_t{1} << 62); }).find("2^62"), std::string::npos);
  EXPECT_EQ(snap(cache), before);
  attention_position<float> xp;
  xp.named = {{"xpos", {{"xpos_scale_base", 64.0}}}};
  kv_cache<float> x(8, 1, 16, xp);
  x.append(c.k.data(), c.v.data(), 2);
  EXPECT_NE(message([&] { x.shift(0, 2, 1); }).find("exact mode"), std::string::npos);
  kv_cache<float> xe(8, 1, 16, xp, 0, kv_storage::f32, kv_shift_mode::exact);
  xe.append(c.k.data(), c.v.data(), 2);
  EXPECT_NO_THROW(xe.shift(0, 2, 1));
  EXPECT_THROW(kv_shift_mode_from_name("lazy", "--mode"), invalid_argument);
}

// Repeated shifts: drift 0 after one float32 shift is not required, but it stays within a few
// roundings; float16 and bfloat16 drift grows with the number of shifts; the one-rotation
// yardstick is the storage's rounding.
TEST(KvCacheEdits, ShiftDriftGrowsWithTheShifts) {
  rope_config cfg;
  cfg.head_dim = cfg.rotary_dim = 64;
  cfg.theta = 10000;
  const rope_freqs f = rope_frequencies(cfg);
  const std::vector<int64_t> counts = {1, 10, 100};
  const auto rows = kv_shift_drift(f, rope_layout::half, rope_angle::exact, 16, -64, counts);
  ASSERT_EQ(rows.size(), 9u);
  for (size_t s = 0; s < 3; ++s) {
    const auto& one = rows[3 * s];
    const auto& hundred = rows[3 * s + 2];
    EXPECT_EQ(one.shifts, 1);
    EXPECT_EQ(hundred.shifts, 100);
    EXPECT_GT(hundred.drift_rms, one.drift_rms) << name(one.storage);
    EXPECT_LE(one.drift_max, 4 * one.once_max + 1e-6) << name(one.storage);
  }
  EXPECT_LT(rows[0].once_max, 1e-6);              // float32: one rounding
  EXPECT_GT(rows[3].once_max, rows[6].once_max);  // bfloat16 rounds coarser than float16
  EXPECT_EQ(kv_shift_drift(f, rope_layout::half, rope_angle::exact, 16, -64, counts)[5].drift_max,
            rows[5].drift_max);  // deterministic
  EXPECT_THROW(kv_shift_drift(f, rope_layout::half, rope_angle::exact, 16, 0, counts),
               invalid_argument);
  const std::vector<int64_t> bad = {10, 5};
  EXPECT_THROW(kv_shift_drift(f, rope_layout::half, rope_angle::exact, 16, -1, bad),
               invalid_argument);
}
