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
#include "posenc/model/ops.hpp"

namespace posenc::model {

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
  if (c.n_layers < 1 || c.n_layers > 64) fail("n_layers must be in [1, 64], got {}", c.n_layers);
  if (c.d_ff < 1 || c.d_ff > 65536) fail("d_ff must be in [1, 65536], got {}", c.d_ff);
  if (!(c.init_std >= 0) || !std::isfinite(c.init_std))
    fail("init_std must be finite and >= 0, got {}", c.init_std);
  if (!(c.norm_eps > 0)) fail("norm_eps must be > 0, got {}", c.norm_eps);
  checked_bytes("model parameters",
                static_cast<unsigned long long>(c.vocab) +
                    static_cast<unsigned long long>(c.pos.max_positions),
                static_cast<unsigned long long>(c.d_model), 16, 8);
  (void)make_hook<float>(c);  // validates the scheme's options
}

template <typename S>
std::shared_ptr<const position_hook<S>> make_hook(const model_config& c) {
  position_options o = c.pos;
  o.input_amplitude = input_amplitude(c);
  return make_position_hook<S>(c.scheme, o, position_shape{c.d_model, c.n_heads, c.n_layers});
}
template std::shared_ptr<const position_hook<float>> make_hook<float>(const model_config&);
template std::shared_ptr<const position_hook<double>> make_hook<double>(const model_config&);

param_layout make_layout(const model_config& c) {
  validate(c);
  param_layout L;
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab;
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, bool decay) {
    L.tensors.push_back({name, L.total, rows * cols, rows, cols, decay});
    L.total += rows * cols;
    return L.tensors.back().offset;
  };
  const bool ln = c.norm == norm_kind::layernorm;
  L.tok_emb = add("tok_emb", V, C, true);
  // The scheme's shared tensors follow the token embeddings, its per-layer ones close each layer.
  L.hook_tensors = make_hook<float>(c)->tensors();
  std::vector<int64_t> shared(L.hook_tensors.size(), -1);
  for (size_t i = 0; i < L.hook_tensors.size(); ++i) {
    const auto& t = L.hook_tensors[i];
    if (!t.per_layer) shared[i] = add(t.name, t.rows, t.cols, t.decay);
  }
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
    ly.hook = shared;
    for (size_t i = 0; i < L.hook_tensors.size(); ++i) {
      const auto& t = L.hook_tensors[i];
      if (t.per_layer) ly.hook[i] = add(p + t.name, t.rows, t.cols, t.decay);
    }
    L.layers.push_back(ly);
  }
  L.lnf_g = add("lnf_g", 1, C, false);
  L.lnf_b = ln ? add("lnf_b", 1, C, false) : -1;
  L.w_out = add("w_out", C, V, true);
  return L;
}

std::string undefined_reason(const model_config& c, const batch& b) {
  return make_hook<float>(c)->undefined_reason(b.positions);
}

// ---- transformer ---------------------------------------------------------------------------

