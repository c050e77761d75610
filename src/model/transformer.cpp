// The lab's decoder-only transformer: parameter layout, forward, backward, AdamW, checkpoints.
// See transformer.hpp for the architecture and the contracts.
#include "posenc/model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/shaw.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "posenc/model/ops.hpp"

namespace posenc::model {

namespace {
constexpr const char* k_scheme_names[] = {"nope",  "sinusoidal", "learned", "rope",
                                          "alibi", "t5",         "shaw"};
}

const char* pos_scheme_name(pos_scheme s) {
  return k_scheme_names[static_cast<int>(s)];
}

pos_scheme pos_scheme_from_name(const std::string& name, const std::string& arg) {
  for (int i = 0; i < 7; ++i)
    if (name == k_scheme_names[i]) return static_cast<pos_scheme>(i);
  fail("{} must be one of nope, sinusoidal, learned, rope, alibi, t5, shaw; got '{}'", arg, name);
}

const char* norm_kind_name(norm_kind n) {
  return n == norm_kind::layernorm ? "layernorm" : "rmsnorm";
}

norm_kind norm_kind_from_name(const std::string& name, const std::string& arg) {
  if (name == "layernorm") return norm_kind::layernorm;
  if (name == "rmsnorm") return norm_kind::rmsnorm;
  fail("{} must be layernorm or rmsnorm, got '{}'", arg, name);
}

void validate(const model_config& c) {
  if (c.vocab < 2 || c.vocab > (1 << 20)) fail("vocab must be in [2, 2^20], got {}", c.vocab);
  if (c.n_heads < 1 || c.n_heads > 256) fail("n_heads must be in [1, 256], got {}", c.n_heads);
  if (c.d_model < 2 || c.d_model > 4096 || c.d_model % c.n_heads != 0)
    fail("d_model must be in [2, 4096] and divisible by n_heads = {}, got {}", c.n_heads,
         c.d_model);
  const int64_t d = c.d_model / c.n_heads;
  if (c.scheme == pos_scheme::rope && d % 2 != 0)
    fail("rope needs an even head dim d_model / n_heads, got {}", d);
  if (c.scheme == pos_scheme::sinusoidal && c.d_model % 2 != 0)
    fail("sinusoidal needs an even d_model, got {}", c.d_model);
  if (c.n_layers < 1 || c.n_layers > 64) fail("n_layers must be in [1, 64], got {}", c.n_layers);
  if (c.d_ff < 1 || c.d_ff > 65536) fail("d_ff must be in [1, 65536], got {}", c.d_ff);
  if (c.max_positions < 1 || c.max_positions > (1 << 24))
    fail("max_positions must be in [1, 2^24], got {}", c.max_positions);
  if (!(c.rope_theta > 1) || !std::isfinite(c.rope_theta))
    fail("rope_theta must be finite and > 1, got {}", c.rope_theta);
  t5_validate(t5_params{c.t5_buckets, c.t5_max_distance, false});
  if (c.shaw_clip < 0 || c.shaw_clip > 4096)
    fail("shaw_clip must be in [0, 4096], got {}", c.shaw_clip);
  if (!(c.init_std >= 0) || !std::isfinite(c.init_std))
    fail("init_std must be finite and >= 0, got {}", c.init_std);
  if (!(c.norm_eps > 0)) fail("norm_eps must be > 0, got {}", c.norm_eps);
  checked_bytes("model parameters", static_cast<unsigned long long>(c.vocab + c.max_positions),
                static_cast<unsigned long long>(c.d_model), 16, 8);
}

double sinusoidal_amplitude(const model_config& c) {
  return std::sqrt(2.0) * c.init_std;
}

param_layout make_layout(const model_config& c) {
  validate(c);
  param_layout L;
  const int64_t C = c.d_model, H = c.n_heads, D = C / H, F = c.d_ff, V = c.vocab;
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, bool decay) {
    L.tensors.push_back({name, L.total, rows * cols, rows, cols, decay});
    L.total += rows * cols;
    return L.tensors.back().offset;
  };
  const bool ln = c.norm == norm_kind::layernorm;
  L.tok_emb = add("tok_emb", V, C, true);
  if (c.scheme == pos_scheme::learned) L.pos_emb = add("pos_emb", c.max_positions, C, true);
  if (c.scheme == pos_scheme::t5) L.t5_table = add("t5_table", c.t5_buckets, H, false);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    param_layout::layer ly{};
    ly.ln1_g = add(p + "ln1_g", 1, C, false);
    ly.ln1_b = ln ? add(p + "ln1_b", 1, C, false) : -1;
    ly.wqkv = add(p + "wqkv", C, 3 * C, true);
    ly.bqkv = add(p + "bqkv", 1, 3 * C, false);
    ly.wo = add(p + "wo", C, C, true);
    ly.bo = add(p + "bo", 1, C, false);
    ly.ln2_g = add(p + "ln2_g", 1, C, false);
    ly.ln2_b = ln ? add(p + "ln2_b", 1, C, false) : -1;
    ly.w1 = add(p + "w1", C, F, true);
    ly.b1 = add(p + "b1", 1, F, false);
    ly.w2 = add(p + "w2", F, C, true);
    ly.b2 = add(p + "b2", 1, C, false);
    ly.shaw_k = ly.shaw_v = -1;
    if (c.scheme == pos_scheme::shaw) {
      ly.shaw_k = add(p + "shaw_k", 2 * c.shaw_clip + 1, D, false);
      ly.shaw_v = add(p + "shaw_v", 2 * c.shaw_clip + 1, D, false);
    }
    L.layers.push_back(ly);
  }
  L.lnf_g = add("lnf_g", 1, C, false);
  L.lnf_b = ln ? add("lnf_b", 1, C, false) : -1;
  L.w_out = add("w_out", C, V, true);
  return L;
}

