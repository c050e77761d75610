// llama.cpp's K-shift, run: tests/golden/llama_cpp_kshift/kshift.json, written by
// scripts/golden/llama_cpp_kshift.py from llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39
// (CPU backend, GGML_NATIVE=ON, F32 key cache; tests/golden/README.md). Five tiny random-weight
// models (llama NORM pairs: unscaled, linear, YaRN, Llama 3 rope_freqs; qwen2 NEOX pairs), two
// layers of 2 kv heads of dim 32, 16 tokens decoded, then llama_memory_seq_rm / seq_add /
// seq_div and one more decode, which runs the K-shift. Every expected value is llama.cpp's.
//
// What llama.cpp's K-shift computes (src/llama-kv-cache.cpp build_graph_shift /
// build_rope_shift, src/llama-kv-cells.h pos_add / pos_div, ggml-cpu ops.cpp rope): each edit
// only changes the cells' positions and adds the change to the cell's `shift`; at the next
// decode one ggml_rope_ext_inplace per layer rotates every cell's key (n_rot dims of each kv
// head) at position shift[i] (0 for cells that did not move), with the forward's parameters
// (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, freq factors):
// cos / sin of ggml's float32 angle at shift[i] times ggml's magnitude, and the forward rotation
// u' = fma(u, c, -(v s)), v' = fma(u, s, v c) (GCC's contraction on x86-64 with FMA).
//
// Checked here, bit for bit:
//   - posenc's keys appended at the positions with angle ggml_f32 are llama.cpp's cached keys
//     (the forward RoPE), before the edits and for the token decoded after them;
//   - the K-shift is exactly that rotation at the recorded per-cell change (posenc's rope_cos_sin
//     and rope_rotate with ggml_f32, the forward's magnitude, sine negated for a negative
//     change), for every cell of every run;
//   - kv_cache rerotate (ggml_f32) after seq_rm + seq_add gives llama.cpp's keys and positions,
//     for NORM and NEOX pairs, unscaled, linear and Llama 3 factors, forward and backward moves.
// And the two places where posenc differs, on purpose, each explained exactly:
//   - YaRN: llama.cpp passes the forward's attn_factor to the K-shift, so ggml multiplies every
//     key (moved or not) by the YaRN magnitude m = 1 + 0.1 ln s once more per K-shift; posenc
//     turns by the rotation alone (pair norms kept within rounding; llama.cpp's grow by m);
//   - seq_div: since llama.cpp's kv-cell rework (#13706, 2025-05) pos_div adds p - floor(p / d)
//     to the cell's shift, so the key turns forward by the amount its position went back;
//     posenc's divide turns by the change, floor(p / d) - p, and lands within rounding of the
//     key rotated once at the new position, where llama.cpp's key does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "posenc/attention/kv_cache.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/gguf.hpp"

using namespace posenc;

namespace kv_shift_llama_cpp {
namespace {

const std::string kDir = std::string(POSENC_SOURCE_DIR) + "/tests/golden/llama_cpp_kshift/";
constexpr double kU = 0x1p-24;  // float32 unit roundoff

const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    std::ifstream f(kDir + "kshift.json");
    std::stringstream ss;
    ss << f.rdbuf();
    return nlohmann::json::parse(ss.str());
  }();
  return j;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Keys (cells, Hkv, D) token-major: layer l of a golden [layer][cell][Hkv * D] array, or cell
// `only` alone.
std::vector<float> layer_keys(const nlohmann::json& a, int l, int64_t only = -1) {
  std::vector<float> out;
  for (size_t j = 0; j < a[l].size(); ++j)
    if (only < 0 || static_cast<int64_t>(j) == only)
      for (const auto& x : a[l][j]) out.push_back(x.get<float>());
  return out;
}

std::vector<int64_t> ints(const nlohmann::json& a) {
  return a.get<std::vector<int64_t>>();
}

// How many floats of `got` differ in their bits from `want`; the first one described.
int64_t differing(const std::vector<float>& got, const std::vector<float>& want, int64_t row,
                  std::string* first) {
  if (got.size() != want.size()) {
    *first = "sizes " + std::to_string(got.size()) + " and " + std::to_string(want.size());
    return -1;
  }
  int64_t n = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(want[i]) && n++ == 0) {
      std::ostringstream o;
      o.precision(9);
      o << "cell " << i / row << " element " << i % row << ": " << got[i] << " vs llama.cpp "
        << want[i];
      *first = o.str();
    }
  return n;
}

