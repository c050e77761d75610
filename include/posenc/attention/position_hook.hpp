// posenc/attention/position_hook.hpp: a position scheme as a model sees it.
//
// docs/architecture.md: every scheme enters at one of four places (the input, q/k transform, score
// bias, the value term), and nothing but the scheme's own hook knows which scheme is on. A model
// built on the engine therefore holds one position_hook and asks it
//   - which parameter tensors the scheme owns (a learned table, a table per layer, ...),
//   - what it adds at the input (x_0 += P(pos): sinusoidal, learned) and the backward of that,
//   - which engine hook to pass to attention (attention_position) and
//     where the engine's parameter gradients go (attention_grads).
// Each scheme's hook is one file, src/attention/hook_<scheme>.cpp; adding a scheme adds one
// file and one line in the registry (src/attention/position_hook.cpp). The model (model/) and
// the lab know schemes only by name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "posenc/attention/attention.hpp"

namespace posenc {

// The schemes with a hook: the members below, then (from `count` on) every scheme reached by
// name that models train with (schemes.hpp: named_scheme_decls() with a score bias, in declaration
// order; not the per-pair RoPE schemes, which apply at inference), whose hook is generic.
// Iterate 0 .. pos_scheme_count() - 1.
enum class pos_scheme { nope, sinusoidal, learned, rope, irope, count };
int pos_scheme_count();                     // the members before `count` + the named ones
const char* pos_scheme_name(pos_scheme s);  // "nope", "sinusoidal", ...
// Throws invalid_argument naming `arg` and the allowed names.
pos_scheme pos_scheme_from_name(const std::string& name, const std::string& arg = "scheme");

// Every scheme's options; each hook reads its own.
struct position_options {
  int64_t max_positions = 64;  // learned: rows of the table (positions 0..rows-1 exist)
  double rope_theta = 10000;   // rope: base of omega_i = theta^(-2i/D), half layout, R = D
  // rope and irope: a full RoPE config (scaling type, factor, ...) in place of rope_theta;
  // head_dim and rotary_dim 0 mean D. Its frequencies are rope_frequencies(*rope,
  // rope_seq_len): the sequence length drives dynamic NTK and LongRoPE's factor choice, as in
  // the engines (a model evaluated at length L is built with rope_seq_len = L; lab.hpp).
  std::optional<rope_config> rope;
  int64_t rope_seq_len = 0;
  // rope: schemes that place RoPE per (query, key) pair at inference (Self-Extend, Dual Chunk
  // Attention, StreamingLLM; schemes.hpp), on every layer's attention with their parameters.
  // A model evaluated with them runs its trained weights under them (the lab's zero-shot rows).
  std::vector<named_scheme> rope_pairs;
  double input_amplitude = 1;  // sinusoidal: x_0 = E[token] + a PE(pos)
  // irope (Llama 4's interleaved RoPE / NoPE layers): layer l is NoPE when
  // (l + 1) % irope_interval == 0, else RoPE (rope_theta); NoPE layers tune the query
  // temperature with floor_scale and attn_scale (attention_temperature; floor_scale 0 = off).
  // Llama 4 uses floor_scale 8192 for contexts of 10^5 and more; the lab's default is scaled
  // to its short sequences.
  int64_t irope_interval = 4;
  double irope_floor_scale = 64;
  double irope_attn_scale = 0.1;
  // The parameters of the schemes reached by name, by their declared names ({"<parameter>",
  // 64}); each such scheme's hook takes those it declares, the others take their defaults.
  std::vector<std::pair<std::string, double>> named_params;
};

// The model's shape as a hook needs it.
struct position_shape {
  int64_t d_model = 0;   // C = H * D
  int64_t n_heads = 0;   // H
  int64_t n_layers = 0;  // layers of the model (0 = not known)
};

// A parameter tensor owned by a scheme.
struct position_tensor {
  std::string name;  // "pos_emb", ... (per-layer ones get "layer<l>.")
  int64_t rows = 0, cols = 0;
  bool per_layer = false;  // one copy per layer (else one shared by all layers)
  bool decay = false;      // AdamW weight decay applies
};

// In every call, t[i] points at tensor i of tensors() (for per-layer tensors, the copy of the
// layer being run) and dt[i] at a gradient buffer of the same shape. Tokens are the N = B * T
// rows of a batch, positions (N,) their position ids (strictly increasing along a sequence).
template <typename S>
class position_hook {
 public:
  virtual ~position_hook() = default;
  virtual pos_scheme scheme() const = 0;
  // The tensors this scheme owns, in layout order (initialised N(0, init_std^2) by the model).
  virtual std::vector<position_tensor> tensors() const { return {}; }
  // "" when every position can be represented, else the reason (a learned table has no row past
  // its last one: reported, never clamped).
  virtual std::string undefined_reason(std::span<const int64_t>) const { return ""; }
  // Input side: x (N, C) += P(positions); backward: dt[i] += dL/dt_i given dx = dL/dx (N, C).
  virtual void input_forward(std::span<const int64_t>, const S* const*, S*) const {}
  virtual void input_backward(std::span<const int64_t>, const S*, S* const*) const {}
  // Attention side: the engine's hook for one layer (causal self-attention).
  virtual attention_position<S> attention(const S* const*) const { return {}; }
  // The same for layer `layer` of the model, for schemes that differ by layer (irope); the
  // model calls this one.
  virtual attention_position<S> layer_attention(int64_t layer, const S* const* t) const {
    (void)layer;
    return attention(t);
  }
  // A tensor argument of the engine computed per token from the layer's normalised input x
  // (N, C), the input of its q, k, v projections (Forgetting Attention's log forget gates,
  // log sigmoid(x w + b)): token_cols() > 0 columns per token. attention() then names it in
  // pos.named with an empty view, and the model points the view at each sequence's rows of
  // token_forward's output (shape (T, token_cols())), and the gradient output of that name at
  // the same rows of the gradient that token_backward reads. token_backward adds into dt (the
  // layer's tensors' gradients) and dx (the gradient of x).
  virtual int64_t token_cols() const { return 0; }
  virtual void token_forward(const S* const* t, const S* x, int64_t N, int64_t C, S* out) const {
    (void)t, (void)x, (void)N, (void)C, (void)out;
  }
  virtual void token_backward(const S* const* t, const S* x, const S* dout, int64_t N, int64_t C,
                              S* const* dt, S* dx) const {
    (void)t, (void)x, (void)dout, (void)N, (void)C, (void)dt, (void)dx;
  }
  // Points the engine's parameter-gradient outputs at dt (the engine overwrites them).
  virtual void bind_grads(S* const*, attention_grads<S>&) const {}
  // Which tensors bind_grads writes (the model adds those buffers into its gradients).
  virtual std::vector<int> attention_grad_tensors() const { return {}; }
};

// The hook of scheme s. Validates the options the scheme reads against the shape and throws
// invalid_argument naming the option (e.g. "rope needs an even head dim d_model / n_heads").
template <typename S>
std::unique_ptr<position_hook<S>> make_position_hook(pos_scheme s, const position_options& o,
                                                     const position_shape& shape);

// Small options for finite-difference checks (few buckets, short clip).
position_options position_options_for_gradcheck();

}  // namespace posenc
