// posenc attend: multi-head attention with any position scheme on .npy inputs, so posenc can
// serve as an oracle (dump q, k, v from another engine, compare its output with O.npy).
//
//   posenc attend --q Q.npy --k K.npy --v V.npy --out O.npy [--causal] [--scale X]
//     [--rope (--hf-config FILE | --gguf FILE | [--head-dim D] --theta B --partial F --scaling TYPE
//     ...)
//      --layout half|interleaved [--angle exact|f32|hf_f32|ggml_f32] [--seq-len N]]
//     [--alibi[=SLOPES.npy] [--alibi-max-bias 8] [--alibi-convention press|mpt|geometric]]
//     [--q-positions P.npy] [--k-positions P.npy] [--key-padding M.npy]
//     [--cu-seqlens 0,5,12] [--window W]
//     [--lse-out L.npy]
//     [--dout DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy
//      [--dalibi DA.npy]]   (and the --d<tensor> of every learned scheme on)
//     [--xpos [--xpos-theta B] [--xpos-gamma 0.4] [--xpos-scale-base 512] [--xpos-center C]]
//     [--cope E.npy] [--dcope DE.npy]
//     [--attn-temperature-tuning [--floor-scale 8192] [--attn-scale 0.1]]
//     [--rope --hf-config FILE (--layer L | --layer-type TYPE) --layout ...]
//     [--axial-rope 2d|nd [--axes-dim A,B,C] [--theta B] --q-positions IDS.npy (3, n) ...]
//     [--sandwich [--sandwich-dim 128]]   and every other scheme reached by name, e.g.
//     [--causal --fox GATES.npy [--dfox DG.npy]]   (a tensor parameter: a .npy of its shape)
//     [--kerple KE.npy [--kerple-kernel log|power] [--dkerple DKE.npy]]   (a choice: its text)
//     [--fire F.npy [--fire-hidden M] [--dfire DF.npy]]   (a free extent: F's width 3 M + 3)
//     [--rope ... --causal --self-extend [--self-extend-group 4] [--self-extend-window 512]]
//     [--rope ... --causal --dca [--dca-chunk-size C] [--dca-local-size L]
//      [--dca-original-max-position-embeddings L0]]   (--hf-config with Qwen2.5-1M's
//      dual_chunk_attention_config turns --dca on with its values; --no-dca leaves it off)
//
// Q (T, Hq, D), K and V (S, Hkv, D), float32 or float64 (K, V and tables are converted to Q's
// dtype; a float64 table in a float32 call is rounded with a note on stderr); E (npos, D) CoPE's
// position embeddings (causal only); KE (2, Hq) Kerple's a1, a2; F (Hq, 3M
// + 3) FIRE's per-head MLP (attention.hpp); positions (T,) / (S,) int64 or int32; M (S,) bool or
// uint8 with 1 = real token. O is (T, Hq, D) in Q's dtype, L is (T, Hq). With --dout (T, Hq, D) the
// backward runs too (attention_backward): DQ, DK, DV and the requested parameter gradients are
// written in Q's dtype (a float64 parameter's in float64: DA, the ALiBi slope gradient (Hq,)).
// Every input is read and validated and the attention computed before anything is written; a bad
// file or argument prints one message and exits 2 with no output file.
//
// Per-layer configs: --layer-type picks that layer type's RoPE from --hf-config (as `rope freqs
// --layer-type`); --layer L reads what layer L of the config does: its layer type's RoPE, or no
// RoPE on a NoPE layer (no_rope_layers, no_rope_layer_interval), where Llama 4 scales the queries
// instead when the config says attn_temperature_tuning (floor_scale, attn_scale). Ministral 3's
// and Mistral 4's configs scale the queries of every layer after RoPE (llama_4_scaling_beta). The
// same query temperature without a config: --attn-temperature-tuning (--floor-scale,
// --attn-scale, --floor-offset), alone or after --rope, M-RoPE or a q/k transform reached by name.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <type_traits>

#include "cli.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/encodings/axial_rope.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/positions/positions.hpp"
#include "rope_json.hpp"