std::string undefined_reason(const model_config& c, const batch& b) {
  if (c.scheme != pos_scheme::learned) return "";
  int64_t mx = -1;
  for (int64_t p : b.positions) mx = std::max(mx, p);
  if (mx >= c.max_positions)
    return fmt::format(
        "no defined position: position {} has no row in the learned table ({} rows, positions "
        "0..{})",
        mx, c.max_positions, c.max_positions - 1);
  return "";
}

// ---- transformer ---------------------------------------------------------------------------

template <typename S>
transformer<S>::transformer(const model_config& c) : cfg_(c), layout_(make_layout(c)) {
  params_.assign(layout_.total, S(0));
  grads_.assign(layout_.total, S(0));
  acts_.resize(c.n_layers);
}

template <typename S>
void transformer<S>::init(uint64_t seed) {
  rng r(seed);
  const double resid_std = cfg_.init_std / std::sqrt(2.0 * cfg_.n_layers);
  for (const auto& t : layout_.tensors) {
    S* p = params_.data() + t.offset;
    const bool gain = t.name.ends_with("_g");
    const bool bias = t.name.ends_with("_b") || t.name.find(".b") != std::string::npos;
    const bool resid = t.name.ends_with(".wo") || t.name.ends_with(".w2");
    // Every scheme starts its token embeddings at init_std; the sinusoids are scaled down to
    // the same per-channel RMS instead (sinusoidal_amplitude below). Scaling the embeddings up
    // to the sinusoids' unit amplitude (Vaswani et al. 2017, sec. 3.4) makes the residual
    // stream ~50x larger than the init_std-scaled layer outputs added to it, and the lab's
    // 1000-step runs then never left the "uniform digit" plateau (loss ln 10).
    const double std = cfg_.init_std;
    for (int64_t i = 0; i < t.size; ++i) {
      if (gain)
        p[i] = S(1);
      else if (bias)
        p[i] = S(0);
      else
        p[i] = static_cast<S>(r.normal() * (resid ? resid_std : std));
    }
  }
}

template <typename S>
void transformer<S>::norm_forward(const S* x, int64_t g, int64_t bb, S* y, S* mean, S* rstd) {
  const S* P = params_.data();
  if (cfg_.norm == norm_kind::layernorm)
    layernorm_forward(x, P + g, P + bb, y, mean, rstd, N_, cfg_.d_model, cfg_.norm_eps);
  else
    rmsnorm_forward(x, P + g, y, rstd, N_, cfg_.d_model, cfg_.norm_eps);
}

template <typename S>
void transformer<S>::norm_backward(const S* x, int64_t g, int64_t bb, const S* mean, const S* rstd,
                                   const S* dy, S* dx) {
  const S* P = params_.data();
  S* G = grads_.data();
  if (cfg_.norm == norm_kind::layernorm)
    layernorm_backward(x, P + g, mean, rstd, dy, dx, G + g, G + bb, N_, cfg_.d_model);
  else
    rmsnorm_backward(x, P + g, rstd, dy, dx, G + g, N_, cfg_.d_model);
}

