// posenc/model/transformer.hpp: a small decoder-only transformer (GPT-2 shape, pre-norm) that
// can be trained on the CPU with any of the library's position schemes, forward and backward.
//
//   tokens (B, T) -> E[token] (+ P(pos): sinusoidal | learned)                      = x_0
//   for each layer l:
//     x += W_o attn(norm_1(x))       attn: the engine (attention_forward / attention_backward,
//                                    causal, one call per sequence) with the scheme's hook
//     x += W_2 gelu(W_1 norm_2(x))
//   logits = norm_f(x) W_out;  loss = mean cross-entropy over the scored targets
//
// The model knows no scheme: it holds the scheme's position_hook (attention/position_hook.hpp),
// which owns the scheme's parameter tensors, adds what the scheme adds at the input, and gives
// the engine's hook for attention. Attention keeps O(T * C) state per layer (q, k, v, output
// and the per-row log-sum-exp; the backward recomputes the probabilities), never a (T, T)
// matrix.
//
// Templated on the scalar S: float for training, double for the finite-difference checks.
// All parameters live in one flat vector (layout below) so the optimizer, gradient clipping and
// checkpoints treat them uniformly. Results are bitwise deterministic for a given input, and
// independent of the thread count (no reduction is split across threads; per-head partial
// table gradients are reduced in head order).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "posenc/attention/position_hook.hpp"

namespace posenc::model {

// Position schemes of the lab: the engine's hooks (attention/position_hook.hpp).
using posenc::pos_scheme;
using posenc::pos_scheme_from_name;
using posenc::pos_scheme_name;

enum class norm_kind { layernorm, rmsnorm };
const char* norm_kind_name(norm_kind n);
norm_kind norm_kind_from_name(const std::string& name, const std::string& arg = "norm");

struct model_config {
  int64_t vocab = 0;     // V >= 2
  int64_t d_model = 64;  // C = H * D
  int64_t n_layers = 2;  // >= 1
  int64_t n_heads = 4;   // H; C % H == 0
  int64_t d_ff = 256;    // F, MLP hidden width
  pos_scheme scheme = pos_scheme::nope;
  norm_kind norm = norm_kind::layernorm;
  position_options pos;    // the scheme's options (input_amplitude is set from init_std)
  double init_std = 0.02;  // N(0, init_std^2) weights; residual projections / sqrt(2L)
  double norm_eps = 1e-5;
  // Vaswani et al. 2017, sec. 3.4: x_0 = sqrt(C) E[token] + PE(pos), the input term at unit
  // amplitude (input_amplitude = 1). Off: x_0 = E[token] + a PE(pos), a below.
  bool embed_scale = false;
};

// Throws invalid_argument naming the field for any invalid value.
void validate(const model_config& c);

// Amplitude a of the sinusoidal input positions, x_0 = E[token] + a PE(pos) (Vaswani et al.
// 2017, sec. 3.5, PE with unit amplitude): a = sqrt(2) init_std, so the table's per-channel RMS
// (1/sqrt(2) for a unit sinusoid) equals the token embeddings' init std and neither input
// drowns the other at initialisation.
// Token embeddings start at init_std for every scheme; the sinusoids are scaled down to the
// same per-channel RMS instead. Scaling the embeddings up to the sinusoids' unit amplitude
// (Vaswani et al. 2017, sec. 3.4) makes the residual stream ~50x larger than the
// init_std-scaled layer outputs added to it, and the lab's 1000-step runs then never left the
// "uniform digit" plateau (loss ln 10). input_amplitude is what the model passes to the hook.
inline double input_amplitude(const model_config& c) {
  return c.embed_scale ? 1.0 : std::sqrt(2.0) * c.init_std;
}
inline double sinusoidal_amplitude(const model_config& c) {
  return input_amplitude(c);
}

// The scheme's hook for config c (options validated; input_amplitude = sinusoidal_amplitude).
template <typename S>
std::shared_ptr<const position_hook<S>> make_hook(const model_config& c);

// One named parameter tensor inside the flat vector.
struct param_tensor {
  std::string name;  // "tok_emb", "layer0.wqkv", ...
  int64_t offset = 0, size = 0;
  int64_t rows = 0, cols = 0;  // shape (rows, cols), cols contiguous
  bool decay = false;          // AdamW weight decay applies (matrices), not to gains/biases
};

struct param_layout {
  std::vector<param_tensor> tensors;
  int64_t total = 0;
  // Offsets (-1 when absent) of the tensors the forward pass needs.
  struct layer {
    int64_t ln1_g, ln1_b, wqkv, bqkv, wo, bo, ln2_g, ln2_b, w1, b1, w2, b2;
    std::vector<int64_t> hook;  // per hook tensor: this layer's copy, or the shared one
  };
  int64_t tok_emb = -1, lnf_g = -1, lnf_b = -1, w_out = -1;
  std::vector<position_tensor> hook_tensors;  // the scheme's tensors (position_hook::tensors)
  std::vector<layer> layers;
};
param_layout make_layout(const model_config& c);

// A batch of B sequences of the same length T.
//   tokens:    (B, T) in [0, vocab)
//   positions: (B, T) position ids, strictly increasing along each row, >= 0 (usually 0..T-1;
//              a sorted random subset with --randomized-positions, Ruoss et al. 2023)
//   targets:   (B, T) next-token class in [0, vocab), or -1 where the position is not scored
struct batch {
  int64_t B = 0, T = 0;
  std::vector<int64_t> tokens, positions, targets;
};

// Why a batch cannot be run, or "" if it can. A learned table has no row at positions >=
// max_positions: that is reported here (the lab turns it into "no defined position"), never
// clamped.
std::string undefined_reason(const model_config& c, const batch& b);

template <typename S>
class transformer {
 public:
  explicit transformer(const model_config& c);  // parameters zero; call init
  // GPT-2 style initialisation from posenc::rng(seed): matrices N(0, std^2) (residual output
  // projections std / sqrt(2 L)), gains 1, biases 0, T5/Shaw tables N(0, std^2); token
  // embeddings N(0, std^2) for every scheme (sinusoids are scaled by sinusoidal_amplitude).
  void init(uint64_t seed);