template <typename S>
transformer<S>::transformer(const model_config& c)
    : cfg_(c), layout_(make_layout(c)), hook_(make_hook<S>(c)) {
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
    // Token embeddings start at init_std for every scheme; a fixed input term is scaled to
    // the same per-channel RMS instead (input_amplitude, transformer.hpp).
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

template <typename S>
template <typename P>
std::vector<P*> transformer<S>::hook_ptrs(P* base, int64_t l) const {
  std::vector<P*> t;
  for (int64_t off : layout_.layers[l].hook) t.push_back(base + off);
  return t;
}

// Causal multi-head attention of layer l: the engine, one call per sequence, with the scheme's
// hook. qkv: (N, 3C) rows [q heads | k heads | v heads]; out: (N, C) = (B, T, H, D).
// Saves q, k, v (N, C) and the per-row log-sum-exp (N, H) for the backward.
template <typename S>
void transformer<S>::bind_token_tensor(int64_t l, int64_t b, attention_position<S>& pos,
                                       attention_grads<S>* g) {
  const int64_t w = hook_->token_cols();
  if (w == 0) return;
  if (pos.named.empty() || pos.named.back().tensors.size() != 1)
    fail("position hook: a per-token tensor needs one tensor argument in pos.named");
  named_tensor& t = pos.named.back().tensors[0];
  t.shape = {T_, w};
  const S* rows = acts_[l].tok.data() + b * T_ * w;
  if constexpr (std::is_same_v<S, float>)
    t.f32 = std::span<const float>(rows, T_ * w);
  else
    t.f64 = std::span<const double>(rows, T_ * w);
  if (g) g->named = {{t.name, std::span<S>(dtok_.data() + b * T_ * w, T_ * w)}};
}

template <typename S>
void transformer<S>::attention_forward(int64_t l, const S* x, const S* qkv, S* out) {
  auto& a = acts_[l];
  const int64_t B = B_, T = T_, H = cfg_.n_heads, C = cfg_.d_model, D = C / H;
  a.q.resize(N_ * C);
  a.k.resize(N_ * C);
  a.v.resize(N_ * C);
  a.lse.resize(N_ * H);
  for (int64_t n = 0; n < N_; ++n) {
    const S* row = qkv + n * 3 * C;
    std::copy(row, row + C, a.q.data() + n * C);
    std::copy(row + C, row + 2 * C, a.k.data() + n * C);
    std::copy(row + 2 * C, row + 3 * C, a.v.data() + n * C);
  }
  const auto t = hook_ptrs(static_cast<const S*>(params_.data()), l);
  attention_position<S> pos = hook_->layer_attention(l, t.data());
  a.tok.resize(N_ * hook_->token_cols());
  hook_->token_forward(t.data(), x, N_, C, a.tok.data());
  for (int64_t b = 0; b < B; ++b) {
    attention_params<S> p;
    p.q = a.q.data() + b * T * C;
    p.k = a.k.data() + b * T * C;
    p.v = a.v.data() + b * T * C;
    p.out = out + b * T * C;
    bind_token_tensor(l, b, pos, nullptr);
    p.lse = a.lse.data() + b * T * H;
    p.T = p.S = T;
    p.Hq = p.Hkv = H;
    p.D = D;
    p.causal = true;
    p.q_positions = p.k_positions = std::span<const int64_t>(positions_.data() + b * T, T);
    p.pos = pos;
    posenc::attention_forward(p);
  }
}

// Backward of attention_forward. dout: (N, C); dqkv: (N, 3C), overwritten. The engine's
// parameter gradients (per sequence, overwritten) are added into the hook tensors' gradients.
template <typename S>
void transformer<S>::attention_backward(int64_t l, const S* dout, S* dqkv) {
  auto& a = acts_[l];
  const int64_t B = B_, T = T_, H = cfg_.n_heads, C = cfg_.d_model, D = C / H;
  dq_.resize(N_ * C);
  dk_.resize(N_ * C);
  dv_.resize(N_ * C);
  const auto t = hook_ptrs(static_cast<const S*>(params_.data()), l);
  const auto tg = hook_ptrs(grads_.data(), l);
  attention_position<S> pos = hook_->layer_attention(l, t.data());
  dtok_.resize(N_ * hook_->token_cols());
  dhook_.resize(layout_.hook_tensors.size());
  std::vector<S*> dt(dhook_.size());
  for (size_t i = 0; i < dhook_.size(); ++i) {
    dhook_[i].resize(layout_.hook_tensors[i].rows * layout_.hook_tensors[i].cols);
    dt[i] = dhook_[i].data();
  }
  const std::vector<int> bound = hook_->attention_grad_tensors();
  for (int64_t b = 0; b < B; ++b) {
    attention_params<S> p;
    p.q = a.q.data() + b * T * C;
    p.k = a.k.data() + b * T * C;
    p.v = a.v.data() + b * T * C;
    p.T = p.S = T;
    p.Hq = p.Hkv = H;
    p.D = D;
    p.causal = true;
    p.q_positions = p.k_positions = std::span<const int64_t>(positions_.data() + b * T, T);
    p.pos = pos;
    p.out = a.att.data() + b * T * C;  // the forward's output (read by the backward)
    attention_grads<S> g;
    g.out = p.out;
    g.lse = a.lse.data() + b * T * H;
    g.dout = dout + b * T * C;
    g.dq = dq_.data() + b * T * C;
    g.dk = dk_.data() + b * T * C;
    g.dv = dv_.data() + b * T * C;
    hook_->bind_grads(dt.data(), g);
    bind_token_tensor(l, b, pos, &g);
    p.pos = pos;
    posenc::attention_backward(p, g);
    for (int i : bound)
      for (size_t x = 0; x < dhook_[i].size(); ++x) tg[i][x] += dhook_[i][x];
  }
  for (int64_t n = 0; n < N_; ++n) {
    S* row = dqkv + n * 3 * C;
    std::copy(dq_.data() + n * C, dq_.data() + (n + 1) * C, row);
    std::copy(dk_.data() + n * C, dk_.data() + (n + 1) * C, row + C);
    std::copy(dv_.data() + n * C, dv_.data() + (n + 1) * C, row + 2 * C);
  }
}

template <typename S>
double transformer<S>::forward(const batch& bt) {
  const int64_t C = cfg_.d_model, F = cfg_.d_ff, V = cfg_.vocab;
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

  // x_0 = E[token] (+ P(pos), the scheme's input term)
  std::vector<S>* x = &acts_[0].xin;
  x->resize(N_ * C);
  embedding_forward(P + layout_.tok_emb, tokens_.data(), x->data(), N_, C, false);
  if (cfg_.embed_scale) {  // x_0 = sqrt(C) E[token] + PE(pos) (Vaswani et al. 2017, sec. 3.4)
    const S scale = static_cast<S>(std::sqrt(static_cast<double>(C)));
    for (S& v : *x) v *= scale;
  }
  hook_->input_forward(positions_, hook_ptrs(P, 0).data(), x->data());

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
    attention_forward(l, a.n1.data(), a.qkv.data(), a.att.data());
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
    hook_->token_backward(hook_ptrs(static_cast<const S*>(P), l).data(), a.n1.data(), dtok_.data(),
                          N_, C, hook_ptrs(G, l).data(), dn_.data());
    norm_backward(a.xin.data(), ly.ln1_g, ly.ln1_b, a.mean1.data(), a.rstd1.data(), dn_.data(),
                  dx_.data());
  }
  // forward: x_0 = E[token] + P(pos), or sqrt(C) E[token] + P(pos) with embed_scale
  if (cfg_.embed_scale) {
    const S scale = static_cast<S>(std::sqrt(static_cast<double>(C)));
    std::vector<S> d(dx_.begin(), dx_.begin() + N_ * C);
    for (S& v : d) v *= scale;
    embedding_backward(tokens_.data(), d.data(), G + layout_.tok_emb, N_, C);
  } else {
    embedding_backward(tokens_.data(), dx_.data(), G + layout_.tok_emb, N_, C);
  }
  hook_->input_backward(positions_, dx_.data(), hook_ptrs(G, 0).data());
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