// Causal multi-head attention of layer l for training (full (T, T) score matrix per head, T is
// small in the lab). qkv: (N, 3C) rows [q heads | k heads | v heads]; out: (N, C).
// Saves q', k', v: (B, H, T, D) and p: (B, H, T, T) (zero above the diagonal).
template <typename S>
void transformer<S>::attention_forward(int64_t l, const S* qkv, S* out) {
  auto& a = acts_[l];
  const auto& ly = layout_.layers[l];
  const int64_t B = B_, T = T_, H = cfg_.n_heads, C = cfg_.d_model, D = C / H;
  const S* P = params_.data();
  a.q.resize(B * H * T * D);
  a.k.resize(B * H * T * D);
  a.v.resize(B * H * T * D);
  a.o.resize(B * H * T * D);
  a.p.resize(B * H * T * T);
  // (N, 3C) -> three (B, H, T, D)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const S* row = qkv + (b * T + t) * 3 * C;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = ((b * H + h) * T + t) * D;
        std::copy(row + h * D, row + h * D + D, a.q.data() + o);
        std::copy(row + C + h * D, row + C + h * D + D, a.k.data() + o);
        std::copy(row + 2 * C + h * D, row + 2 * C + h * D + D, a.v.data() + o);
      }
    }
  if (cfg_.scheme == pos_scheme::rope) {
    // q' = R(pos) q, k' = R(pos) k (Su et al. 2021, eq. 34); heads of one token are T*D apart.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const S* c = rope_cos_.data() + (b * T + t) * (D / 2);
        const S* s = rope_sin_.data() + (b * T + t) * (D / 2);
        rope_rotate(rope_layout::half, D, c, s, a.q.data() + (b * H * T + t) * D, H, T * D, false);
        rope_rotate(rope_layout::half, D, c, s, a.k.data() + (b * H * T + t) * D, H, T * D, false);
      }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  parallel_for(B * H, [&](int64_t r0, int64_t r1) {
    for (int64_t bh = r0; bh < r1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const S* q = a.q.data() + bh * T * D;
      const S* k = a.k.data() + bh * T * D;
      const S* v = a.v.data() + bh * T * D;
      S* p = a.p.data() + bh * T * T;
      S* o = a.o.data() + bh * T * D;
      const int64_t* pos = positions_.data() + b * T;
      if (cfg_.scheme == pos_scheme::shaw) {
        // e_ij = scale q_i . (k_j + a^K_{c(i,j)}) (Shaw et al. 2018, eq. 4)
        shaw_problem sp{{pos, size_t(T)}, {pos, size_t(T)}, cfg_.shaw_clip, D};
        shaw_scores<S>(sp, q, k, P + ly.shaw_k, scale, p);
      } else {
        matmul_nt(q, D, k, D, p, T, T, D, T, false);
        for (int64_t i = 0; i < T * T; ++i) p[i] = static_cast<S>(p[i] * scale);
      }
      for (int64_t i = 0; i < T; ++i) {
        S* pi = p + i * T;
        if (cfg_.scheme == pos_scheme::alibi) {
          // score += -m_h (i - j) (Press et al. 2022, sec. 3)
          for (int64_t j = 0; j <= i; ++j)
            pi[j] += static_cast<S>(alibi_bias(alibi_slopes_[h], pos[i], pos[j], true));
        } else if (cfg_.scheme == pos_scheme::t5) {
          // score += table[bucket(kpos - qpos), h] (Raffel et al. 2020, sec. 2.1)
          const S* tab = P + layout_.t5_table;
          for (int64_t j = 0; j <= i; ++j) pi[j] += tab[t5_lut_[pos[i] - pos[j]] * H + h];
        }
        S mx = pi[0];
        for (int64_t j = 1; j <= i; ++j) mx = std::max(mx, pi[j]);
        double z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double e = std::exp(static_cast<double>(pi[j] - mx));
          pi[j] = static_cast<S>(e);
          z += e;
        }
        const double inv = 1.0 / z;
        for (int64_t j = 0; j <= i; ++j) pi[j] = static_cast<S>(pi[j] * inv);
        for (int64_t j = i + 1; j < T; ++j) pi[j] = S(0);  // causal mask
      }
      if (cfg_.scheme == pos_scheme::shaw) {
        // out_i = sum_j p_ij (v_j + a^V_{c(i,j)}) (Shaw et al. 2018, eq. 3)
        shaw_problem sp{{pos, size_t(T)}, {pos, size_t(T)}, cfg_.shaw_clip, D};
        shaw_values<S>(sp, p, v, P + ly.shaw_v, o);
      } else {
        // o = p v over the causal prefix
        std::fill(o, o + T * D, S(0));
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j <= i; ++j) {
            const S pij = p[i * T + j];
            const S* vj = v + j * D;
            S* oi = o + i * D;
            for (int64_t d = 0; d < D; ++d) oi[d] += pij * vj[d];
          }
      }
    }
  });
  // (B, H, T, D) -> (N, C)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const S* src = a.o.data() + ((b * H + h) * T + t) * D;
        std::copy(src, src + D, out + (b * T + t) * C + h * D);
      }
}