  const model_config& config() const { return cfg_; }
  const param_layout& layout() const { return layout_; }
  std::vector<S>& params() { return params_; }
  const std::vector<S>& params() const { return params_; }
  std::vector<S>& grads() { return grads_; }

  // Forward pass; returns the mean cross-entropy over scored targets (double). Validates the
  // batch (throws invalid_argument: token out of range, unsorted or negative positions,
  // positions with no learned row). Keeps the activations for backward() and the softmax
  // probabilities (probs()).
  double forward(const batch& b);
  // Gradients of the last forward's loss into grads() (overwritten).
  void backward();
  // probs: (B*T, V) softmax of the last forward's logits; nll: (B*T) per-token loss.
  const std::vector<S>& probs() const { return probs_; }
  const std::vector<S>& nll() const { return nll_; }
  // Number of scored targets (>= 0) in the last forward's batch: the loss's denominator.
  int64_t scored() const { return scored_; }

 private:
  // Saved activations of one layer; (N, .) rows are tokens b*T + t. q, k, v, att: (N, C) =
  // (B, T, H, D); lse: (N, H) the engine's per-row log-sum-exp.
  struct layer_acts {
    std::vector<S> xin, n1, mean1, rstd1, qkv, q, k, v, lse, att, xmid, n2, mean2, rstd2, u, g;
    std::vector<S> tok;  // (N, hook token_cols()): the hook's per-token tensor of this layer
  };
  // x: the layer's normalised input (N, C), which a hook with a per-token tensor reads.
  void attention_forward(int64_t l, const S* x, const S* qkv, S* out);
  // dtok_ receives the gradient of the hook's per-token tensor.
  void attention_backward(int64_t l, const S* dout, S* dqkv);
  // The hook's per-token tensor (if any) of layer l into the engine's arguments of sequence b.
  void bind_token_tensor(int64_t l, int64_t b, attention_position<S>& pos, attention_grads<S>* g);
  void norm_forward(const S* x, int64_t g, int64_t bb, S* y, S* mean, S* rstd);
  void norm_backward(const S* x, int64_t g, int64_t bb, const S* mean, const S* rstd, const S* dy,
                     S* dx);