// One golden case read as posenc reads its GGUF (the metadata of the file llama.cpp loaded).
struct model {
  std::string name;
  int64_t Hkv = 0, D = 0, n_layer = 0;
  rope_layout layout = rope_layout::half;
  rope_freqs freqs;
  bool yarn = false;
  const nlohmann::json* j = nullptr;
  attention_position<float> pos() const {
    attention_position<float> p;
    p.named = {rope_scheme(freqs, layout, rope_angle::ggml_f32)};
    return p;
  }
};

std::vector<model> models() {
  std::vector<model> out;
  for (const auto& c : golden()["cases"]) {
    model m;
    m.name = c["name"];
    m.Hkv = c["n_head_kv"];
    m.D = c["head_dim"];
    m.n_layer = c["n_layer"];
    std::vector<std::string> warnings;
    const gguf_rope r = gguf_rope_config(gguf_read(kDir + c["gguf"].get<std::string>()), &warnings);
    m.layout = r.layout.value();
    m.freqs = rope_frequencies(r.config);
    m.yarn = c["forward_rope"][0]["ext_factor"].get<float>() != 0.0f;
    m.j = &c;
    out.push_back(std::move(m));
  }
  return out;
}

// The stored keys of a cache, (size, Hkv, D) token-major.
std::vector<float> stored(const kv_cache<float>& c) {
  std::vector<float> out;
  for (int64_t j = 0; j < c.size(); ++j)
    for (int64_t hk = 0; hk < c.kv_heads(); ++hk)
      for (int64_t e = 0; e < c.head_dim(); ++e) out.push_back(c.keys()[c.key_offset(j, hk, e)]);
  return out;
}

// Layer l's prefill appended to `c` at llama.cpp's positions (keys before RoPE, values zero).
void append_prefill(kv_cache<float>& c, const nlohmann::json& prefill, int l) {
  const auto raw = layer_keys(prefill["raw_k"], l);
  const auto pos = ints(prefill["pos"]);
  const std::vector<float> v(raw.size(), 0.0f);
  c.append(raw.data(), v.data(), static_cast<int64_t>(pos.size()), pos);
}

void apply_edits(kv_cache<float>& c, const nlohmann::json& ops) {
  for (const auto& o : ops) {
    const std::string kind = o[0];
    const int64_t p0 = o[1], p1r = o[2];
    const int64_t p1 = p1r < 0 ? kv_cache<float>::to_end : p1r;
    const int64_t arg = o[3];
    if (kind == "rm")
      c.remove(p0, p1);
    else if (kind == "add")
      c.shift(p0, p1, arg);
    else
      c.divide(p0, p1, arg);
  }
}

bool has_div(const nlohmann::json& run) {
  for (const auto& o : run["ops"])
    if (o[0] == "div") return true;
  return false;
}

// ggml's rotation of one key (Hkv heads of D) at position p (negative allowed): cos / sin of
// the ggml_f32 pipeline at |p| with the frequencies' own magnitude, sine negated for p < 0.
std::vector<float> ggml_rotate(const model& m, std::vector<float> key, int64_t p) {
  const int64_t R = m.freqs.rotary_dim;
  std::vector<float> c(R / 2), s(R / 2);
  rope_cos_sin(m.freqs, rope_angle::ggml_f32, p < 0 ? -p : p, c.data(), s.data());
  if (p < 0)
    for (float& x : s) x = -x;
  rope_rotate(m.layout, R, c.data(), s.data(), key.data(), m.Hkv, m.D, false);
  return key;
}

// Pair (u, v) of pair index i in key row h: channels (2i, 2i + 1) or (i, R/2 + i).
std::pair<int64_t, int64_t> pair_at(const model& m, int64_t i) {
  const int64_t R = m.freqs.rotary_dim;
  return m.layout == rope_layout::half ? std::pair{i, R / 2 + i} : std::pair{2 * i, 2 * i + 1};
}

}  // namespace