// Backward of attention_forward. dout: (N, C); dqkv: (N, 3C), overwritten.
template <typename S>
void transformer<S>::attention_backward(int64_t l, const S* dout, S* dqkv) {
  auto& a = acts_[l];
  const auto& ly = layout_.layers[l];
  const int64_t B = B_, T = T_, H = cfg_.n_heads, C = cfg_.d_model, D = C / H;
  const S* P = params_.data();
  S* G = grads_.data();
  const int64_t tab = cfg_.scheme == pos_scheme::t5     ? cfg_.t5_buckets
                      : cfg_.scheme == pos_scheme::shaw ? 2 * (2 * cfg_.shaw_clip + 1) * D
                                                        : 0;
  do_.resize(B * H * T * D);
  dq_.assign(B * H * T * D, S(0));
  dk_.assign(B * H * T * D, S(0));
  dv_.assign(B * H * T * D, S(0));
  dp_.resize(B * H * T * T);
  dtab_.assign(B * H * tab, S(0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const S* src = dout + (b * T + t) * C + h * D;
        std::copy(src, src + D, do_.data() + ((b * H + h) * T + t) * D);
      }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  parallel_for(B * H, [&](int64_t r0, int64_t r1) {
    for (int64_t bh = r0; bh < r1; ++bh) {
      const int64_t b = bh / H;
      const S* q = a.q.data() + bh * T * D;
      const S* k = a.k.data() + bh * T * D;
      const S* v = a.v.data() + bh * T * D;
      const S* p = a.p.data() + bh * T * T;
      const S* dO = do_.data() + bh * T * D;
      S* dq = dq_.data() + bh * T * D;
      S* dk = dk_.data() + bh * T * D;
      S* dv = dv_.data() + bh * T * D;
      S* dp = dp_.data() + bh * T * T;
      S* dt = dtab_.data() + bh * tab;
      const int64_t* pos = positions_.data() + b * T;
      shaw_problem sp{{pos, size_t(T)}, {pos, size_t(T)}, cfg_.shaw_clip, D};
      if (cfg_.scheme == pos_scheme::shaw) {
        // forward: out_i = sum_j p_ij (v_j + a^V_{c(i,j)})
        std::fill(dp, dp + T * T, S(0));
        shaw_values_backward<S>(sp, p, v, P + ly.shaw_v, dO, dp, dv,
                                dt + (2 * cfg_.shaw_clip + 1) * D);
      } else {
        // forward: o_i = sum_{j<=i} p_ij v_j  =>  dp_ij = dO_i . v_j, dv_j += p_ij dO_i
        for (int64_t i = 0; i < T; ++i) {
          const S* doi = dO + i * D;
          for (int64_t j = 0; j <= i; ++j) {
            const S* vj = v + j * D;
            S s = 0;
            for (int64_t d = 0; d < D; ++d) s += doi[d] * vj[d];
            dp[i * T + j] = s;
            const S pij = p[i * T + j];
            S* dvj = dv + j * D;
            for (int64_t d = 0; d < D; ++d) dvj[d] += pij * doi[d];
          }
          for (int64_t j = i + 1; j < T; ++j) dp[i * T + j] = S(0);
        }
      }
      // forward: p_i = softmax(s_i) over j <= i  =>  ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik)
      for (int64_t i = 0; i < T; ++i) {
        const S* pi = p + i * T;
        S* di = dp + i * T;
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(pi[j]) * di[j];
        for (int64_t j = 0; j <= i; ++j) di[j] = static_cast<S>(pi[j] * (di[j] - dot));
        for (int64_t j = i + 1; j < T; ++j) di[j] = S(0);
      }
      if (cfg_.scheme == pos_scheme::t5) {
        // forward: s_ij += table[bucket(pos_j - pos_i), h]
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j <= i; ++j) dt[t5_lut_[pos[i] - pos[j]]] += dp[i * T + j];
      }
      // ALiBi's bias is a constant: no gradient.
      if (cfg_.scheme == pos_scheme::shaw) {
        // forward: s_ij = scale q_i . (k_j + a^K_{c(i,j)})
        shaw_scores_backward<S>(sp, q, k, P + ly.shaw_k, scale, dp, dq, dk, dt);
      } else {
        // forward: s_ij = scale q_i . k_j  =>  dq = scale ds k, dk = scale ds^T q
        for (int64_t i = 0; i < T; ++i) {
          S* dqi = dq + i * D;
          const S* qi = q + i * D;
          for (int64_t j = 0; j <= i; ++j) {
            const S g = static_cast<S>(dp[i * T + j] * scale);
            const S* kj = k + j * D;
            S* dkj = dk + j * D;
            for (int64_t d = 0; d < D; ++d) {
              dqi[d] += g * kj[d];
              dkj[d] += g * qi[d];
            }
          }
        }
      }
    }
  });
  // Table gradients: per-(b, h) partials reduced in (b, h) order (deterministic).
  if (cfg_.scheme == pos_scheme::t5) {
    S* gt = G + layout_.t5_table;
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t u = 0; u < cfg_.t5_buckets; ++u) gt[u * H + bh % H] += dtab_[bh * tab + u];
  } else if (cfg_.scheme == pos_scheme::shaw) {
    const int64_t half = (2 * cfg_.shaw_clip + 1) * D;
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t u = 0; u < half; ++u) {
        G[ly.shaw_k + u] += dtab_[bh * tab + u];
        G[ly.shaw_v + u] += dtab_[bh * tab + half + u];
      }
  }
  if (cfg_.scheme == pos_scheme::rope) {
    // forward: q' = R(pos) q  =>  dq = R(pos)^T dq' (the rotation with the sine negated)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const S* c = rope_cos_.data() + (b * T + t) * (D / 2);
        const S* s = rope_sin_.data() + (b * T + t) * (D / 2);
        rope_rotate(rope_layout::half, D, c, s, dq_.data() + (b * H * T + t) * D, H, T * D, true);
        rope_rotate(rope_layout::half, D, c, s, dk_.data() + (b * H * T + t) * D, H, T * D, true);
      }
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      S* row = dqkv + (b * T + t) * 3 * C;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = ((b * H + h) * T + t) * D;
        std::copy(dq_.data() + o, dq_.data() + o + D, row + h * D);
        std::copy(dk_.data() + o, dk_.data() + o + D, row + C + h * D);
        std::copy(dv_.data() + o, dv_.data() + o + D, row + 2 * C + h * D);
      }
    }
}