  // Pointers to the hook's tensors for layer l (params or grads base).
  template <typename P>
  std::vector<P*> hook_ptrs(P* base, int64_t l) const;

  model_config cfg_;
  param_layout layout_;
  std::shared_ptr<const position_hook<S>> hook_;
  std::vector<S> params_, grads_;

  // Per-forward state (sized by B*T at the start of forward).
  int64_t B_ = 0, T_ = 0, N_ = 0;
  std::vector<int64_t> tokens_, positions_, targets_;
  std::vector<layer_acts> acts_;
  std::vector<S> xf_, nf_, meanf_, rstdf_, logits_, probs_, nll_;
  int64_t scored_ = 0;
  // Backward scratch.
  std::vector<S> dx_, dn_, dqkv_, dattn_, du_, dg_, dlogits_, dq_, dk_, dv_, dtok_;
  std::vector<std::vector<S>> dhook_;  // (per hook tensor) the engine's parameter gradients
};

// ---- optimisation --------------------------------------------------------------------------

// AdamW (Loshchilov and Hutter 2019, Algorithm 2) with bias-corrected moments:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p [decay tensors only])
struct adamw_config {
  double lr = 3e-3, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.01;
  int64_t warmup = 100;  // linear warm-up steps from lr/warmup to lr
  int64_t total = 1000;  // cosine decay from lr at step `warmup` to min_lr_frac*lr at `total`
  double min_lr_frac = 0.1;
  double clip_norm = 1.0;  // global gradient-norm clip (0 = off)
};

// Learning rate at step t (0-based): lr (t+1)/warmup during warm-up, then
// min + (lr - min) (1 + cos(pi * progress)) / 2 (Loshchilov and Hutter 2017, SGDR, eq. 5).
double learning_rate(const adamw_config& c, int64_t step);

// Global L2 norm of g (double accumulation in index order), then g *= clip/norm if it is
// larger. Returns the norm before clipping.
template <typename S>
double clip_grad_norm(std::vector<S>& g, double clip);

struct adamw_state {
  int64_t step = 0;  // number of updates applied
  std::vector<float> m, v;
};
// One update of params with grads at step state.step (then step += 1).
template <typename S>
void adamw_update(const adamw_config& c, const param_layout& layout, std::vector<S>& params,
                  const std::vector<S>& grads, adamw_state& state);

// ---- checkpoints ---------------------------------------------------------------------------
// File layout (little-endian), written atomically with posenc::write_file_atomic:
//   0   8 bytes  magic "PSNCCKPT"
//   8   u32      version (checkpoint_version)
//   12  u32      meta length L (bytes of UTF-8 JSON)
//   16  i64      step (updates applied)
//   24  i64      n (parameters)
//   32  L bytes  meta JSON (model config, training options, loss curve; opaque here)
//   32+L         3 n float32: params, AdamW m, AdamW v
//   end-4 u32    CRC-32 (posenc::crc32) of every byte before it
inline constexpr uint32_t checkpoint_version = 1;
struct checkpoint {
  std::string meta;  // JSON text
  adamw_state opt;   // step, m, v
  std::vector<float> params;
};
void save_checkpoint(const std::string& path, const checkpoint& c);
// Throws io_error naming the path and the problem: unreadable, too short, bad magic,
// unsupported version, sizes that disagree with the file length, checksum mismatch.
checkpoint load_checkpoint(const std::string& path);

}  // namespace posenc::model