// llama.cpp resolved the RoPE of each file as posenc reads it: the forward's ggml parameters are
// rope_frequencies' ggml_f32 ones, and the K-shift gets the forward's parameters unchanged
// (attn_factor included: the root of the YaRN difference below).
TEST(KvShiftLlamaCpp, RopeParametersAsLlamaCppResolvedThem) {
  EXPECT_EQ(golden()["source"]["commit"], "6dafc14e50e1c248621618f3786f5005767a1d39");
  for (const model& m : models()) {
    SCOPED_TRACE(m.name);
    const auto& g = m.freqs.ggml.value();
    for (const auto& r : (*m.j)["forward_rope"]) {
      EXPECT_EQ(r["n_dims"].get<int64_t>(), m.freqs.rotary_dim);
      EXPECT_EQ(r["mode"].get<int>(), m.layout == rope_layout::half ? 2 : 0);
      EXPECT_EQ(bits(r["freq_base"].get<float>()), bits(g.freq_base));
      EXPECT_EQ(bits(r["freq_scale"].get<float>()), bits(g.freq_scale));
      EXPECT_EQ(bits(r["ext_factor"].get<float>()), bits(g.ext_factor));
      EXPECT_EQ(bits(r["attn_factor"].get<float>()), bits(g.attn_factor));
      std::vector<float> ff;
      if (!r["freq_factors"].is_null()) ff = r["freq_factors"].get<std::vector<float>>();
      ASSERT_EQ(ff.size(), g.freq_factors.size());
      for (size_t i = 0; i < ff.size(); ++i) EXPECT_EQ(bits(ff[i]), bits(g.freq_factors[i])) << i;
    }
    for (const auto& run : (*m.j)["runs"])
      for (const auto& r : run["shift_rope"]) {
        nlohmann::json a = r, b = (*m.j)["forward_rope"][0];
        for (const char* k : {"name", "ne", "positions"}) a.erase(k), b.erase(k);
        EXPECT_EQ(a, b) << run["name"];
      }
  }
}

// The forward RoPE: posenc's append with angle ggml_f32 stores llama.cpp's cached keys, for the
// prefill (at 0..15 and at 200000..200015) and for the token decoded after the edits.
TEST(KvShiftLlamaCpp, AppendStoresLlamaCppsCachedKeys) {
  int64_t keys = 0;
  for (const model& m : models()) {
    for (const auto& [start, prefill] : (*m.j)["prefill"].items())
      for (int l = 0; l < m.n_layer; ++l) {
        kv_cache<float> c(64, m.Hkv, m.D, m.pos());
        append_prefill(c, prefill, l);
        std::string first;
        EXPECT_EQ(differing(stored(c), layer_keys(prefill["k"], l), m.Hkv * m.D, &first), 0)
            << m.name << " start " << start << " layer " << l << ": " << first;
        keys += c.size() * m.Hkv;
      }
    for (const auto& run : (*m.j)["runs"])
      for (int l = 0; l < m.n_layer; ++l) {
        const auto& t = run["trigger"];
        kv_cache<float> c(1, m.Hkv, m.D, m.pos());
        std::vector<float> raw = t["raw_k"][l].get<std::vector<float>>(), v(raw.size(), 0.0f);
        const int64_t p = t["pos"];
        c.append(raw.data(), v.data(), 1, std::span<const int64_t>(&p, 1));
        std::string first;
        EXPECT_EQ(differing(stored(c), t["k"][l].get<std::vector<float>>(), m.Hkv * m.D, &first), 0)
            << m.name << " " << run["name"] << " trigger layer " << l << ": " << first;
        keys += m.Hkv;
      }
  }
  EXPECT_EQ(keys, 5 * (2 * 2 * 16 * 2 + 4 * 2 * 2));  // 720 keys of 32 floats
}

// What the K-shift is: every cell's key rotated by ggml at the cell's recorded change (the
// K-shift graph's position input), with the forward's magnitude; cells that did not move are
// rotated at 0 (the identity unless the magnitude is not 1). Every cell of every run.
TEST(KvShiftLlamaCpp, KShiftIsGgmlsRopeAtEachCellsChange) {
  int64_t keys = 0;
  for (const model& m : models())
    for (const auto& run : (*m.j)["runs"]) {
      const auto& prefill = (*m.j)["prefill"][std::to_string(run["start"].get<int64_t>())];
      const auto from = ints(run["post"]["from"]);
      const auto delta = ints(run["shift_delta"]);
      for (int l = 0; l < m.n_layer; ++l)
        for (size_t j = 0; j < from.size(); ++j) {
          const auto want = layer_keys(run["post"]["k"], l, static_cast<int64_t>(j));
          const auto got = ggml_rotate(m, layer_keys(prefill["k"], l, from[j]), delta[from[j]]);
          std::string first;
          EXPECT_EQ(differing(got, want, m.Hkv * m.D, &first), 0)
              << m.name << " " << run["name"] << " layer " << l << " cell " << from[j] << " change "
              << delta[from[j]] << ": " << first;
          keys += m.Hkv;
        }
    }
  EXPECT_EQ(keys, 5 * 2 * 2 * (8 + 16 + 16 + 16));  // 1120 keys, 800 of them moved
}