template <typename S>
double transformer<S>::forward(const batch& bt) {
  const int64_t C = cfg_.d_model, H = cfg_.n_heads, D = C / H, F = cfg_.d_ff, V = cfg_.vocab;
  if (bt.B < 1 || bt.T < 1) fail("batch must have B >= 1 and T >= 1, got ({}, {})", bt.B, bt.T);
  const size_t n = static_cast<size_t>(bt.B * bt.T);
  if (bt.tokens.size() != n || bt.positions.size() != n || bt.targets.size() != n)
    fail("batch tokens, positions and targets must have shape ({}, {}), got sizes {}, {}, {}", bt.B,
         bt.T, bt.tokens.size(), bt.positions.size(), bt.targets.size());
  for (size_t i = 0; i < n; ++i) {
    if (bt.tokens[i] < 0 || bt.tokens[i] >= V)
      fail("token {} at index {} is outside the vocabulary [0, {})", bt.tokens[i], i, V);
    if (bt.targets[i] < -1 || bt.targets[i] >= V)
      fail("target {} at index {} must be -1 (unscored) or in [0, {})", bt.targets[i], i, V);
    if (bt.positions[i] < 0 || bt.positions[i] > (int64_t{1} << 40))
      fail("position {} at index {} must be in [0, 2^40]", bt.positions[i], i);
    if (i % bt.T != 0 && bt.positions[i] <= bt.positions[i - 1])
      fail("positions must increase strictly along each sequence, got {} after {} at index {}",
           bt.positions[i], bt.positions[i - 1], i);
  }
  if (auto why = undefined_reason(cfg_, bt); !why.empty()) fail("{}", why);
  B_ = bt.B;
  T_ = bt.T;
  N_ = B_ * T_;
  tokens_ = bt.tokens;
  positions_ = bt.positions;
  targets_ = bt.targets;
  const S* P = params_.data();

  // Position inputs of this batch, computed once and shared by every layer and head.
  int64_t maxpos = 0;
  for (int64_t p : positions_) maxpos = std::max(maxpos, p);
  if (cfg_.scheme == pos_scheme::sinusoidal) {
    std::vector<double> tab(N_ * C);
    sinusoidal_table(sinusoidal_params{C, 10000.0, sin_layout::interleaved, sin_denominator::width},
                     positions_, std::span<double>(tab));
    // P(pos) = a * PE(pos) with a = sqrt(2) init_std: each sin/cos channel has RMS 1/sqrt(2)
    // over positions, so a PE has per-channel RMS init_std, the token embeddings' init std.
    const double a = sinusoidal_amplitude(cfg_);
    sin_table_.resize(tab.size());
    for (size_t i = 0; i < tab.size(); ++i) sin_table_[i] = static_cast<S>(a * tab[i]);
  } else if (cfg_.scheme == pos_scheme::rope) {
    rope_config rc;
    rc.head_dim = D;
    rc.rotary_dim = D;
    rc.theta = cfg_.rope_theta;
    const rope_freqs f = rope_frequencies(rc);
    rope_cos_.resize(N_ * (D / 2));
    rope_sin_.resize(N_ * (D / 2));
    for (int64_t i = 0; i < N_; ++i)
      rope_cos_sin(f, rope_angle::exact, positions_[i], rope_cos_.data() + i * (D / 2),
                   rope_sin_.data() + i * (D / 2));
  } else if (cfg_.scheme == pos_scheme::alibi) {
    alibi_slopes_ = alibi_slopes(H);
  } else if (cfg_.scheme == pos_scheme::t5) {
    // Causal keys satisfy pos_j <= pos_i, so offsets r = pos_j - pos_i in [-maxpos, 0].
    t5_lut_.resize(maxpos + 1);
    for (int64_t d = 0; d <= maxpos; ++d)
      t5_lut_[d] = t5_bucket(-d, false, cfg_.t5_buckets, cfg_.t5_max_distance);
  }

  // x_0 = E[token] (+ P(pos))
  std::vector<S>* x = &acts_[0].xin;
  x->resize(N_ * C);
  embedding_forward(P + layout_.tok_emb, tokens_.data(), x->data(), N_, C, false);
  if (cfg_.scheme == pos_scheme::sinusoidal)
    for (int64_t i = 0; i < N_ * C; ++i) (*x)[i] += sin_table_[i];
  if (cfg_.scheme == pos_scheme::learned)
    embedding_forward(P + layout_.pos_emb, positions_.data(), x->data(), N_, C, true);

  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    auto& a = acts_[l];
    const auto& ly = layout_.layers[l];
    a.n1.resize(N_ * C);
    a.mean1.resize(N_);
    a.rstd1.resize(N_);
    a.qkv.resize(N_ * 3 * C);
    a.att.resize(N_ * C);
    a.xmid.resize(N_ * C);
    a.n2.resize(N_ * C);
    a.mean2.resize(N_);
    a.rstd2.resize(N_);
    a.u.resize(N_ * F);
    a.g.resize(N_ * F);
    norm_forward(a.xin.data(), ly.ln1_g, ly.ln1_b, a.n1.data(), a.mean1.data(), a.rstd1.data());
    linear_forward(a.n1.data(), P + ly.wqkv, P + ly.bqkv, a.qkv.data(), N_, C, 3 * C);
    attention_forward(l, a.qkv.data(), a.att.data());
    // x_mid = x_in + att W_o + b_o
    linear_forward(a.att.data(), P + ly.wo, P + ly.bo, a.xmid.data(), N_, C, C);
    for (int64_t i = 0; i < N_ * C; ++i) a.xmid[i] += a.xin[i];
    norm_forward(a.xmid.data(), ly.ln2_g, ly.ln2_b, a.n2.data(), a.mean2.data(), a.rstd2.data());
    linear_forward(a.n2.data(), P + ly.w1, P + ly.b1, a.u.data(), N_, C, F);
    gelu_forward(a.u.data(), a.g.data(), N_ * F);
    // x_out = x_mid + gelu(u) W_2 + b_2
    std::vector<S>& xo = l + 1 < cfg_.n_layers ? acts_[l + 1].xin : xf_;
    xo.resize(N_ * C);
    linear_forward(a.g.data(), P + ly.w2, P + ly.b2, xo.data(), N_, F, C);
    for (int64_t i = 0; i < N_ * C; ++i) xo[i] += a.xmid[i];
  }
  nf_.resize(N_ * C);
  meanf_.resize(N_);
  rstdf_.resize(N_);
  logits_.resize(N_ * V);
  probs_.resize(N_ * V);
  nll_.resize(N_);
  norm_forward(xf_.data(), layout_.lnf_g, layout_.lnf_b, nf_.data(), meanf_.data(), rstdf_.data());
  linear_forward(nf_.data(), P + layout_.w_out, static_cast<const S*>(nullptr), logits_.data(), N_,
                 C, V);
  scored_ = 0;
  for (int64_t t : targets_) scored_ += t >= 0;
  return cross_entropy_forward(logits_.data(), targets_.data(), probs_.data(), nll_.data(), N_, V);
}