namespace posenc::cli {
namespace {

struct attend_opts {
  out_format format = out_format::text;
  std::string q, k, v, out, lse_out;
  bool causal = false;
  double scale = 0;
  // RoPE
  bool rope = false;
  std::string hf_config, gguf, layout, angle = "exact", scaling = "default", truncate = "true",
                                       short_factor, long_factor;
  std::string axial_rope, axes_dim;  // --axial-rope 2d|nd, --axes-dim A,B[,C] (nd)
  double theta = 10000, partial = 1, factor = 1, attention_factor = 1, beta_fast = 32,
         beta_slow = 1, low_freq_factor = 1, high_freq_factor = 4, mscale = 1, mscale_all_dim = 1;
  int64_t max_pos = 0, original_max_pos = 0, seq_len = -1, head_dim = 0;
  // positions, masks
  std::string q_positions, k_positions, key_padding, cu_seqlens;
  int64_t window = 0;
  std::string sinks;  // --sinks a,b,c: one logit per query head
  // Half-precision K and V
  std::string kv_dtype;
  std::string products = "f32";
  // xPos, CoPE
  bool keys_rotated = false;
  // Llama 4's query temperature; the layer of a per-layer config
  int64_t layer = -1;
  std::string layer_type;
  // The schemes reached by name (schemes.hpp): their switches and parameters by declared name,
  // registered from the declarations
  bool no_dca = false;  // leave a config's dual_chunk_attention_config off (as transformers)
  std::map<std::string, bool> named_on;
  std::map<std::string, double> named_values;
  std::map<std::string, std::string> named_texts;  // str parameters: one of their choices
  std::map<std::string, std::string> named_files;  // tensor parameters: .npy paths
  std::map<std::string, std::string> named_grads;  // their gradients' output paths (--d<name>)
  // Backward
  std::string dout, dq, dk, dv;
  CLI::App* sub = nullptr;
};

// A declared parameter's flag: its Python name with dashes.
std::string flag_name(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

bool given(const attend_opts& o, const char* name) {
  return o.sub->count(name) > 0;
}

void require_float(const npy_array& a, const std::string& arg) {
  if (a.type != dtype::f32 && a.type != dtype::f64)
    fail("{} must be float32 or float64, got {}", arg, dtype_name(a.type));
}

void require_shape(const npy_array& a, const std::string& arg, const std::vector<int64_t>& shape,
                   const std::string& expected) {
  if (a.shape != shape) fail("{} must have shape {}, got {}", arg, expected, a.shape_str());
}

// (n,) ids, or (3, n) M-RoPE ids (temporal, height, width rows) when *three is not null (then
// *three says which it was).
std::vector<int64_t> read_positions(const std::string& path, const std::string& arg, int64_t n,
                                    const char* what, bool* three = nullptr) {
  const auto a = read_npy(path);
  if (a.type != dtype::i64 && a.type != dtype::i32)
    fail("{} must be int64 (or int32), got {}", arg, dtype_name(a.type));
  if (three) *three = a.shape.size() == 2 && a.shape[0] == 3 && a.shape[1] == n;
  if (!three || !*three)
    require_shape(a, arg, {n},
                  fmt::format("({},) = ({},){}", what, n,
                              three ? fmt::format(" or (3, {}) = (3, {}) (M-RoPE)", what, n) : ""));
  return a.to_i64();
}

rope_config make_rope_config(const attend_opts& o, int64_t D, const std::string& layer_type) {
  std::vector<std::string> warnings;
  rope_config c;
  // --head-dim is accepted so that a `rope apply` line can be reused; D comes from --q.
  if (given(o, "--head-dim") && o.head_dim != D)
    fail("--head-dim {} disagrees with the head dim D = {} of --q", o.head_dim, D);
  if (!o.hf_config.empty() && !o.gguf.empty()) fail("--hf-config and --gguf exclude each other");
  if (!o.hf_config.empty()) {
    c = rope_config_from_file(o.hf_config, layer_type, &warnings);
  } else if (!o.gguf.empty()) {
    c = gguf_rope_config(gguf_read(o.gguf), &warnings).config;
  } else {
    const nlohmann::json j =
        rope_flags_json(o, D, [](const auto& x, const char* n) { return given(x, n); });
    c = rope_config_from_json(j, &warnings);
  }
  for (const auto& w : warnings) std::fprintf(stderr, "posenc: warning: %s\n", w.c_str());
  if (c.head_dim != D)
    fail("the RoPE config's head_dim {} does not match the head dim D = {} of --q", c.head_dim, D);
  return c;
}

// What one layer of a per-layer --hf-config does (--layer L), or which layer type (--layer-type).
struct layer_choice {
  bool given = false;                 // --layer or --layer-type
  std::string type;                   // "" = the config's one RoPE configuration
  bool rope = true;                   // false: a NoPE layer
  attention_temperature temperature;  // a NoPE layer of a config with attn_temperature_tuning,
                                      // or a config's llama_4_scaling_beta (every layer)
};

layer_choice choose_layer(const attend_opts& o) {
  layer_choice c;
  const bool by_index = given(o, "--layer"), by_type = given(o, "--layer-type");
  if (by_index && by_type) fail("--layer and --layer-type exclude each other");
  if (!by_index && !by_type) return c;
  if (o.hf_config.empty())
    fail("--layer and --layer-type need --hf-config (a config.json with per-layer RoPE)");
  c.given = true;
  if (by_type) {
    c.type = o.layer_type;  // checked against the config's types when the RoPE is read
    return c;
  }
  const auto j = hf_config_read(o.hf_config);
  rope_layer_plan plan;
  try {
    plan = hf_layer_plan(j);
  } catch (const invalid_argument& e) {
    throw invalid_argument(fmt::format("{}: {}", o.hf_config, e.what()));
  }
  int64_t n = static_cast<int64_t>(std::max(plan.layer_types.size(), plan.rope_layers.size()));
  if (n == 0) {
    const auto& t = j.contains("text_config") && j["text_config"].is_object() &&
                            !j.contains("num_hidden_layers")
                        ? j["text_config"]
                        : j;
    if (t.contains("num_hidden_layers") && t["num_hidden_layers"].is_number_integer())
      n = t["num_hidden_layers"].get<int64_t>();
  }
  if (n <= 0)
    fail("--layer: {} says neither num_hidden_layers nor layer_types nor no_rope_layers",
         o.hf_config);
  if (o.layer < 0 || o.layer >= n)
    fail("--layer must be in [0, {}) (the layers of {}), got {}", n, o.hf_config, o.layer);
  if (!plan.layer_types.empty()) {
    c.type = plan.layer_types[static_cast<size_t>(o.layer)];
  } else if (!plan.types.empty()) {
    fail(
        "--layer: {} has per-layer-type RoPE ({}) but does not say which layer has which type "
        "(no layer_types or sliding_window_pattern); pass --layer-type instead",
        o.hf_config, fmt::join(plan.types, ", "));
  }
  if (!plan.rope_layers.empty() && !plan.rope_layers[static_cast<size_t>(o.layer)]) {
    c.rope = false;
    if (plan.temperature_tuning) {
      if (!std::isfinite(plan.floor_scale) || !std::isfinite(plan.attn_scale) ||
          plan.attn_scale < 0)
        fail("{}: floor_scale must be finite and > 0 and attn_scale finite and >= 0, got {} and {}",
             o.hf_config, plan.floor_scale, plan.attn_scale);
      c.temperature = {plan.floor_scale, plan.attn_scale};
    }
  }
  return c;
}

// A table in float64 for a float32 computation is rounded, and said so on stderr; a float32
// table in a float64 computation converts exactly.
template <typename Real>
void note_rounding(const npy_array& a, const std::string& arg) {
  if (std::is_same_v<Real, float> && a.type == dtype::f64)
    std::fprintf(stderr,
                 "posenc: note: %s is float64 and is rounded to float32, the dtype of --q "
                 "(pass float64 q, k, v to keep it in float64)\n",
                 arg.c_str());
}

template <typename Real>
std::vector<Real> as_real(const npy_array& a) {
  const auto d = a.to_f64();
  return std::vector<Real>(d.begin(), d.end());
}

// Everything one attend call reads, and the attention parameters that point into it: built in
// place by the read_* steps below, in the order their checks run, and never copied or moved
// (p holds pointers into these vectors and to freqs).
template <typename Real>
struct attend_state {
  int64_t T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  std::vector<Real> q, k, v;   // (T, Hq, D), (S, Hkv, D), (S, Hkv, D); empty for 16-bit K, V
  std::vector<Real> out, lse;  // (T, Hq, D), (T, Hq)
  std::vector<int64_t> qpos, kpos, cu;  // (T,) or (3, T); (S,) or (3, S); cu_seqlens
  std::vector<uint8_t> pad;             // (S,) 1 = real token
  bool mrope = false;                   // (3, n) positions
  layer_choice lc;
  rope_freqs freqs;
  std::vector<Real> sinks;                 // (Hq,) --sinks
  std::vector<std::vector<Real>> named_w;  // tensor parameters of schemes reached by name, as read
  std::vector<std::vector<double>> named_w64;  // at a float64 one's index instead (named_w's empty)
  std::vector<std::string> schemes;            // the names of the schemes on, in order
  attention_params<Real> p;

  attend_state() = default;
  attend_state(const attend_state&) = delete;
  attend_state& operator=(const attend_state&) = delete;
};

// Shapes, the q, k, v buffers (16-bit K and V read in place) and the plain options.
template <typename Real>
void read_qkv(const attend_opts& o, const npy_array& qa, const npy_array& ka, const npy_array& va,
              kv_storage kv, attend_state<Real>& s) {
  s.T = qa.shape[0], s.Hq = qa.shape[1], s.D = qa.shape[2];
  s.S = ka.shape[0], s.Hkv = ka.shape[1];
  const bool half = kv != kv_storage::f32;
  const bool q_half = qa.type == dtype::f16 || qa.type == dtype::u16;
  if (!q_half) s.q = as_real<Real>(qa);
  if (!half) s.k = as_real<Real>(ka);
  if (!half) s.v = as_real<Real>(va);
  s.out.resize(s.T * s.Hq * s.D);
  s.lse.resize(s.T * s.Hq);
  auto& p = s.p;
  p.out = s.out.data(), p.lse = s.lse.data();
  if (q_half) {  // read in place, like 16-bit K and V
    p.q_storage = kv;
    p.q16 = qa.bits16();
  } else {
    p.q = s.q.data();
  }
  if (o.products == "bf16") p.products = attention_products::bf16;
  if (half) {  // read in place: attention widens the stored values itself
    p.kv = kv;
    p.k16 = ka.bits16();
    p.v16 = va.bits16();
  } else {
    p.k = s.k.data(), p.v = s.v.data();
  }
  p.T = s.T, p.S = s.S, p.Hq = s.Hq, p.Hkv = s.Hkv, p.D = s.D;
  p.causal = o.causal;
  if (given(o, "--scale")) p.scale = o.scale;
  if (o.window < 0) fail("--window must be >= 0 (0 = none), got {}", o.window);
  p.window = o.window;
  if (!o.sinks.empty()) {  // gpt-oss's per-head sink logits; the engine checks count and values
    const auto x = parse_doubles(o.sinks, "--sinks");
    s.sinks.assign(x.begin(), x.end());
    p.sinks = s.sinks;
  }
}

// Position ids ((3, n) ones for M-RoPE), the key padding mask and packed documents.
template <typename Real>
void read_positions_and_masks(const attend_opts& o, attend_state<Real>& s) {
  const int64_t T = s.T, S = s.S;
  auto& p = s.p;
  bool q3 = false, k3 = false;
  if (!o.q_positions.empty()) s.qpos = read_positions(o.q_positions, "--q-positions", T, "T", &q3);
  if (!o.k_positions.empty()) s.kpos = read_positions(o.k_positions, "--k-positions", S, "S", &k3);
  // M-RoPE: (3, T) and (3, S) ids go to the engine's M-RoPE hook (read_rope); its masks and
  // biases see the temporal row.
  s.mrope = q3 || k3;
  if (s.mrope && !(q3 && k3))
    fail("M-RoPE needs both --q-positions (3, T) and --k-positions (3, S), got {} and {}",
         q3 ? "(3, T)" : "(T,) or none", k3 ? "(3, S)" : "(S,) or none");
  p.q_positions =
      s.mrope ? std::span<const int64_t>(s.qpos).first(T) : std::span<const int64_t>(s.qpos);
  p.k_positions =
      s.mrope ? std::span<const int64_t>(s.kpos).first(S) : std::span<const int64_t>(s.kpos);
  if (!o.key_padding.empty()) {
    const auto m = read_npy(o.key_padding);
    if (m.type != dtype::b1 && m.type != dtype::u8)
      fail("--key-padding must be bool or uint8, got {}", dtype_name(m.type));
    require_shape(m, "--key-padding", {S}, fmt::format("(S,) = ({},)", S));
    const auto vals = m.to_i64();
    for (size_t j = 0; j < vals.size(); ++j) {
      if (vals[j] != 0 && vals[j] != 1)
        fail("--key-padding must hold 0 (pad) or 1 (real token), got {} at index {}", vals[j], j);
      s.pad.push_back(static_cast<uint8_t>(vals[j]));
    }
    p.key_padding = s.pad;
  }
  if (!o.cu_seqlens.empty()) {
    s.cu = parse_ints(o.cu_seqlens, "--cu-seqlens");
    validate_cu_seqlens(s.cu, S, "--cu-seqlens");
    p.cu_seqlens = s.cu;
  }
}

// Axial RoPE (posenc/encodings/axial_rope.hpp): Pixtral's 2-D (--axial-rope 2d, --theta,
// --rope-layout half as transformers or interleaved as mistral-inference and vLLM) or FLUX's
// N-axis (--axial-rope nd --axes-dim A,B[,C], --theta for every axis, interleaved pairs), on the
// engine's M-RoPE hook with (3, n) ids in --q-positions and --k-positions (row a = axis a).
template <typename Real>
void read_axial_rope(const attend_opts& o, attend_state<Real>& s) {
  auto& p = s.p;
  if (o.rope) fail("--axial-rope and --rope exclude each other (both rotate q and k at hook 1)");
  if (!o.hf_config.empty() || !o.gguf.empty())
    fail("--axial-rope takes --theta and --axes-dim, not --hf-config or --gguf");
  if (!s.mrope)
    fail(
        "--axial-rope needs --q-positions and --k-positions of shape (3, n): one id per axis "
        "(posenc.axial_grid_ids)");
  const auto angle = rope_angle_from_name(o.angle, "--angle");
  if (angle != rope_angle::exact && angle != rope_angle::f32)
    fail(
        "--angle must be exact or f32 with --axial-rope (the engines' pipelines model 1-D "
        "configs), got {}",
        o.angle);
  axial_rope a;
  if (o.axial_rope == "2d") {
    if (given(o, "--axes-dim")) fail("--axes-dim is for --axial-rope nd");
    a = axial_rope_2d(
        s.D, o.theta,
        o.layout.empty() ? rope_layout::half : rope_layout_from_name(o.layout, "--rope-layout"));
  } else if (o.axial_rope == "nd") {
    if (o.axes_dim.empty()) fail("--axial-rope nd needs --axes-dim A,B[,C] (channels per axis)");
    if (!o.layout.empty() &&
        rope_layout_from_name(o.layout, "--rope-layout") != rope_layout::interleaved)
      fail(
          "--axial-rope nd rotates interleaved pairs (FLUX); --rope-layout must be left out or "
          "interleaved, got {}",
          o.layout);
    const auto dims = parse_ints(o.axes_dim, "--axes-dim");
    const double theta[] = {o.theta};
    a = axial_rope_nd(dims, theta);
    if (a.freqs.head_dim != s.D)
      fail("--axes-dim must sum to the head dim D = {}, got {}", s.D, a.freqs.head_dim);
  } else {
    fail("--axial-rope must be 2d or nd, got '{}'", o.axial_rope);
  }
  s.freqs = a.freqs;
  p.pos.named.push_back(mrope_scheme(s.freqs, a.section, false, a.layout, angle, s.qpos, s.kpos));
  s.schemes.push_back(p.pos.named.back().name);
}

// The layer of a per-layer config, and RoPE or M-RoPE (none on a NoPE layer).
template <typename Real>
void read_rope(const attend_opts& o, attend_state<Real>& s) {
  auto& p = s.p;
  s.lc = choose_layer(o);
  layer_choice& lc = s.lc;
  if (!o.axial_rope.empty()) {
    if (lc.given) fail("--layer and --layer-type need --rope (with --hf-config)");
    read_axial_rope(o, s);
    return;
  }
  if (given(o, "--axes-dim")) fail("--axes-dim needs --axial-rope nd");
  if (lc.given && !o.rope) fail("--layer and --layer-type need --rope (with --hf-config)");
  if (o.rope && lc.given && !lc.rope && s.mrope)
    fail("--layer {} is a NoPE layer: positions of shape (3, n) (M-RoPE) do not apply", o.layer);
  if (o.rope && !lc.rope) {
    // A NoPE layer: no rotation; Llama 4's temperature when the config tunes it
    // (read_temperature).
    if (o.layout.empty()) fail("--rope needs --layout half|interleaved");
    rope_layout_from_name(o.layout, "--layout");
    rope_angle_from_name(o.angle, "--angle");
  } else if (o.rope) {
    if (o.layout.empty()) fail("--rope needs --layout half|interleaved");
    const auto c = make_rope_config(o, s.D, lc.type);
    if (c.llama_4_scaling_beta > 0) {
      // Ministral 3 / Mistral 4: every layer scales its rotated queries (read_temperature).
      lc.temperature = {static_cast<double>(c.llama_4_scaling_floor), c.llama_4_scaling_beta, 0.0};
    }
    if (given(o, "--seq-len") && o.seq_len < 0) fail("--seq-len must be >= 0, got {}", o.seq_len);
    s.freqs = rope_frequencies(c, given(o, "--seq-len") ? o.seq_len : s.S);
    const auto layout = rope_layout_from_name(o.layout, "--layout");
    const auto angle = rope_angle_from_name(o.angle, "--angle");
    if (s.mrope) {
      // The engine's M-RoPE hook: each pair rotated at its component's ids (mrope_apply's
      // arithmetic), forward and backward.
      if (c.mrope_section.empty())
        fail(
            "positions of shape (3, n) need an M-RoPE config (mrope_section in rope_scaling or "
            "rope_parameters), got a 1-D RoPE config");
      if (c.mrope_section.size() != 3)
        fail("mrope_section must have 3 entries (temporal, height, width), got {}",
             c.mrope_section.size());
      std::array<int64_t, 3> section{};
      std::copy(c.mrope_section.begin(), c.mrope_section.end(), section.begin());
      p.pos.named.push_back(
          mrope_scheme(s.freqs, section, c.mrope_interleaved, layout, angle, s.qpos, s.kpos));
    } else {
      p.pos.named.push_back(rope_scheme(s.freqs, layout, angle));
    }
    s.schemes.push_back(p.pos.named.back().name);
  } else if (!o.hf_config.empty() || !o.gguf.empty() || !o.layout.empty() ||
             given(o, "--head-dim")) {
    fail("--hf-config, --gguf, --head-dim and --layout need --rope");
  } else if (given(o, "--theta")) {
    fail(
        "--theta is RoPE's base and needs --rope (a scheme reached by name takes its own, "
        "--<scheme>-theta)");
  } else if (s.mrope) {
    fail("positions of shape (3, n) (M-RoPE) need --rope with an M-RoPE config");
  }
}

// Llama 4's query temperature of the config's NoPE layer (--layer), or Ministral 3's of every
// layer: the query scale reached by name (the temperature), unless its flags gave one, which a
// config that scales the queries excludes.
template <typename Real>
void read_layer_temperature(attend_state<Real>& s) {
  auto& p = s.p;
  const named_scheme* own = query_scale_on(p.pos);
  const std::string flag = own ? "--" + flag_name(scheme_decl_of(own->name).params[0].name) : "";
  if (own && s.lc.given)
    fail(
        "{} with --layer or --layer-type: the temperature comes from --hf-config "
        "(attn_temperature_tuning, floor_scale, attn_scale on its NoPE layers); leave the flags "
        "out",
        flag);
  if (own && s.lc.temperature.on())
    fail(
        "{}: the model config already scales the queries (llama_4_scaling_beta {}, positions per "
        "step {}); leave the flags out",
        flag, s.lc.temperature.attn_scale, s.lc.temperature.floor_scale);
  if (!own && s.lc.temperature.on()) {
    p.pos.named.push_back(temperature_scheme(s.lc.temperature));
    s.schemes.push_back(p.pos.named.back().name);
  }
}

// The call's query temperature (the query scale reached by name), for the output; nullopt when off.
template <typename Real>
std::optional<attention_temperature> call_temperature(const attention_params<Real>& p) {
  const named_scheme* n = query_scale_on(p.pos);
  if (!n) return std::nullopt;
  const auto a = named_scheme_args(scheme_decl_of(n->name), n->params, p.Hq);
  return attention_temperature{a[0], a[1], a[2]};
}

// Keys stored transformed (as a KV cache stores them): only q is mapped at hook 1, by RoPE,
// M-RoPE or a q/k transform reached by name.
template <typename Real>
void read_keys_rotated(const attend_opts& o, attend_state<Real>& s) {
  auto& p = s.p;
  if (!o.keys_rotated) return;
  if (!qk_transform_on(p.pos))
    fail(
        "--keys-rotated needs a q/k transform whose keys are stored transformed: --rope, or a "
        "scheme reached by name that maps q and k (posenc schemes: q/k transform)");
  p.pos.keys_transformed = true;
}

// The schemes reached by name: each switch given puts its scheme in pos.named with the
// parameters given (the others take their declared defaults, checked by the engine).
// A tensor parameter's file, checked against its declared shape, into s.named_w (viewed by n
// once every file is read).
template <typename Real>
void read_named_tensor(const attend_opts& o, attend_state<Real>& s, const scheme_param& prm,
                       named_scheme& n) {
  const std::string flag = "--" + flag_name(prm.name);
  const auto a = read_npy(o.named_files.at(prm.name));
  require_float(a, flag);
  const auto want = tensor_param_shape(prm, s.T, s.S, s.Hq, s.Hkv, s.D, a.shape);
  require_shape(
      a, flag, want,
      fmt::format("{} = {}", prm.shape, tensor_param_shape_text(prm, s.T, s.S, s.Hq, s.Hkv, s.D)));
  if (is_f64_tensor_param(prm)) {  // float64 in every call
    s.named_w.emplace_back();
    s.named_w64.push_back(as_real<double>(a));
  } else {
    note_rounding<Real>(a, flag);
    s.named_w.push_back(as_real<Real>(a));
    s.named_w64.emplace_back();
  }
  n.tensors.push_back({prm.name, want, {}, {}});
}

// A choice parameter's text, as its index among the declared choices; the flag names the error.
double choice_index(const scheme_param& prm, const std::string& flag, const attend_opts& o) {
  const std::string& text = o.named_texts.at(prm.name);
  const auto c = param_choices(prm);
  const auto it = std::find(c.begin(), c.end(), text);
  if (it == c.end())
    fail("{} must be {}, got '{}'", flag, fmt::join(c, " or "), printable_bytes(text));
  return double(it - c.begin());
}

template <typename Real>
void read_named(const attend_opts& o, attend_state<Real>& s) {
  const size_t first = s.p.pos.named.size();  // the schemes before (RoPE, M-RoPE) are not read here
  for (const scheme_decl* d : named_scheme_decls()) {
    named_scheme n{d->name, {}};
    std::vector<std::string> flags;
    const scheme_param& sw = d->params[0];
    // A tensor switch is on when its file is given; an optional one (--name[=FILE]) when given.
    const bool tensor_switch = is_tensor_param(sw);
    const bool on = is_optional_tensor_param(sw) ? given(o, ("--" + flag_name(sw.name)).c_str())
                    : tensor_switch              ? !o.named_files.at(sw.name).empty()
                                                 : o.named_on.at(d->name);
    // The tensors in declaration order (the switch first): the gradients are written so.
    if (on && tensor_switch && !o.named_files.at(sw.name).empty()) read_named_tensor(o, s, sw, n);
    for (size_t i = 1; i < d->params.size(); ++i) {
      const std::string flag = "--" + flag_name(d->params[i].name);
      if (!given(o, flag.c_str())) continue;
      flags.push_back(flag);
      if (is_tensor_param(d->params[i]))
        read_named_tensor(o, s, d->params[i], n);
      else if (d->params[i].choices)
        n.params.emplace_back(d->params[i].name, choice_index(d->params[i], flag, o));
      else
        n.params.emplace_back(d->params[i].name, o.named_values.at(d->params[i].name));
    }
    if (on) {
      (void)named_scheme_args(*d, n.params, s.Hq);  // errors name the flag's parameter
      s.p.pos.named.push_back(std::move(n));
      s.schemes.push_back(d->name);
    } else if (!flags.empty()) {
      fail("{} need{} --{}", fmt::join(flags, ", "), flags.size() == 1 ? "s" : "",
           flag_name(d->params[0].name));
    }
  }
  size_t x = 0;  // every file read: the views
  for (size_t i = first; i < s.p.pos.named.size(); ++i)
    for (auto& t : s.p.pos.named[i].tensors) {
      if (!s.named_w64[x].empty())
        t.f64 = s.named_w64[x];
      else if constexpr (std::is_same_v<Real, float>)
        t.f32 = s.named_w[x];
      else
        t.f64 = s.named_w[x];
      ++x;
    }
}

// Qwen2.5-1M's dual_chunk_attention_config in --hf-config turns Dual Chunk Attention on, as vLLM
// runs such a model (transformers ignores the key): its values, under any --dca-* flag given with
// --dca. --no-dca leaves it off.
template <typename Real>
void read_hf_dca(const attend_opts& o, attend_state<Real>& s) {
  if (o.hf_config.empty()) {
    if (o.no_dca)
      fail("--no-dca needs --hf-config (a config.json with dual_chunk_attention_config)");
    return;
  }
  std::vector<std::string> warnings;
  const hf_dca_config c = hf_dca_config_from_json(hf_config_read(o.hf_config), &warnings);
  if (!c.present) {
    if (o.no_dca) fail("--no-dca: {} has no dual_chunk_attention_config", o.hf_config);
    return;
  }
  if (o.no_dca) {
    if (o.named_on.at("dca")) fail("--no-dca and --dca exclude each other");
    return;
  }
  for (const auto& w : warnings) std::fprintf(stderr, "posenc: warning: %s\n", w.c_str());
  const auto from_config = hf_dca_scheme_params(c);
  auto it = std::find_if(s.p.pos.named.begin(), s.p.pos.named.end(),
                         [](const named_scheme& n) { return n.name == "dca"; });
  if (it == s.p.pos.named.end()) {
    s.p.pos.named.push_back({"dca", {}});
    s.schemes.push_back("dca");
    it = s.p.pos.named.end() - 1;
  }
  // `name` captured by an init-capture: clang (14) rejects a lambda's capture of a binding.
  for (const auto& [name, value] : from_config)
    if (std::none_of(it->params.begin(), it->params.end(),
                     [&name = name](const auto& x) { return x.first == name; }))
      it->params.emplace_back(name, value);
  (void)named_scheme_args(scheme_decl_of("dca"), it->params, s.Hq);
  std::fprintf(stderr,
               "posenc: note: %s has dual_chunk_attention_config: Dual Chunk Attention on "
               "(chunk_size %lld, local_size %lld, original_max_position_embeddings %lld), as "
               "vLLM runs the model; transformers ignores the key (--no-dca does too)\n",
               o.hf_config.c_str(), static_cast<long long>(c.chunk_size),
               static_cast<long long>(c.local_size),
               static_cast<long long>(c.original_max_position_embeddings));
}

// Backward: every flag checked before anything runs.
template <typename Real>
void check_backward_flags(const attend_opts& o, const attention_params<Real>& p) {
  if (o.dout.empty()) {
    for (const char* f : {"--dq", "--dk", "--dv"})
      if (given(o, f)) fail("{} needs --dout (the gradient of the loss with respect to O)", f);
    for (const auto& [name, path] : o.named_grads)
      if (!path.empty())
        fail("--d{} needs --dout (the gradient of the loss with respect to O)", flag_name(name));
    return;
  }
  if (o.dq.empty() || o.dk.empty() || o.dv.empty())
    fail("--dout needs all of --dq, --dk and --dv (output paths)");
  for (const auto& [name, path] : o.named_grads) {
    bool on = false;
    for (const auto& n : p.pos.named)
      for (const auto& prm : scheme_decl_of(n.name).params)
        on |= !path.empty() && is_tensor_param(prm) && prm.name == name;
    if (!path.empty() && !on) fail("--d{} needs --{}", flag_name(name), flag_name(name));
  }
  std::vector<std::string> outs = {o.out, o.dq, o.dk, o.dv};
  for (const auto& [name, path] : o.named_grads)
    if (!path.empty()) outs.push_back(path);
  if (!o.lse_out.empty()) outs.push_back(o.lse_out);
  for (size_t a = 0; a < outs.size(); ++a)
    for (size_t b = a + 1; b < outs.size(); ++b)
      if (outs[a] == outs[b]) fail("output paths must differ, '{}' is given twice", outs[a]);
}

// The gradients of one backward: dout (T, Hq, D) as read, the rest as computed; a parameter
// gradient only when its output path is given.
template <typename Real>
struct attend_gradients {
  std::vector<Real> dout, dq, dk, dv, dco;
  // The named tensors' gradients asked for: (output path, shape, values; a float64 parameter's in
  // the last, whatever Q's dtype).
  std::vector<std::tuple<std::string, std::vector<int64_t>, std::vector<Real>, std::vector<double>>>
      dnamed;
};

// attention_backward into buffers sized for the outputs asked for.
template <typename Real>
void run_backward(const attend_opts& o, const attend_state<Real>& s, attend_gradients<Real>& d) {
  const int64_t T = s.T, S = s.S, Hq = s.Hq, Hkv = s.Hkv, D = s.D;
  attention_grads<Real> g;
  d.dq.resize(T * Hq * D);
  d.dk.resize(S * Hkv * D);
  d.dv.resize(S * Hkv * D);
  g.out = s.out.data(), g.lse = s.lse.data(), g.dout = d.dout.data();
  g.dq = d.dq.data(), g.dk = d.dk.data(), g.dv = d.dv.data();
  // Per declared tensor parameter of each scheme on (an optional one, left out, has one too).
  std::vector<std::string> names;
  for (const auto& n : s.p.pos.named)
    for (const auto& prm : scheme_decl_of(n.name).params) {
      if (!is_tensor_param(prm) || o.named_grads.at(prm.name).empty()) continue;
      std::vector<int64_t> shape;
      for (const auto& t : n.tensors)
        if (t.name == prm.name) shape = t.shape;
      if (shape.empty()) shape = tensor_param_shape(prm, T, S, Hq, Hkv, D);
      int64_t count = 1;
      for (int64_t e : shape) count *= e;
      const bool wide = is_f64_tensor_param(prm);
      d.dnamed.emplace_back(o.named_grads.at(prm.name), shape, std::vector<Real>(wide ? 0 : count),
                            std::vector<double>(wide ? count : 0));
      names.emplace_back(prm.name);
    }
  for (size_t x = 0; x < names.size(); ++x)
    g.named.push_back({names[x], std::get<2>(d.dnamed[x]), std::get<3>(d.dnamed[x])});
  attention_backward(s.p, g);
}

// The output files, in the order they are written: O, the LSE, then the gradients.
template <typename Real>
std::vector<std::pair<std::string, npy_array>> output_files(const attend_opts& o,
                                                            const attend_state<Real>& s,
                                                            const attend_gradients<Real>& d) {
  const int64_t T = s.T, S = s.S, Hq = s.Hq, Hkv = s.Hkv, D = s.D;
  auto as_npy = [](const std::vector<Real>& x, std::vector<int64_t> shape) {
    npy_array a = make_npy<Real>(std::move(shape));
    std::copy(x.begin(), x.end(), a.template as<Real>());
    return a;
  };
  std::vector<std::pair<std::string, npy_array>> files = {{o.out, as_npy(s.out, {T, Hq, D})}};
  if (!o.lse_out.empty()) files.emplace_back(o.lse_out, as_npy(s.lse, {T, Hq}));
  if (o.dout.empty()) return files;
  files.emplace_back(o.dq, as_npy(d.dq, {T, Hq, D}));
  files.emplace_back(o.dk, as_npy(d.dk, {S, Hkv, D}));
  files.emplace_back(o.dv, as_npy(d.dv, {S, Hkv, D}));
  for (const auto& [path, shape, values, wide] : d.dnamed) {
    if (wide.empty()) {
      files.emplace_back(path, as_npy(values, shape));
      continue;
    }
    npy_array a = make_npy<double>(shape);
    std::copy(wide.begin(), wide.end(), a.template as<double>());
    files.emplace_back(path, std::move(a));
  }
  return files;
}

// Which implementation ran: the reference (POSENC_REFERENCE=1), a scheme's own path (CoPE's
// plain loops in double; the per-pair RoPE path of Self-Extend, DCA, StreamingLLM), or the
// tiled kernels.
template <typename Real>
const char* implementation_name(const attend_state<Real>& s) {
  if (attention_reference_selected()) return "reference";
  for (const auto& x : s.schemes) {
    const scheme_decl& d = scheme_decl_of(x);
    if (d.points & scheme_own_path) return "own";
    if (d.points & scheme_rope_pairs) return "per-pair";
  }
  return "tiled";
}

// What was computed and written, for --format json.
template <typename Real>
void print_json(const attend_opts& o, const attend_state<Real>& s, kv_storage kv,
                const std::vector<std::pair<std::string, npy_array>>& files, int64_t masked_rows) {
  const auto& p = s.p;
  nlohmann::ordered_json j;
  j["out"] = o.out;
  j["shape"] = {s.T, s.Hq, s.D};
  j["dtype"] = dtype_name(files.front().second.type);
  j["S"] = s.S;
  j["Hkv"] = s.Hkv;
  j["scale"] = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(s.D));
  j["causal"] = o.causal;
  j["schemes"] = s.schemes;
  j["implementation"] = implementation_name(s);
  j["q"] = name(p.q_storage);
  j["kv"] = name(kv);
  j["products"] = name(p.products);
  if (p.products == attention_products::bf16) j["cpu_has_vdpbf16ps"] = attention_bf16_native();
  if (s.lc.given) {
    if (given(o, "--layer")) j["layer"] = o.layer;
    j["layer_type"] =
        s.lc.type.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.lc.type);
    j["layer_rope"] = s.lc.rope;
  }
  if (const auto t = call_temperature(p)) {
    j["floor_scale"] = t->floor_scale;
    j["attn_scale"] = t->attn_scale;
    j["floor_offset"] = t->position_offset;
  }
  j["fully_masked_rows"] = masked_rows;
  if (!o.lse_out.empty()) j["lse_out"] = o.lse_out;
  if (!o.dout.empty()) {
    nlohmann::ordered_json b;
    b["dout"] = o.dout;
    for (const auto& [path, a] : files)
      if (path != o.out && path != o.lse_out) b["written"].push_back(path);
    j["backward"] = b;
  }
  std::printf("%s\n", j.dump(2).c_str());
}

// The storage and products of a float32 call, for the text line ("" when all float32).
template <typename Real>
std::string storage_note(const attention_params<Real>& p, kv_storage kv) {
  std::string n;
  if (kv != kv_storage::f32)
    n = fmt::format(", {} stored as {}",
                    p.q_storage != kv_storage::f32 ? "queries, keys and values" : "keys and values",
                    name(kv));
  if (p.products == attention_products::bf16)
    n += attention_bf16_native()
             ? ", bfloat16 products with float32 accumulation (vdpbf16ps in prefill-shaped "
               "calls; decode-shaped calls run float32 products)"
             : ", bfloat16 products asked for: this CPU has no vdpbf16ps, float32 products ran";
  else if (kv != kv_storage::f32)
    n += " (computed in float32)";
  return n;
}

// What was computed and written, for --format text or csv.
template <typename Real>
void print_text(const attend_opts& o, const attend_state<Real>& s, kv_storage kv,
                const std::vector<std::pair<std::string, npy_array>>& files, int64_t masked_rows) {
  const auto& p = s.p;
  const long long T = s.T, Hq = s.Hq, D = s.D, S = s.S, Hkv = s.Hkv;
  const char* out_dtype = dtype_name(files.front().second.type);
  const char* impl = implementation_name(s);
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(s.D));
  std::string sch;
  for (const auto& x : s.schemes) sch += (sch.empty() ? "" : "+") + x;
  if (sch.empty()) sch = "none";
  if (o.format == out_format::csv) {
    std::printf("out,T,Hq,D,S,Hkv,dtype,scale,causal,schemes,implementation,fully_masked_rows\n");
    std::printf("%s,%lld,%lld,%lld,%lld,%lld,%s,%s,%s,%s,%s,%lld\n", o.out.c_str(), T, Hq, D, S,
                Hkv, out_dtype, num(scale).c_str(), o.causal ? "true" : "false", sch.c_str(), impl,
                (long long)masked_rows);
    return;
  }
  std::printf(
      "wrote %s: (%lld, %lld, %lld) %s, S = %lld keys, Hkv = %lld, scale %s, %s, "
      "schemes: %s, %s path, %lld fully masked rows%s\n",
      o.out.c_str(), T, Hq, D, out_dtype, S, Hkv, num(scale).c_str(),
      o.causal ? "causal" : "bidirectional", sch.c_str(), impl, (long long)masked_rows,
      storage_note(p, kv).c_str());
  if (s.lc.given)
    std::printf("layer %s%s: %s\n", given(o, "--layer") ? std::to_string(o.layer).c_str() : "type",
                s.lc.type.empty() ? "" : (" (" + s.lc.type + ")").c_str(),
                s.lc.rope ? "RoPE" : "NoPE (no rotation)");
  if (const auto t = call_temperature(p))
    std::printf("query temperature: q *= log(floor((pos + %s) / %s) + 1) * %s + 1%s\n",
                num(t->position_offset).c_str(), num(t->floor_scale).c_str(),
                num(t->attn_scale).c_str(), qk_transform_on(p.pos) ? ", after the rotation" : "");
  if (!o.dout.empty()) {
    std::string w;
    for (const auto& [path, a] : files)
      if (path != o.out && path != o.lse_out) w += (w.empty() ? "" : ", ") + path;
    std::printf("backward from %s: wrote %s\n", o.dout.c_str(), w.c_str());
  }
}