// kv_cache rerotate (ggml_f32) moves keys as llama.cpp's seq_rm + seq_add + K-shift does, bit for
// bit: llama.cpp's context shift (remove 8 tokens, move the rest back by 8), a forward move by
// 1000 and a backward one by 150001 from position 200000, for every model but YaRN's (below).
TEST(KvShiftLlamaCpp, RerotateShiftIsLlamaCppsKShift) {
  int64_t keys = 0;
  for (const model& m : models()) {
    if (m.yarn) continue;
    for (const auto& run : (*m.j)["runs"]) {
      if (has_div(run)) continue;
      const auto& prefill = (*m.j)["prefill"][std::to_string(run["start"].get<int64_t>())];
      for (int l = 0; l < m.n_layer; ++l) {
        kv_cache<float> c(64, m.Hkv, m.D, m.pos(), 0, kv_storage::f32, kv_shift_mode::rerotate);
        append_prefill(c, prefill, l);
        apply_edits(c, run["ops"]);
        const auto pos = c.positions();
        EXPECT_EQ(std::vector<int64_t>(pos.begin(), pos.end()), ints(run["post"]["pos"]));
        std::string first;
        EXPECT_EQ(differing(stored(c), layer_keys(run["post"]["k"], l), m.Hkv * m.D, &first), 0)
            << m.name << " " << run["name"] << " layer " << l << ": " << first;
        keys += c.size() * m.Hkv;
      }
    }
  }
  EXPECT_EQ(keys, 4 * 2 * 2 * (8 + 16 + 16));  // 640 keys, 480 of them moved
}

// YaRN: llama.cpp's K-shift multiplies every key, moved or not, by ggml's YaRN magnitude
// m = attn_factor (1 + 0.1 logf(1 / freq_scale)) = 1 + 0.1 ln 4 once more (the bits are the
// rotation at the change above, magnitude included); posenc's rerotate turns by the rotation
// alone. Measured on pair norms: each output is rounded once after a fused product and the
// cos / sin once after the magnitude, so |rotated pair| / |pair| is within (1 +- 8u) of m for
// llama.cpp and of 1 for posenc.
TEST(KvShiftLlamaCpp, YarnKShiftAppliesTheMagnitudeAgain) {
  for (const model& m : models()) {
    if (!m.yarn) continue;
    const auto& r = (*m.j)["forward_rope"][0];
    const float mag = r["attn_factor"].get<float>() *
                      std::fma(0.1f, std::log(1.0f / r["freq_scale"].get<float>()), 1.0f);
    EXPECT_NEAR(mag, 1 + 0.1 * std::log(4.0), 1e-6);
    int64_t pairs = 0;
    for (const auto& run : (*m.j)["runs"]) {
      if (has_div(run)) continue;
      const auto& prefill = (*m.j)["prefill"][std::to_string(run["start"].get<int64_t>())];
      const auto from = ints(run["post"]["from"]);
      for (int l = 0; l < m.n_layer; ++l) {
        kv_cache<float> c(64, m.Hkv, m.D, m.pos(), 0, kv_storage::f32, kv_shift_mode::rerotate);
        append_prefill(c, prefill, l);
        apply_edits(c, run["ops"]);
        const auto mine = stored(c), theirs = layer_keys(run["post"]["k"], l);
        const auto before = layer_keys(prefill["k"], l);
        ASSERT_EQ(mine.size(), theirs.size());
        for (size_t j = 0; j < from.size(); ++j)
          for (int64_t h = 0; h < m.Hkv; ++h)
            for (int64_t i = 0; i < m.freqs.rotary_dim / 2; ++i) {
              const auto ab = pair_at(m, i);
              const auto a = ab.first, b = ab.second;  // named (lambdas capture no bindings)
              auto norm = [&](const std::vector<float>& x, int64_t cell) {
                const size_t o = static_cast<size_t>((cell * m.Hkv + h) * m.D);
                return std::hypot(static_cast<double>(x[o + a]), static_cast<double>(x[o + b]));
              };
              const double n0 = norm(before, from[j]);
              EXPECT_NEAR(norm(theirs, static_cast<int64_t>(j)) / n0, mag, 8 * kU * mag)
                  << run["name"] << " cell " << from[j] << " pair " << i;
              EXPECT_NEAR(norm(mine, static_cast<int64_t>(j)) / n0, 1.0, 8 * kU)
                  << run["name"] << " cell " << from[j] << " pair " << i;
              ++pairs;
            }
      }
    }
    EXPECT_EQ(pairs, 2 * 2 * 16 * (8 + 16 + 16));
  }
}