template <typename S>
void transformer<S>::backward() {
  const int64_t C = cfg_.d_model, F = cfg_.d_ff, V = cfg_.vocab;
  S* G = grads_.data();
  const S* P = params_.data();
  std::fill(grads_.begin(), grads_.end(), S(0));
  if (scored_ == 0) return;
  dlogits_.resize(N_ * V);
  dx_.assign(N_ * C, S(0));
  dn_.resize(N_ * C);
  dqkv_.resize(N_ * 3 * C);
  dattn_.resize(N_ * C);
  du_.resize(N_ * F);
  dg_.resize(N_ * F);
  cross_entropy_backward(probs_.data(), targets_.data(), dlogits_.data(), N_, V,
                         1.0 / static_cast<double>(scored_));
  // forward: logits = n_f W_out
  std::fill(dn_.begin(), dn_.end(), S(0));
  linear_backward(nf_.data(), P + layout_.w_out, dlogits_.data(), dn_.data(), G + layout_.w_out,
                  static_cast<S*>(nullptr), N_, C, V);
  norm_backward(xf_.data(), layout_.lnf_g, layout_.lnf_b, meanf_.data(), rstdf_.data(), dn_.data(),
                dx_.data());
  for (int64_t l = cfg_.n_layers - 1; l >= 0; --l) {
    auto& a = acts_[l];
    const auto& ly = layout_.layers[l];
    // forward: x_out = x_mid + gelu(u) W_2 + b_2 (dx_ holds dL/dx_out = dL/dx_mid's skip part)
    std::fill(dg_.begin(), dg_.end(), S(0));
    linear_backward(a.g.data(), P + ly.w2, dx_.data(), dg_.data(), G + ly.w2, G + ly.b2, N_, F, C);
    std::fill(du_.begin(), du_.end(), S(0));
    gelu_backward(a.u.data(), dg_.data(), du_.data(), N_ * F);
    std::fill(dn_.begin(), dn_.end(), S(0));
    linear_backward(a.n2.data(), P + ly.w1, du_.data(), dn_.data(), G + ly.w1, G + ly.b1, N_, C, F);
    norm_backward(a.xmid.data(), ly.ln2_g, ly.ln2_b, a.mean2.data(), a.rstd2.data(), dn_.data(),
                  dx_.data());
    // forward: x_mid = x_in + att W_o + b_o
    std::fill(dattn_.begin(), dattn_.end(), S(0));
    linear_backward(a.att.data(), P + ly.wo, dx_.data(), dattn_.data(), G + ly.wo, G + ly.bo, N_, C,
                    C);
    attention_backward(l, dattn_.data(), dqkv_.data());
    std::fill(dn_.begin(), dn_.end(), S(0));
    linear_backward(a.n1.data(), P + ly.wqkv, dqkv_.data(), dn_.data(), G + ly.wqkv, G + ly.bqkv,
                    N_, C, 3 * C);
    norm_backward(a.xin.data(), ly.ln1_g, ly.ln1_b, a.mean1.data(), a.rstd1.data(), dn_.data(),
                  dx_.data());
  }
  // forward: x_0 = E[token] + P[pos]
  embedding_backward(tokens_.data(), dx_.data(), G + layout_.tok_emb, N_, C);
  if (cfg_.scheme == pos_scheme::learned)
    embedding_backward(positions_.data(), dx_.data(), G + layout_.pos_emb, N_, C);
}