template <typename Real>
void run_typed(const attend_opts& o, const npy_array& qa, const npy_array& ka, const npy_array& va,
               kv_storage kv) {
  attend_state<Real> s;
  read_qkv(o, qa, ka, va, kv, s);
  read_positions_and_masks(o, s);
  read_rope(o, s);
  read_named(o, s);
  read_layer_temperature(s);
  read_keys_rotated(o, s);
  read_hf_dca(o, s);
  // Listed in the engine's order, the declarations' (schemes.hpp): the biases as summed.
  const auto rank = [](const std::string& x) { return &scheme_decl_of(x) - scheme_decls().data(); };
  std::stable_sort(s.schemes.begin(), s.schemes.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  // Which schemes may be on together: the declarations' one rule (schemes.hpp).
  check_scheme_combination(s.schemes);
  check_backward_flags(o, s.p);
  attend_gradients<Real> d;
  if (!o.dout.empty()) {
    const auto da = read_npy(o.dout);
    require_float(da, "--dout");
    require_shape(da, "--dout", {s.T, s.Hq, s.D},
                  fmt::format("(T, Hq, D) = ({}, {}, {})", s.T, s.Hq, s.D));
    d.dout = as_real<Real>(da);
  }

  attention_forward(s.p);
  if (!o.dout.empty()) run_backward(o, s, d);

  int64_t masked_rows = 0;
  for (Real x : s.lse) masked_rows += std::isinf(x) ? 1 : 0;
  const auto files = output_files(o, s, d);
  for (const auto& [path, a] : files) write_npy(path, a);
  if (o.format == out_format::json)
    print_json(o, s, kv, files, masked_rows);
  else
    print_text(o, s, kv, files, masked_rows);
}

// Non-finite inputs, and values whose square overflows the dtype the call computes in (|x| >
// 2^64 for float32, 2^512 for float64: a score of two of them is infinite), make an oracle's
// output meaningless: said on stderr with the count and the first index; the result is still
// computed and written (engines do propagate NaN).
void note_nonfinite(const npy_array& a, const std::string& arg, bool bf16_bits, bool f64_call) {
  const double big = f64_call ? 0x1p512 : 0x1p64;
  int64_t bad = 0, huge = 0, first_bad = -1, first_huge = -1;
  auto see = [&](int64_t i, double x) {
    if (!std::isfinite(x)) {
      if (bad++ == 0) first_bad = i;
    } else if (std::abs(x) > big) {
      if (huge++ == 0) first_huge = i;
    }
  };
  const int64_t n = a.numel();
  if (a.type == dtype::f32) {
    const float* x = a.as<float>();
    for (int64_t i = 0; i < n; ++i) see(i, x[i]);
  } else if (a.type == dtype::f64) {
    const double* x = a.as<double>();
    for (int64_t i = 0; i < n; ++i) see(i, x[i]);
  } else if (a.type == dtype::f16 || a.type == dtype::u16) {
    const uint16_t* x = a.bits16();
    for (int64_t i = 0; i < n; ++i)
      see(i, bf16_bits ? double(bf16_to_float(x[i])) : double(f16_to_float(x[i])));
  } else {
    return;
  }
  auto where = [&](int64_t i) {
    std::vector<int64_t> idx(a.shape.size());
    for (size_t d = a.shape.size(); d-- > 0;) {
      idx[d] = a.shape[d] > 0 ? i % a.shape[d] : 0;
      i = a.shape[d] > 0 ? i / a.shape[d] : 0;
    }
    return fmt::format("({})", fmt::join(idx, ", "));
  };
  if (bad > 0)
    std::fprintf(stderr,
                 "posenc: warning: %s holds %lld NaN or infinite value%s (the first at %s): the "
                 "output of attention over them means nothing; it is written all the same\n",
                 arg.c_str(), static_cast<long long>(bad), bad == 1 ? "" : "s",
                 where(first_bad).c_str());
  if (huge > 0)
    std::fprintf(stderr,
                 "posenc: warning: %s holds %lld value%s beyond %s in magnitude (the first at "
                 "%s): the product of two overflows %s, so scores are infinite; the output is "
                 "written all the same\n",
                 arg.c_str(), static_cast<long long>(huge), huge == 1 ? "" : "s",
                 f64_call ? "2^512" : "2^64", where(first_huge).c_str(),
                 f64_call ? "float64" : "float32");
}

void run_attend(const attend_opts& o) {
  const auto qa = read_npy(o.q);
  const auto ka = read_npy(o.k);
  const auto va = read_npy(o.v);
  // Q, K and V: float32/float64, or K and V in half precision: float16 ('<f2'), or bfloat16 bits
  // as uint16 ('<u2', NumPy has no bfloat16) with --kv-dtype bf16; Q too, in the dtype of K.
  const bool q_half = qa.type == dtype::f16 || qa.type == dtype::u16;
  if (q_half && ka.type != qa.type)
    fail(
        "a 16-bit --q ({}) needs --k and --v of the same dtype (read with the same --kv-dtype), "
        "got --k {}",
        dtype_name(qa.type), dtype_name(ka.type));
  if (!q_half) require_float(qa, "--q");
  if (o.products != "f32" && o.products != "bf16")
    fail("--products must be f32 or bf16, got '{}'", o.products);
  kv_storage kv = kv_storage::f32;
  if (ka.type == dtype::f16 || ka.type == dtype::u16) {
    if (va.type != ka.type)
      fail("--v must have the dtype of --k ({}), got {}", dtype_name(ka.type), dtype_name(va.type));
    if (ka.type == dtype::f16) {
      if (!o.kv_dtype.empty() && o.kv_dtype != "f16")
        fail("--kv-dtype {} disagrees with --k, which is float16; allowed: f16 (or leave it out)",
             o.kv_dtype);
      kv = kv_storage::f16;
    } else {
      if (o.kv_dtype != "bf16")
        fail(
            "--k is uint16: pass --kv-dtype bf16 when it holds bfloat16 bits (the only 16-bit "
            "integer reading posenc accepts), got --kv-dtype '{}'",
            o.kv_dtype);
      kv = kv_storage::bf16;
    }
    if (qa.type != dtype::f32 && !q_half)
      fail(
          "half-precision --k/--v ({}) are computed in float32 and need float32 --q (or --q in "
          "their dtype), got {}",
          name(kv), dtype_name(qa.type));
    if (!o.dout.empty())
      fail(
          "--dout: the backward needs float32 or float64 --k/--v; half precision ({}) is "
          "forward-only",
          name(kv));
  } else {
    require_float(ka, "--k");
    require_float(va, "--v");
    if (!o.kv_dtype.empty())
      fail("--kv-dtype {} needs float16 or uint16 (bfloat16) --k and --v, got {}", o.kv_dtype,
           dtype_name(ka.type));
  }
  if (qa.shape.size() != 3) fail("--q must have shape (T, Hq, D), got {}", qa.shape_str());
  if (ka.shape.size() != 3) fail("--k must have shape (S, Hkv, D), got {}", ka.shape_str());
  // T and S may be 0 (no tokens); a head count or head dim of 0 is an empty model, not a shape.
  if (qa.shape[1] < 1 || qa.shape[2] < 1)
    fail("--q has shape {}: its heads Hq and head dim D must be >= 1 (T may be 0)", qa.shape_str());
  if (ka.shape[1] < 1 || ka.shape[2] < 1)
    fail("--k has shape {}: its heads Hkv and head dim D must be >= 1 (S may be 0)",
         ka.shape_str());
  const int64_t D = qa.shape[2];
  if (ka.shape[2] != D)
    fail("--k must have shape (S, Hkv, D) with D = {} as in --q, got {}", D, ka.shape_str());
  if (va.shape != ka.shape)
    fail("--v must have the shape of --k (S, Hkv, D) = {}, got {}", ka.shape_str(), va.shape_str());
  if (ka.shape[1] < 1 || qa.shape[1] % ka.shape[1] != 0)
    fail("--q heads Hq = {} must be a multiple of --k heads Hkv = {}", qa.shape[1], ka.shape[1]);
  if (o.out == o.lse_out) fail("--lse-out must differ from --out, got '{}'", o.out);
  if (o.products == "bf16" && qa.type == dtype::f64)
    fail(
        "--products bf16 rounds float32 operands to bfloat16; --q is float64 (float64 stays "
        "float64 end to end): give float32 or 16-bit inputs, or --products f32");
  if (o.products == "bf16" && !o.dout.empty())
    fail("--products bf16 is forward-only; the backward (--dout) runs float32 products");
  const bool f64_call = qa.type == dtype::f64, bf16 = kv == kv_storage::bf16;
  note_nonfinite(qa, "--q", bf16, f64_call);
  note_nonfinite(ka, "--k", bf16, f64_call);
  note_nonfinite(va, "--v", bf16, f64_call);
  if (qa.type != dtype::f64)
    run_typed<float>(o, qa, ka, va, kv);
  else
    run_typed<double>(o, qa, ka, va, kv);
}

// The inputs, outputs, mask and score scale: --q, --k, --v, --out and their options.
void add_attend_io_flags(CLI::App* sub, attend_opts& o) {
  add_format_option(sub, o.format);
  sub->add_option("--q", o.q,
                  "Queries Q.npy (T, Hq, D), float32 or float64, or 16-bit in the dtype of --k")
      ->required();
  sub->add_option("--k", o.k,
                  "Keys K.npy (S, Hkv, D): float32, float64, float16, or bfloat16 bits as uint16 "
                  "(with --kv-dtype bf16)")
      ->required();
  sub->add_option("--v", o.v, "Values V.npy (S, Hkv, D), the dtype of --k")->required();
  sub->add_option("--kv-dtype", o.kv_dtype,
                  "How 16-bit --k/--v are read: f16 (the default for float16 files) or bf16 "
                  "(uint16 files holding bfloat16 bits); computed in float32");
  sub->add_option("--products", o.products,
                  "Operands of the two block products: f32 (default) or bf16 (q', k', p and v "
                  "rounded to bfloat16, float32 accumulation: vdpbf16ps where the CPU has it; "
                  "float32 calls, forward only)");
  sub->add_option("--out", o.out, "Output O.npy (T, Hq, D) in Q's dtype (float32 for 16-bit Q)")
      ->required();
  sub->add_option("--lse-out", o.lse_out, "Also write the per-row log-sum-exp (T, Hq)");
  sub->add_flag("--causal", o.causal, "Causal mask, aligned bottom-right (j <= S - T + i)");
  sub->add_option("--scale", o.scale, "Score scale (default 1/sqrt(D))");
}

// RoPE: the switch, a config file (--hf-config, --gguf) or its parameters one by one.
void add_attend_rope_flags(CLI::App* sub, attend_opts& o) {
  sub->add_flag("--rope", o.rope, "Rotate q and k at their positions (RoPE)");
  sub->add_option("--axial-rope", o.axial_rope,
                  "Axial RoPE over (3, n) ids in --q-positions / --k-positions: 2d (Pixtral; "
                  "--theta, --rope-layout) or nd (FLUX; --axes-dim, --theta)");
  sub->add_option("--axes-dim", o.axes_dim,
                  "--axial-rope nd: channels per axis A,B[,C] (even, summing to D)");
  sub->add_option("--hf-config", o.hf_config, "RoPE from a Hugging Face config.json");
  sub->add_option("--gguf", o.gguf, "RoPE from a GGUF file's metadata (llama.cpp)");
  sub->add_option("--rope-layout,--layout", o.layout, "RoPE pair layout: half or interleaved");
  sub->add_option("--rope-angle,--angle", o.angle,
                  "RoPE angle mode: exact (default), f32, hf_f32 or ggml_f32 (compat_f32 = f32)");
  sub->add_option("--head-dim", o.head_dim,
                  "RoPE head dim (optional: D of --q; an error when it disagrees)");
  sub->add_option("--theta", o.theta, "rope_theta (default 10000)");
  sub->add_option("--partial", o.partial, "partial_rotary_factor (default 1)");
  sub->add_option("--scaling", o.scaling,
                  "rope_type: default, linear, dynamic, yarn, longrope, llama3");
  sub->add_option("--factor", o.factor, "rope_scaling.factor");
  sub->add_option("--max-pos", o.max_pos, "max_position_embeddings");
  sub->add_option("--original-max-pos", o.original_max_pos, "original_max_position_embeddings");
  sub->add_option("--attention-factor", o.attention_factor, "yarn/longrope attention_factor");
  sub->add_option("--beta-fast", o.beta_fast, "yarn beta_fast (default 32)");
  sub->add_option("--beta-slow", o.beta_slow, "yarn beta_slow (default 1)");
  sub->add_option("--truncate", o.truncate, "yarn truncate: true or false (default true)");
  sub->add_option("--mscale", o.mscale, "yarn mscale");
  sub->add_option("--mscale-all-dim", o.mscale_all_dim, "yarn mscale_all_dim");
  sub->add_option("--short-factor", o.short_factor, "longrope short_factor: a,b,c (R/2)");
  sub->add_option("--long-factor", o.long_factor, "longrope long_factor: a,b,c (R/2)");
  sub->add_option("--low-freq-factor", o.low_freq_factor, "llama3 low_freq_factor");
  sub->add_option("--high-freq-factor", o.high_freq_factor, "llama3 high_freq_factor");
  sub->add_option("--rope-seq-len,--seq-len", o.seq_len,
                  "Sequence length for dynamic/longrope frequencies (default S)");
}

// Position ids, key masks, sliding window and sinks.
void add_attend_bias_mask_flags(CLI::App* sub, attend_opts& o) {
  sub->add_option("--q-positions", o.q_positions,
                  "Query position ids P.npy (T,) int64; (3, T) for M-RoPE (with --rope)");
  sub->add_option("--k-positions", o.k_positions,
                  "Key position ids P.npy (S,) int64; (3, S) for M-RoPE (with --rope)");
  sub->add_option("--key-padding", o.key_padding, "Key mask M.npy (S,) bool/uint8, 1 = real");
  sub->add_option("--cu-seqlens", o.cu_seqlens, "Packed documents over the keys: 0,5,12");
  sub->add_option("--window", o.window, "Sliding window W: keys fewer than W tokens behind");
  sub->add_option("--sinks", o.sinks,
                  "Attention sinks (gpt-oss): one logit per query head, a,b,c (Hq values), each "
                  "one more softmax score with no value");
}

// The backward: --dout and the gradients it writes.
void add_attend_gradient_flags(CLI::App* sub, attend_opts& o) {
  sub->add_option("--dout", o.dout, "Run the backward too: dL/dO DO.npy (T, Hq, D)");
  sub->add_option("--dq", o.dq, "Write dL/dq DQ.npy (T, Hq, D) (needs --dout)");
  sub->add_option("--dk", o.dk, "Write dL/dk DK.npy (S, Hkv, D) (needs --dout)");
  sub->add_option("--dv", o.dv, "Write dL/dv DV.npy (S, Hkv, D) (needs --dout)");
}

// Keys given transformed, per-layer --hf-config, DCA.
void add_attend_scheme_flags(CLI::App* sub, attend_opts& o) {
  sub->add_flag("--keys-rotated", o.keys_rotated,
                "--k is already rotated (as a KV cache stores it): only q is mapped at hook 1");
  sub->add_option("--layer", o.layer,
                  "Layer L of --hf-config: its layer type's RoPE, or none on a NoPE layer (with "
                  "Llama 4's temperature when the config sets attn_temperature_tuning)");
  sub->add_option("--layer-type", o.layer_type,
                  "Layer type of a per-layer --hf-config (posenc rope layers lists them)");
  sub->add_flag("--no-dca", o.no_dca,
                "Leave a --hf-config's dual_chunk_attention_config off (as transformers does); "
                "by default it turns Dual Chunk Attention on, as vLLM runs the model");
}

// The schemes reached by name, from their declarations.
void add_attend_named_scheme_flags(CLI::App* sub, attend_opts& o) {
  // The schemes reached by name: a switch and an option per parameter, from the declarations.
  for (const scheme_decl* d : named_scheme_decls()) {
    o.named_on[d->name] = false;
    for (const scheme_param& p : d->params) {
      if (!is_tensor_param(p)) continue;
      // A tensor: a .npy file; learned, its gradient's output path too. An optional one, the
      // switch: --name alone (on, the values derived) or --name=FILE.npy.
      auto* opt =
          sub->add_option("--" + flag_name(p.name), o.named_files[p.name],
                          fmt::format("{} ({}): {}, a .npy {}{}", d->title, d->citation, p.doc,
                                      p.shape, is_f64_tensor_param(p) ? " (float64)" : ""));
      opt->type_name(is_optional_tensor_param(p) ? "[=FILE.npy]" : "FILE.npy");
      if (is_optional_tensor_param(p)) opt->expected(0, 1);
      o.named_grads[p.name];
      if (d->learned)
        sub->add_option("--d" + flag_name(p.name), o.named_grads[p.name],
                        fmt::format("Write dL/d{} {} (needs --dout)", p.name, p.shape))
            ->type_name("FILE.npy");
    }
    if (!is_tensor_param(d->params[0]))
      sub->add_flag("--" + flag_name(d->params[0].name), o.named_on[d->name],
                    fmt::format("{} ({}): {}", d->title, d->citation, d->params[0].doc));
    for (size_t i = 1; i < d->params.size(); ++i) {
      const scheme_param& p = d->params[i];
      if (is_tensor_param(p)) continue;
      if (std::string(p.dtype) == "bool") {  // --name (1) or --name=false (0)
        o.named_values[p.name] = named_bool_default(p);
        sub->add_flag_function(
            "--" + flag_name(p.name),
            [&o, name = std::string(p.name)](int64_t n) { o.named_values[name] = n > 0 ? 1 : 0; },
            fmt::format("{} {}: {} (default {}; --{}=false for false)", d->title, p.name, p.doc,
                        p.def, flag_name(p.name)));
        continue;
      }
      if (p.choices) {  // a choice of strings: its text
        const auto c = param_choices(p);
        sub->add_option("--" + flag_name(p.name), o.named_texts[p.name],
                        fmt::format("{} {}: {} (default {})", d->title, p.name, p.doc, p.def))
            ->type_name(fmt::format("{}", fmt::join(c, "|")));
        continue;
      }
      sub->add_option(
             "--" + flag_name(p.name), o.named_values[p.name],
             fmt::format("{} {}, {}: {} (default {})", d->title, p.name, p.dtype, p.doc, p.def))
          ->type_name(std::string(p.dtype) == "int" ? "INT" : "FLOAT");
    }
  }
}

const bool registered_cmd_attend = register_command(50, [](CLI::App& app) {
  auto o = std::make_shared<attend_opts>();
  auto* sub = app.add_subcommand(
      "attend", "Multi-head attention with a position scheme on .npy inputs (an oracle)");
  o->sub = sub;
  add_attend_io_flags(sub, *o);
  add_attend_rope_flags(sub, *o);
  add_attend_bias_mask_flags(sub, *o);
  add_attend_gradient_flags(sub, *o);
  add_attend_scheme_flags(sub, *o);
  add_attend_named_scheme_flags(sub, *o);
  sub->callback([o] { run_attend(*o); });
});

}  // namespace
}  // namespace posenc::cli