// seq_div: llama.cpp's K-shift input for a divided cell is p - floor(p / d) > 0 (pos_div's
// shift[i] += p_old - pos[i]): the key turns forward by the amount its position went back, as
// posenc's rerotate shift by +(p - floor(p / d)) does bit for bit. posenc's divide turns by the
// change and lands within rounding of the key rotated once at floor(p / d); llama.cpp's key is
// rotated 2 (p - floor(p / d)) away from it.
//
// Bound for posenc: three ggml angles (at p, at the change, at the new position q), each
// theta_i = |x| ts^i by i float multiplications (relative error <= i u, |theta| <= |x| since
// ts <= 1), cosf / sinf and the magnitude within 2u each, and one rounding per output of each
// rotation (<= 2u |pair|): per pair |posenc - once| <= |pair| ((|p| + |p - q| + |q|) (R/2) u
// + 16u).
TEST(KvShiftLlamaCpp, SeqDivTurnsTheOtherWay) {
  int64_t cells = 0;
  for (const model& m : models()) {
    if (m.yarn) continue;  // the magnitude again, as above
    for (const auto& run : (*m.j)["runs"]) {
      if (!has_div(run)) continue;
      const auto& prefill = (*m.j)["prefill"][std::to_string(run["start"].get<int64_t>())];
      const auto old_pos = ints(prefill["pos"]), new_pos = ints(run["post"]["pos"]);
      const auto from = ints(run["post"]["from"]), delta = ints(run["shift_delta"]);
      const int64_t R = m.freqs.rotary_dim, row = m.Hkv * m.D;
      for (size_t j = 0; j < from.size(); ++j)
        EXPECT_EQ(delta[from[j]], old_pos[from[j]] - new_pos[j]) << "cell " << from[j];
      for (int l = 0; l < m.n_layer; ++l) {
        kv_cache<float> div(64, m.Hkv, m.D, m.pos(), 0, kv_storage::f32, kv_shift_mode::rerotate);
        append_prefill(div, prefill, l);
        apply_edits(div, run["ops"]);
        const auto pos = div.positions();
        EXPECT_EQ(std::vector<int64_t>(pos.begin(), pos.end()), new_pos);
        const auto mine = stored(div), theirs = layer_keys(run["post"]["k"], l);
        const auto raw = layer_keys(prefill["raw_k"], l);
        double llama_far = 0;
        for (size_t j = 0; j < from.size(); ++j) {
          const int64_t p = old_pos[from[j]], q = new_pos[j];
          // llama.cpp's arithmetic: a one-token rerotate cache shifted by +(p - q).
          kv_cache<float> fwd(1, m.Hkv, m.D, m.pos(), 0, kv_storage::f32, kv_shift_mode::rerotate);
          const std::vector<float> k(raw.begin() + from[j] * row,
                                     raw.begin() + (from[j] + 1) * row);
          const std::vector<float> v(k.size(), 0.0f);
          fwd.append(k.data(), v.data(), 1, std::span<const int64_t>(&p, 1));
          fwd.shift(0, kv_cache<float>::to_end, p - q);
          std::string first;
          EXPECT_EQ(differing(stored(fwd), layer_keys(run["post"]["k"], l, j), row, &first), 0)
              << m.name << " layer " << l << " cell " << from[j] << ": " << first;
          // The key rotated once at q.
          kv_cache<float> once(1, m.Hkv, m.D, m.pos());
          once.append(k.data(), v.data(), 1, std::span<const int64_t>(&q, 1));
          const auto ref = stored(once);
          const double tol =
              static_cast<double>(p + (p - q) + q) * (static_cast<double>(R) / 2) * kU + 16 * kU;
          for (int64_t h = 0; h < m.Hkv; ++h)
            for (int64_t i = 0; i < R / 2; ++i) {
              const auto ab = pair_at(m, i);
              const auto a = ab.first, b = ab.second;  // named (lambdas capture no bindings)
              const size_t o = static_cast<size_t>((static_cast<int64_t>(j) * m.Hkv + h) * m.D);
              const size_t r = static_cast<size_t>(h * m.D);
              // |x - y| over the pair, in double (exact differences of floats).
              auto dist = [&](const std::vector<float>& x) {
                return std::hypot(static_cast<double>(x[o + a]) - ref[r + a],
                                  static_cast<double>(x[o + b]) - ref[r + b]);
              };
              const double n = std::hypot(static_cast<double>(ref[r + a]), ref[r + b]);
              EXPECT_LE(dist(mine), n * tol)
                  << m.name << " layer " << l << " cell " << from[j] << " pair " << i;
              if (p != q) llama_far = std::max(llama_far, dist(theirs) / n);
            }
          ++cells;
        }
        EXPECT_GT(llama_far, 0.5) << m.name << " layer " << l;
      }
    }
  }
  EXPECT_EQ(cells, 4 * 2 * 16);
}

}  // namespace kv_shift_llama_cpp
