// posenc/attention/attention.hpp: multi-head attention with position, one engine for every
// scheme.
//
// The path of the data (docs/architecture.md), with the engine's hooks marked:
//
//   q, k --[hook 1: q/k transform  = RoPE at position ids]--> q', k'
//   s_ij = scale * q'_i . (k'_j [+ a^K_c  hook 2a: Shaw-K])
//          [+ bias(i, j)           hook 2b: the score biases]      biases after scaling
//          masked -> -inf          causal | key padding | packed documents | sliding window
//   p_i  = softmax_j(s_i)
//   o_i  = sum_j p_ij (v_j [+ a^V_c  hook 3: Shaw-V])
//
// with c = clip(kpos_j - qpos_i, -K, K) + K (Shaw et al. 2018, eq. 3-4). Absolute encodings
// (sinusoidal, learned) act on the input before attention and need nothing here. A scheme is
// switched on by naming it, with its arguments, in attention_position::named; nothing else in
// the engine knows which scheme is on, and which combine follows from their declarations.
//
// Masks are defined on token indices (query i is token S - T + i of the key sequence, i.e.
// aligned bottom-right, as a chunk of new tokens after a cache), position schemes on position
// ids. Query i may see key j iff all of:
//   causal:        j <= S - T + i
//   window W > 0:  (S - T + i) - j < W          (only keys behind are limited; keys ahead are
//                                                limited by `causal` alone)
//   key padding:   key_padding[j] != 0 and k_positions[j] != pad_position
//   documents:     q_doc(i) == k_doc(j)
//   query pad:     q_positions[i] != pad_position (a pad query sees nothing)
// A row that sees no key gets out = 0 and lse = -inf, never NaN.
//
// Two implementations of the same contract:
//   attention_reference  the specification: the full (S,) score row per (head, query) in
//                        double, then a two-pass softmax; RoPE applied in double.
//   attention_tiled      FlashAttention-2 style (Dao 2023, Algorithm 1): query blocks x key
//                        blocks with an online softmax (Milakov and Gimelshein 2018), extra
//                        memory O(Bq * (D + Bk + 2K+1)) per thread plus one rotated copy of q and
//                        k when RoPE is on; never a T x S score or bias matrix. Arithmetic in
//                        the element type (float or double). float32 runs Highway
//                        micro-kernels (src/attention/attention_simd.cpp: register-blocked
//                        Q K^T and P V, keys transposed once per call, O(S * Hkv * D) extra);
//                        double runs the plain loops of attention.cpp.
//   attention_forward    the tiled path, or the reference when the environment variable
//                        POSENC_REFERENCE=1 is set (one binary can compare both).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/core/half.hpp"
#include "posenc/encodings/rope.hpp"

