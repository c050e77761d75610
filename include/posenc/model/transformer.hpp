// posenc/model/transformer.hpp: a small decoder-only transformer (GPT-2 shape, pre-norm) that
// can be trained on the CPU with any of the library's position schemes, forward and backward.
//
//   tokens (B, T) -> E[token] (+ P(pos): sinusoidal | learned)                      = x_0
//   for each layer l:
//     x += W_o attn(norm_1(x))       attn: causal softmax(q'k'^T/sqrt(D) + bias) v (+ Shaw-V)
//                                    q', k' = RoPE(q, k) for rope; bias = ALiBi | T5 | Shaw-K
//     x += W_2 gelu(W_1 norm_2(x))
//   logits = norm_f(x) W_out;  loss = mean cross-entropy over the scored targets
//
// Each scheme enters at exactly one place (DESIGN.md): sinusoidal/learned at the input, RoPE on
// q/k, ALiBi/T5/Shaw-K as a score bias, Shaw-V as a value term. The position functions are the
// library's own (encodings/): sinusoidal_table, rope_cos_sin + rope_rotate, alibi_slopes +
// alibi_bias, t5_bucket, shaw_scores/shaw_values and their backwards; this file only wires them.
//
// Templated on the scalar S: float for training, double for the finite-difference checks.
// All parameters live in one flat vector (layout below) so the optimizer, gradient clipping and
// checkpoints treat them uniformly. Results are bitwise deterministic for a given input, and
// independent of the thread count (no reduction is split across threads; per-head partial
// table gradients are reduced in head order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace posenc::model {

// Position schemes of the lab.
enum class pos_scheme { nope, sinusoidal, learned, rope, alibi, t5, shaw };
const char* pos_scheme_name(pos_scheme s);  // "nope", "sinusoidal", ...
// Throws invalid_argument naming `arg` and the allowed names.
pos_scheme pos_scheme_from_name(const std::string& name, const std::string& arg = "scheme");

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
  int64_t max_positions = 64;     // learned: rows of the table (positions 0..rows-1 exist)
  double rope_theta = 10000;      // rope: base of omega_i = theta^(-2i/D), half layout, R = D
  int64_t t5_buckets = 32;        // t5: causal buckets, one table (buckets, H) shared by layers
  int64_t t5_max_distance = 128;  //     (Raffel et al. 2020 share it across layers too)
  int64_t shaw_clip = 16;         // shaw: K; tables (2K+1, D) per layer, shared by heads
  double init_std = 0.02;         // N(0, init_std^2) weights; residual projections / sqrt(2L)
  double norm_eps = 1e-5;
};

// Throws invalid_argument naming the field for any invalid value.
void validate(const model_config& c);

// Amplitude a of the sinusoidal input positions, x_0 = E[token] + a PE(pos) (Vaswani et al.
// 2017, sec. 3.5, PE with unit amplitude): a = sqrt(2) init_std, so the table's per-channel RMS
// (1/sqrt(2) for a unit sinusoid) equals the token embeddings' init std and neither input
// drowns the other at initialisation.
double sinusoidal_amplitude(const model_config& c);

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
    int64_t ln1_g, ln1_b, wqkv, bqkv, wo, bo, ln2_g, ln2_b, w1, b1, w2, b2, shaw_k, shaw_v;
  };
  int64_t tok_emb = -1, pos_emb = -1, t5_table = -1, lnf_g = -1, lnf_b = -1, w_out = -1;
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
  // Saved activations of one layer; (N, .) rows are tokens b*T + t; heads (B, H, T, .).
  struct layer_acts {
    std::vector<S> xin, n1, mean1, rstd1, qkv, q, k, v, p, o, att, xmid, n2, mean2, rstd2, u, g;
  };
  void attention_forward(int64_t l, const S* qkv, S* out);
  void attention_backward(int64_t l, const S* dout, S* dqkv);
  void norm_forward(const S* x, int64_t g, int64_t bb, S* y, S* mean, S* rstd);
  void norm_backward(const S* x, int64_t g, int64_t bb, const S* mean, const S* rstd, const S* dy,
                     S* dx);

  model_config cfg_;
  param_layout layout_;
  std::vector<S> params_, grads_;

  // Per-forward state (sized by B*T at the start of forward).
  int64_t B_ = 0, T_ = 0, N_ = 0;
  std::vector<int64_t> tokens_, positions_, targets_;
  std::vector<S> sin_table_;            // sinusoidal: (N, C) input positions
  std::vector<S> rope_cos_, rope_sin_;  // rope: (N, D/2) per token
  std::vector<double> alibi_slopes_;    // alibi: (H)
  std::vector<int64_t> t5_lut_;         // t5: bucket of offset r = -lut index (r <= 0)
  std::vector<layer_acts> acts_;
  std::vector<S> xf_, nf_, meanf_, rstdf_, logits_, probs_, nll_;
  int64_t scored_ = 0;
  // Backward scratch.
  std::vector<S> dx_, dn_, dqkv_, dattn_, du_, dg_, dlogits_, dq_, dk_, dv_, do_, dp_, dtab_;
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