template class transformer<float>;
template class transformer<double>;

// ---- optimisation --------------------------------------------------------------------------

double learning_rate(const adamw_config& c, int64_t step) {
  if (c.warmup > 0 && step < c.warmup)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const double min_lr = c.lr * c.min_lr_frac;
  const int64_t span = std::max<int64_t>(1, c.total - c.warmup);
  const double progress =
      std::clamp(static_cast<double>(step - c.warmup) / static_cast<double>(span), 0.0, 1.0);
  return min_lr + (c.lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

template <typename S>
double clip_grad_norm(std::vector<S>& g, double clip) {
  double ss = 0;
  for (S x : g) ss += static_cast<double>(x) * x;
  const double norm = std::sqrt(ss);
  if (clip > 0 && norm > clip) {
    const S f = static_cast<S>(clip / norm);
    for (S& x : g) x *= f;
  }
  return norm;
}

template <typename S>
void adamw_update(const adamw_config& c, const param_layout& layout, std::vector<S>& params,
                  const std::vector<S>& grads, adamw_state& st) {
  const size_t n = params.size();
  if (st.m.size() != n) st.m.assign(n, 0.0f);
  if (st.v.size() != n) st.v.assign(n, 0.0f);
  const double lr = learning_rate(c, st.step);
  const double t = static_cast<double>(st.step + 1);
  const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
  for (const auto& tensor : layout.tensors) {
    const double wd = tensor.decay ? c.weight_decay : 0.0;
    for (int64_t i = tensor.offset; i < tensor.offset + tensor.size; ++i) {
      const double g = grads[i];
      const double m = c.beta1 * st.m[i] + (1 - c.beta1) * g;
      const double v = c.beta2 * st.v[i] + (1 - c.beta2) * g * g;
      st.m[i] = static_cast<float>(m);
      st.v[i] = static_cast<float>(v);
      const double upd = (m / bc1) / (std::sqrt(v / bc2) + c.eps) + wd * params[i];
      params[i] = static_cast<S>(params[i] - lr * upd);
    }
  }
  ++st.step;
}

template double clip_grad_norm<float>(std::vector<float>&, double);
template double clip_grad_norm<double>(std::vector<double>&, double);
template void adamw_update<float>(const adamw_config&, const param_layout&, std::vector<float>&,
                                  const std::vector<float>&, adamw_state&);
template void adamw_update<double>(const adamw_config&, const param_layout&, std::vector<double>&,
                                   const std::vector<double>&, adamw_state&);

// ---- checkpoints ---------------------------------------------------------------------------

namespace {
constexpr char k_magic[8] = {'P', 'S', 'N', 'C', 'C', 'K', 'P', 'T'};

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
template <typename T>
T get(const std::vector<std::byte>& in, size_t off) {
  T v;
  std::memcpy(&v, in.data() + off, sizeof(T));
  return v;
}
}  // namespace

void save_checkpoint(const std::string& path, const checkpoint& c) {
  const size_t n = c.params.size();
  if (c.opt.m.size() != n || c.opt.v.size() != n)
    fail("checkpoint optimizer state must have {} entries like the parameters, got m {}, v {}", n,
         c.opt.m.size(), c.opt.v.size());
  std::vector<std::byte> out;
  out.reserve(36 + c.meta.size() + 12 * n);
  out.insert(out.end(), reinterpret_cast<const std::byte*>(k_magic),
             reinterpret_cast<const std::byte*>(k_magic) + 8);
  put<uint32_t>(out, checkpoint_version);
  put<uint32_t>(out, static_cast<uint32_t>(c.meta.size()));
  put<int64_t>(out, c.opt.step);
  put<int64_t>(out, static_cast<int64_t>(n));
  out.insert(out.end(), reinterpret_cast<const std::byte*>(c.meta.data()),
             reinterpret_cast<const std::byte*>(c.meta.data()) + c.meta.size());
  for (const auto* vec : {&c.params, &c.opt.m, &c.opt.v}) {
    const auto* p = reinterpret_cast<const std::byte*>(vec->data());
    out.insert(out.end(), p, p + 4 * n);
  }
  put<uint32_t>(out, crc32(out));
  write_file_atomic(path, out);
}

checkpoint load_checkpoint(const std::string& path) {
  const std::vector<std::byte> in = read_file(path);
  if (in.size() < 36)
    fail_io("checkpoint {} is truncated: {} bytes, shorter than the 36-byte minimum", path,
            in.size());
  if (std::memcmp(in.data(), k_magic, 8) != 0)
    fail_io("{} is not a posenc checkpoint (bad magic)", path);
  const auto version = get<uint32_t>(in, 8);
  if (version != checkpoint_version)
    fail_io("checkpoint {} has version {}, this build reads version {}", path, version,
            checkpoint_version);
  const auto meta_len = get<uint32_t>(in, 12);
  const auto step = get<int64_t>(in, 16);
  const auto n = get<int64_t>(in, 24);
  if (n < 0 || n > (int64_t{1} << 32) || step < 0)
    fail_io("checkpoint {} has an invalid header (parameters {}, step {})", path, n, step);
  const uint64_t expect = 32 + uint64_t{meta_len} + 12 * static_cast<uint64_t>(n) + 4;
  if (in.size() != expect)
    fail_io(
        "checkpoint {} is {} bytes but its header describes {} bytes (truncated or "
        "trailing data)",
        path, in.size(), expect);
  const uint32_t stored = get<uint32_t>(in, in.size() - 4);
  const uint32_t actual = crc32(std::span(in.data(), in.size() - 4));
  if (stored != actual)
    fail_io("checkpoint {} is corrupt: CRC-32 {:08x} does not match the stored {:08x}", path,
            actual, stored);
  checkpoint c;
  c.meta.assign(reinterpret_cast<const char*>(in.data() + 32), meta_len);
  c.opt.step = step;
  size_t off = 32 + meta_len;
  for (auto* vec : {&c.params, &c.opt.m, &c.opt.v}) {
    vec->resize(n);
    std::memcpy(vec->data(), in.data() + off, 4 * n);
    off += 4 * n;
  }
  return c;
}

}  // namespace posenc::model