namespace posenc {

// A query temperature by position (hook 1 on queries only; the scheme reached by name
// "temperature", temperature_scheme below): q'_t = s(qpos_t) A(qpos_t) q_t with
//   s(p) = log(floor((p + position_offset) / floor_scale) + 1) * attn_scale + 1,
// A the call's other q/k transform (RoPE, M-RoPE, one reached by name) or the identity; keys
// unchanged. s = 1 below floor_scale - offset and grows like log p after, so that attention over
// long contexts stays sharp. Two models use it:
//   Llama 4 (Meta 2025; transformers' Llama4TextAttention, attn_temperature_tuning) on its NoPE
//     layers: floor_scale 8192, attn_scale 0.1, position_offset 1;
//   Ministral 3 and Mistral 4 (transformers' get_llama_4_attn_scale, rope_parameters'
//     llama_4_scaling_beta) on every layer, after RoPE: floor_scale =
//     original_max_position_embeddings, attn_scale = llama_4_scaling_beta, position_offset 0.
struct attention_temperature {
  double floor_scale = 0;      // > 0 switches it on (Llama 4: 8192)
  double attn_scale = 0;       // Llama 4: 0.1; finite, >= 0
  double position_offset = 1;  // Llama 4: 1 (cache_position + 1); Ministral 3: 0
  bool on() const { return floor_scale > 0; }
};
// s(pos) of the formula above in double, pos >= 0.
double attention_temperature_scale(const attention_temperature& t, int64_t pos);
// The temperature t as the scheme reached by name that applies it (attention_position::named:
// a query scale at hook 1, after the call's other q/k transform;
// src/attention/hook_temperature.cpp).
struct named_scheme;
named_scheme temperature_scheme(const attention_temperature& t);

// A scheme, by its declared name (schemes.hpp): every scheme of the engine is one of these in
// attention_position::named, with its numeric parameters by their declared names (a parameter
// left out takes its declared default; an unknown name is an error that lists the declared
// ones). Such a scheme is declared once, in its declaration, and needs nothing here.
// Its tensor parameters (declared with dtype "tensor") are
// named_tensors: a view in the call's element type (f32 for a float call, f64 for a double one),
// with the shape as given, checked against the declared shape; one declared "tensor64" is f64 in
// every call, one declared "ids" (integer ids: M-RoPE's) is in ids in every call.
struct named_tensor {
  std::string name;                   // the declared parameter's name
  std::vector<int64_t> shape;         // as given: (S, Hq) -> {S, Hq}
  std::span<const float> f32;         // the values of a float call
  std::span<const double> f64;        // the values of a double call
  std::span<const int64_t> ids = {};  // the values of an "ids" parameter
};
struct named_scheme {
  std::string name;                                         // the declared name
  std::vector<std::pair<std::string, double>> params = {};  // {parameter, value}, ...
  std::vector<named_tensor> tensors = {};                   // {parameter, shape, view}, ...
  // A switch of dtype "RopeConfig" (RoPE, M-RoPE): the frequencies of that config at its
  // sequence length (rope_frequencies), which must outlive the calls.
  const rope_freqs* freqs = nullptr;
};

// Hook 1, RoPE (Su et al. 2021): q'_t = a R(qpos_t) q_t, k'_s = a R(kpos_s) k_s at the call's
// position ids, with f's frequencies and magnitude a (rotary_dim <= D, head_dim == D), in the
// given pair layout and angle arithmetic; as the scheme reached by name that applies it
// (src/attention/hook_rope.cpp). Keys given already rotated (a KV cache stores them so):
// attention_position::keys_transformed.
named_scheme rope_scheme(const rope_freqs& f, rope_layout layout = rope_layout::half,
                         rope_angle angle = rope_angle::exact);

// Hook 1, M-RoPE (Wang et al. 2024, "Qwen2-VL", sec. 2.1): RoPE with three position ids per
// token (temporal, height, width); pair i turns by the id of its component c_i, given by
// mrope_components(section, interleaved, rotary_dim / 2) (rope.hpp; Qwen3-VL's interleaved
// layout when interleaved). q'_t and k'_s are mrope_apply's rotation at the token's ids, bit for
// bit; its transpose, the backward, is mrope_apply's inverse. The ids are the transform's own,
// q_ids (3, T) and k_ids (3, S) row-major (row 0 temporal, 1 height, 2 width; every id in
// [0, 2^62]; k_ids may be empty when the keys are given rotated): the call's 1-D q_positions /
// k_positions still drive the masks, pads and biases (posenc attend passes the temporal row
// there). A text token has equal ids in all three rows and is rotated exactly as RoPE at that
// id. The scheme reached by name that applies it (src/attention/hook_mrope.cpp); f and the ids
// must outlive the calls.
named_scheme mrope_scheme(const rope_freqs& f, const std::array<int64_t, 3>& section,
                          bool interleaved, rope_layout layout, rope_angle angle,
                          std::span<const int64_t> q_ids, std::span<const int64_t> k_ids);
// For a call against a KV cache whose transform is M-RoPE (attention_forward_cached): the cache's
// M-RoPE at the queries' ids q_ids (3, T) instead of the last T tokens' (the default).
named_scheme mrope_query_ids(std::span<const int64_t> q_ids);
// The gradient of a named scheme's tensor parameter (attention_grads::named): `name` is the
// parameter's, data its shape's element count in the call's type, overwritten.
// A float64 parameter (dtype "tensor64") has its gradient in f64 instead, in every call.
template <typename Real>
struct named_grad {
  std::string name;
  std::span<Real> data;
  std::span<double> f64 = {};
};

// Which position schemes are on: one typed list of schemes, each with its arguments.
template <typename Real>
struct attention_position {
  std::vector<named_scheme> named;  // the schemes on, by declared name (each at most once); the
                                    //   engine applies them in declaration order
  bool keys_transformed = false;    // the call's q/k transform (RoPE, M-RoPE, xPos): k is given
                                    //   transformed (a KV cache stores it so); only q is mapped
};

// Operand precision of the forward's block products (attention_params::products).
enum class attention_products { f32, bf16 };
// "f32", "bf16".
std::string name(attention_products x);
// True when this CPU runs attention_products::bf16 with vdpbf16ps (AVX512_BF16) and the
// dispatched SIMD target is an AVX-512 one (POSENC_SIMD_TARGET may name another).
bool attention_bf16_native();

// One attention call. Shapes: T queries, S keys, Hq query heads, Hkv key/value heads,
// head dim D. Head h of q reads key/value head h / (Hq / Hkv) (MHA, GQA, MQA; no copies).
template <typename Real>
struct attention_params {
  const Real* q = nullptr;  // q:   (T, Hq, D), D contiguous
  const Real* k = nullptr;  // k:   (S, Hkv, D), D contiguous
  const Real* v = nullptr;  // v:   (S, Hkv, D), D contiguous
  // Half-precision keys and values (attention_forward on float32 only): kv = f16 or bf16 makes
  // k16 and v16, (S, Hkv, D) in that format (posenc/core/half.hpp), the keys and values; k and v
  // must then be null. Scores and outputs are computed in float32 on the widened values (exact
  // widening: the result is the float32 attention of the stored values); a decode step reads
  // half the bytes.
  kv_storage kv = kv_storage::f32;
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  // Half-precision queries (attention_forward on float32 only): q_storage = f16 or bf16 makes
  // q16, (T, Hq, D) in that format, the queries; q must then be null. Widened exactly as each
  // item loads its rows (no float32 copy of Q), so the result is that of the stored values.
  kv_storage q_storage = kv_storage::f32;
  const uint16_t* q16 = nullptr;
  // Precision of the two block products (attention_forward on float32 only; the backward refuses
  // bf16). f32: float32 operands (the default). bf16: both products take bfloat16 operands with
  // float32 accumulation, as bfloat16 models run on accelerators: q' and k' (after hook 1; q
  // before the scale, which multiplies the float32 score), the probabilities p = exp(s - m) and
  // v are rounded to bfloat16 (round to nearest even; exact when q, k, v are stored bfloat16 and
  // no hook 1 transforms them), and each product accumulates exactly in float32 (a bfloat16
  // product is exact in float32). The softmax, its sums, the position terms and the output stay
  // float32. Error against the float64 reference: attention_cases.hpp, "bfloat16 products".
  // Where the CPU has vdpbf16ps (AVX512_BF16: Intel Cooper Lake and Sapphire Rapids on, AMD
  // Zen 4 on; attention_bf16_native()) prefill calls run it, two multiply-adds per float32 lane
  // and instruction; elsewhere, and for decode-like calls (which read K and V in place), the
  // products run in float32 on the exact values, which the same bound covers.
  attention_products products = attention_products::f32;
  // Key/value layout. 0 (the default): token-major, k and v (S, Hkv, D) as above. > 0:
  // head-major, as posenc's KV cache stores them: the S rows of kv head hk start at
  // k + hk * kv_head_stride, D apart, i.e. an (Hkv, kv_head_stride / D, D) array of which each
  // head's first S rows are read (likewise v, k16, v16). A decode step then reads each head's
  // keys and values as two contiguous runs instead of S rows Hkv * D apart. A multiple of D,
  // >= S * D. Forward only (the backward refuses it).
  int64_t kv_head_stride = 0;
  // Keys in blocks of kKeyBlock = 8 (head-major only: kv_head_stride > 0; D a multiple of 8):
  // each head's keys 8 at a time, element e of key j of head hk at
  //   hk * kv_head_stride + (j / 8) * 8 D + (e / 8) * 64 + (j % 8) * 8 + e % 8
  // (k_index), so the 8 keys' elements [8c, 8c + 8) are 64 consecutive elements; values stay
  // rows. A decode step's dot products read 8 keys at a time, and in this layout those reads run
  // in address order (docs/decisions.md, "Keys in 8-key blocks"). kv_head_stride must then be
  // >= ceil(S / 8) * 8 D (a last, partial block is a whole block; its unused slots are never
  // read). The same results, bit for bit, as the same keys in rows. Forward only.
  bool k_blocked = false;
  Real* out = nullptr;  // out: (T, Hq, D); may not alias q, k, v
  Real* lse = nullptr;  // lse: (T, Hq) natural log of sum_j exp(s_ij) (scaled, biased,
                        //      before Shaw-V); -inf for a row that sees no key. Optional.
  int64_t T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;  // T, S >= 0; Hq % Hkv == 0; D >= 1
  std::optional<double> scale;                   // default 1 / sqrt(D); finite
  bool causal = false;                           // bottom-right aligned (see above)
  int64_t window = 0;                            // W >= 0; 0 = no sliding window
  std::span<const uint8_t> key_padding;          // (S,) nonzero = real key; empty = all real
  // Packed documents, one of two forms (both empty = one document):
  std::span<const int64_t> cu_seqlens;  // over the S keys (0, ..., S); query i belongs to the
                                        //   document of key S - T + i (requires T <= S)
  std::span<const int64_t> q_doc_ids;   // (T,) and
  std::span<const int64_t> k_doc_ids;   // (S,) per-token document ids (both or neither)
  // Position ids (int64, >= 0, or pad_position = -1 for a padding slot). Defaults:
  //   k_positions[j] = j, or the index within its document when packed (restart at 0);
  //   q_positions[i] = default_k_positions[S - T + i] (fresh when T == S, continuation after
  //   a cached prefix of S - T otherwise); with T > S, q_positions must be given.
  // Given k_positions but no q_positions: q_positions[i] = k_positions[S - T + i].
  std::span<const int64_t> q_positions;  // (T,)
  std::span<const int64_t> k_positions;  // (S,)
  attention_position<Real> pos;          // the position schemes
  // Attention sinks, gpt-oss's convention (transformers' s_aux, the checkpoints' `sinks`):
  // one learned logit per query head that joins each row's softmax as one more score with no
  // value, p_ij = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij)), so the row's weights sum to less
  // than 1; lse includes it (a row that sees no key gets out = 0 and lse = sink_h). (Hq,),
  // finite; empty = off. Not with a scheme on a path of its own (CoPE) or bfloat16 products.
  std::span<const Real> sinks;
};

// A row's normalisation with a sink (attention_params::sinks): given the row's running max m
// and sum l = sum_j exp(s_ij - m) (l = 0: no visible key), the factor that turns the
// unnormalised accumulators into the output, f = exp(m - M) / (l exp(m - M) + exp(sink - M)),
// and lse = M + log(l exp(m - M) + exp(sink - M)), with M = max(m, sink) so nothing overflows.
template <typename Real>
inline void sink_normalise(Real m, Real l, Real sink, Real* factor, Real* lse) {
  if (l == Real(0)) {
    *factor = Real(0);
    *lse = sink;
    return;
  }
  const Real M = m > sink ? m : sink;
  const Real a = std::exp(m - M), L = l * a + std::exp(sink - M);
  *factor = a / L;
  *lse = M + std::log(L);
}

// Element offset of key / value row j of kv head hk in p's layout (kv_head_stride). With
// k_blocked it is still the values' row; keys are read through k_index.
template <typename Real>
inline int64_t kv_offset(const attention_params<Real>& p, int64_t j, int64_t hk) {
  return p.kv_head_stride > 0 ? hk * p.kv_head_stride + j * p.D : (j * p.Hkv + hk) * p.D;
}

// Keys per block of the k_blocked layout, and the elements of a key in each of its pieces.
inline constexpr int64_t kKeyBlock = 8;

// Element offset of element e of key j of kv head hk in the k_blocked layout with head stride
// head_stride (elements) and head dim D (a multiple of kKeyBlock).
inline int64_t blocked_key_index(int64_t head_stride, int64_t D, int64_t j, int64_t hk, int64_t e) {
  constexpr int64_t B = kKeyBlock;
  return hk * head_stride + j / B * B * D + e / B * B * B + j % B * B + e % B;
}

// Element offset of element e of key j of kv head hk in p's layout (k_blocked or rows).
template <typename Real>
inline int64_t k_index(const attention_params<Real>& p, int64_t j, int64_t hk, int64_t e) {
  if (!p.k_blocked) return kv_offset(p, j, hk) + e;
  return blocked_key_index(p.kv_head_stride, p.D, j, hk, e);
}

// Copies key j of kv head hk (D elements of p.k, float32 / float64 storage) from p's layout
// into dst (Real or wider): one run in rows, 8-element pieces in blocks.
template <typename Real, typename Out>
inline void copy_key(const attention_params<Real>& p, int64_t j, int64_t hk, Out* dst) {
  const int64_t piece = p.k_blocked ? kKeyBlock : p.D;
  for (int64_t e = 0; e < p.D; e += piece) std::copy_n(p.k + k_index(p, j, hk, e), piece, dst + e);
}

// Validates p (throws invalid_argument naming the field and the expected shape, e.g.
// "q_positions must have shape (T,) = (5,), got (4,)"). Called by every entry point below.
template <typename Real>
void attention_validate(const attention_params<Real>& p);

// The dispatcher: attention_tiled, or attention_reference when POSENC_REFERENCE=1.
template <typename Real>
void attention_forward(const attention_params<Real>& p);

// The specification: per (head, query) the full score row in double, masked, max-subtracted
// two-pass softmax in double, outputs rounded once to Real. Slow (allocates an (S,) row).
template <typename Real>
void attention_reference(const attention_params<Real>& p);

// The fast path: tiled online softmax, threads over (kv head, query block). Agrees with the
// reference to the tolerances derived in include/posenc/verify/attention_cases.hpp: for double
// about 1e-13 relative to max|v| (+ max|a^V|); for float a few times (D + S) * 2^-24 times the
// score magnitude, relative to max|v|.
template <typename Real>
void attention_tiled(const attention_params<Real>& p);

// ---- backward ------------------------------------------------------------------------------
//
// The gradient of a scalar loss L through one attention call, given dO = dL/dout. With the
// forward written per (head h, query i) as in attention_reference,
//   s_ij = scale q'_i . (k'_j + a^K_c) + bias_h(i, j);  p_ij = exp(s_ij - lse_i);
//   o_i = sum_j p_ij (v_j + a^V_c),
// the backward is (Dao 2023, FlashAttention-2, Algorithm 2, with the position terms added):
//   D_i    = dO_i . o_i                                  (= sum_j p_ij dP_ij)
//   dP_ij  = dO_i . (v_j + a^V_c)
//   dS_ij  = p_ij (dP_ij - D_i)                          (softmax backward)
//   dv_j  += p_ij dO_i                 da^V_c += p_ij dO_i
//   dq'_i += scale dS_ij (k'_j + a^K_c) dk'_j += scale dS_ij q'_i      da^K_c += scale dS_ij q'_i
//   dx += dS_ij * dbias_h(i, j)/dx                       (a named bias's tensor x)
//   dq = a R(qpos)^T dq',  dk = a R(kpos)^T dk'          (RoPE: the rotation with sine negated)
// GQA/MQA: dk and dv of kv head hk sum over its G = Hq / Hkv query heads. With
// pos.keys_transformed, k was given rotated and dk is the gradient with respect to that k.
// Masked pairs and rows that see no key (lse = -inf) contribute nothing: their gradients are
// exactly zero, never NaN.
template <typename Real>
struct attention_grads {
  const Real* out = nullptr;   // out: (T, Hq, D) of the forward with the same params
  const Real* lse = nullptr;   // lse: (T, Hq) of that forward (-inf for a row that sees nothing)
  const Real* dout = nullptr;  // dO:  (T, Hq, D)
  Real* dq = nullptr;          // (T, Hq, D), overwritten
  Real* dk = nullptr;          // (S, Hkv, D), overwritten
  Real* dv = nullptr;          // (S, Hkv, D), overwritten
  // Position parameters; each optional (null = not wanted), overwritten when given.
  // (Hq,): gradient of the sink logits, -sum_i p_i,sink (dO_i . O_i) (the sink carries no
  // value, so dP of its column is 0 and dS = p_sink (0 - D_i)).
  Real* dsinks = nullptr;
  // Gradients of the tensor parameters of schemes reached by name (pos.named), by parameter.
  std::vector<named_grad<Real>> named;
};

// The dispatcher: attention_backward_tiled, or attention_backward_reference when
// POSENC_REFERENCE=1. Throws invalid_argument naming the field for a bad shape or a missing
// buffer (out, lse, dout, dq, dk, dv are required when T > 0; a parameter gradient requested for
// a scheme that is off is an error).
template <typename Real>
void attention_backward(const attention_params<Real>& p, const attention_grads<Real>& g);

// The specification: per head, the full (T, S) matrices P and dS in double, recomputed from q,
// k, v by the reference forward's own two-pass softmax (g.out and g.lse are validated but not
// read), then every formula above as a plain loop. Results rounded once to Real.
template <typename Real>
void attention_backward_reference(const attention_params<Real>& p, const attention_grads<Real>& g);

// The fast path: FlashAttention-2's backward. Work item = kv head hk (its G query heads are the
// rows of one tile, as in the forward); for each block of queries the key blocks are visited in
// order, P is recomputed from the saved lse block by block, dQ accumulates in the tile, dK and
// dV in an (S, D) scratch per thread. Extra memory O((S + T) * Hkv * D + threads * S * D), never
// a T x S matrix. Each item's arithmetic does not depend on which thread runs it, so the bits
// are the same for any thread count. float32 runs the block products through the Highway
// micro-kernel of the forward; double through plain loops.
template <typename Real>
void attention_backward_tiled(const attention_params<Real>& p, const attention_grads<Real>& g);

// True when POSENC_REFERENCE is set to a value other than "" or "0".
bool attention_reference_selected();

}  // namespace posenc
