// python/src/rope.cpp: RopeConfig, rope_cos_sin, apply_rope and the FlashAttention-style
// rotary kernel with caller-given cos/sin tables (posenc.torch.apply_rotary_emb).
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/axial_rope.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/positions/positions.hpp"

namespace posenc::py_bind {

namespace {

// Emits each precedence warning of a config as a Python UserWarning (what the CLI prints as
// "posenc: warning: ...").
void emit_warnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings)
    if (PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 2) != 0) throw py::error_already_set();
}

// seq_len for the frequencies: given (>= 0), else max position + 1, like HF's forward
// (dynamic_rope_update) and `posenc rope apply`.
int64_t seq_len_for(std::optional<int64_t> seq_len, const std::vector<int64_t>& pos) {
  if (seq_len) {
    if (*seq_len < 0) fail("seq_len must be >= 0, got {}", *seq_len);
    return *seq_len;
  }
  return pos.empty() ? 0 : *std::max_element(pos.begin(), pos.end()) + 1;
}

// Per-sequence offsets: an int (every sequence) or (B,) integers.
std::vector<int64_t> offsets_for(py::handle seqlen_offsets, int64_t B) {
  std::vector<int64_t> off;
  const py::array a = as_array(seqlen_offsets, "seqlen_offsets");
  off = int_values(a, "seqlen_offsets");
  if (a.ndim() == 0) {  // an int (Python or NumPy scalar): every sequence
    off.assign(B, off[0]);
  } else {
    if (a.ndim() != 1 || static_cast<int64_t>(off.size()) != B)
      fail("seqlen_offsets must be an int or have shape (B,) = ({},), got {}", B, shape_str(a));
  }
  require_min(off, "seqlen_offsets", 0);
  return off;
}

// Token layout of x for the RoPE entry points: N tokens of H heads of D channels, and the
// position of each token.
struct token_layout {
  int64_t B = 1, N = 0, H = 0, D = 0;
  std::vector<int64_t> positions;  // (N,)
};

// x: (B, T, H, D), or (total, H, D) with cu_seqlens (B = len(cu_seqlens) - 1), or (T, H, D)
// as one sequence. positions: (B, T), (1, T) or (T,) for 4-D x; (total,) for 3-D x; None =
// seqlen_offsets[b] + index within the sequence.
token_layout layout_of(const py::array& x, py::handle positions, py::handle seqlen_offsets,
                       py::handle cu_seqlens, const char* xname) {
  token_layout L;
  const bool varlen = !cu_seqlens.is_none();
  if (varlen)
    require_ndim(x, xname, {3}, "(total, H, D) when cu_seqlens is given");
  else
    require_ndim(x, xname, {3, 4}, "(B, T, H, D) or (T, H, D)");
  const int nd = static_cast<int>(x.ndim());
  L.H = x.shape(nd - 2);
  L.D = x.shape(nd - 1);
  const int64_t T = nd == 4 ? x.shape(1) : x.shape(0);
  L.B = nd == 4 ? x.shape(0) : 1;
  L.N = L.B * T;
  std::vector<int64_t> cu;
  if (varlen) {
    cu = int_values(cu_seqlens, "cu_seqlens");
    validate_cu_seqlens(cu, L.N, "cu_seqlens");
    L.B = static_cast<int64_t>(cu.size()) - 1;
  }
  const py::array off_a = as_array(seqlen_offsets, "seqlen_offsets");
  const bool offsets_given = off_a.ndim() != 0 || int_values(off_a, "seqlen_offsets")[0] != 0;
  if (!positions.is_none()) {
    if (offsets_given)
      fail("seqlen_offsets must be 0 when positions are given (positions are absolute)");
    const py::array pa = as_array(positions, "positions");
    auto p = int_values(pa, "positions");
    if (nd == 4) {
      const bool full = pa.ndim() == 2 && pa.shape(0) == L.B && pa.shape(1) == T;
      const bool shared = (pa.ndim() == 2 && pa.shape(0) == 1 && pa.shape(1) == T) ||
                          (pa.ndim() == 1 && pa.shape(0) == T);
      if (!full && !shared)
        fail("positions must have shape (B, T) = ({}, {}), (1, T) or (T,), got {}", L.B, T,
             shape_str(pa));
      if (shared) {
        L.positions.resize(L.N);
        for (int64_t b = 0; b < L.B; ++b)
          std::copy(p.begin(), p.end(), L.positions.begin() + b * T);
      } else {
        L.positions = std::move(p);
      }
    } else {
      if (pa.ndim() != 1 || pa.shape(0) != L.N)
        fail("positions must have shape ({},) = ({},), got {}", varlen ? "total" : "T", L.N,
             shape_str(pa));
      L.positions = std::move(p);
    }
    require_min(L.positions, "positions", 0);
    return L;
  }
  const auto off = offsets_for(seqlen_offsets, L.B);
  L.positions.resize(L.N);
  // Each sequence continues from its offset: the library's fresh positions per sequence.
  for (int64_t b = 0; b < L.B; ++b) {
    const int64_t begin = varlen ? cu[b] : b * T, end = varlen ? cu[b + 1] : (b + 1) * T;
    const auto p = positions_fresh(end - begin, off[b]);
    std::copy(p.begin(), p.end(), L.positions.begin() + begin);
  }
  return L;
}

// Where a RoPE call reads and writes. inplace: x itself (must be C-contiguous and writeable).
// Out of place: a new C-contiguous array, read from x itself when x is C-contiguous, else from
// a contiguous copy of x (the non-contiguous case costs that one copy).
struct rope_io {
  py::array src, out;
};

rope_io io_for(const py::array& x, bool inplace, const char* name) {
  if (inplace) {
    if (!c_contiguous(x) || !x.writeable())
      fail("{} must be C-contiguous and writeable for inplace=True, got a {} view", name,
           x.writeable() ? "non-contiguous" : "read-only");
    return {x, x};
  }
  py::array src = c_contiguous(x)
                      ? x
                      : py::module_::import("numpy").attr("ascontiguousarray")(x).cast<py::array>();
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
  return {src, py::array(x.dtype(), shape)};
}

// Out of place, each block of tokens (about 64 KiB) is copied and then rotated while it is
// still in cache: one pass over memory instead of a copy pass and a rotate pass.
inline int64_t block_tokens(int64_t H, int64_t D, size_t elem) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, H * D * static_cast<int64_t>(elem)));
}

nlohmann::json parse_config(const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("config must be a JSON-serialisable dict: {}", e.what());
  }
}

// layer_type "" = the config's one RoPE configuration; else one layer type's (per-layer-type
// RoPE: rope_config_from_json with a layer type).
rope_config config_from_json_text(const std::string& text, const std::string& layer_type) {
  std::vector<std::string> warnings;
  auto c = rope_config_from_json(parse_config(text), layer_type, &warnings);
  emit_warnings(warnings);
  return c;
}

// The engine's own float32 inv_freq buffer (None = posenc's model of it) into f's hf_f32
// pipeline.
void apply_hf_inv_freq(rope_freqs& f, py::handle obj) {
  if (obj.is_none()) return;
  const py::array a = as_array(obj, "hf_inv_freq");
  if (!is_f32(a))
    throw py::type_error("hf_inv_freq must be float32 (the engine's buffer as it is), got " +
                         dtype_str(a));
  if (a.ndim() != 1) fail("hf_inv_freq must have shape (R/2,), got {}", shape_str(a));
  const auto v = contiguous_as<float>(a);
  rope_set_hf_inv_freq(f, std::span<const float>(v.data(), static_cast<size_t>(v.size())));
}

// hf_layer_plan as a dict (posenc.hf_layer_plan documents the keys).
py::dict layer_plan_dict(const nlohmann::json& config) {
  const rope_layer_plan p = hf_layer_plan(config);
  emit_warnings(p.defaults);
  py::dict d;
  d["layer_types"] = p.layer_types;
  d["types"] = p.types;
  d["source"] = p.source;
  py::dict layers;
  for (const auto& t : p.types) {
    std::vector<int64_t> idx;
    for (size_t i = 0; i < p.layer_types.size(); ++i)
      if (p.layer_types[i] == t) idx.push_back(static_cast<int64_t>(i));
    layers[py::str(t)] = idx;
  }
  d["layers"] = layers;
  d["rope_layers"] = std::vector<bool>(p.rope_layers.begin(), p.rope_layers.end());
  std::vector<int64_t> nope;
  for (size_t i = 0; i < p.rope_layers.size(); ++i)
    if (!p.rope_layers[i]) nope.push_back(static_cast<int64_t>(i));
  d["nope_layers"] = nope;
  d["nope_source"] = p.nope_source;
  d["attn_temperature_tuning"] = p.temperature_tuning;
  d["floor_scale"] = p.floor_scale;
  d["attn_scale"] = p.attn_scale;
  d["defaults"] = p.defaults;
  return d;
}

template <typename Real>
void rotate_tokens(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   const std::vector<int64_t>& pos, const rope_io& io, int64_t N, int64_t H,
                   int64_t D, bool inverse) {
  const Real* src = static_cast<const Real*>(io.src.data());
  Real* dst = static_cast<Real*>(const_cast<void*>(io.out.data()));
  py::gil_scoped_release nogil;
  // Validates f and the shapes once, outside the parallel region (nothing may throw inside).
  rope_apply(f, layout, angle, {}, dst, 0, H, D, inverse);
  if (src == dst) {
    rope_apply(f, layout, angle, pos, dst, N, H, D, inverse);
    return;
  }
  const int64_t row = H * D, bt = block_tokens(H, D, sizeof(Real)), nb = (N + bt - 1) / bt;
  const std::span<const int64_t> all(pos);
  // rope_apply inside a parallel_for share runs serially (nested parallel_for), and a token's
  // rotation depends on that token alone: the bits are those of one call over all tokens.
  parallel_for(nb, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * bt, n = std::min(bt, N - t0);
      std::memcpy(dst + t0 * row, src + t0 * row, static_cast<size_t>(n * row) * sizeof(Real));
      rope_apply(f, layout, angle, all.subspan(t0, n), dst + t0 * row, n, H, D, inverse);
    }
  });
}

// FlashAttention's apply_rotary_emb contract: token i of sequence b sits at row
// seqlen_offsets[b] + (index within the sequence) of cos and sin (seqlen_ro, R/2); channels
// [R, D) pass through. cos/sin are converted once to the element type of x.
template <typename Real>
void rotate_with_tables(const token_layout& L, const py::array& cos_a, const py::array& sin_a,
                        bool interleaved, bool inverse, const rope_io& io) {
  const auto cs = contiguous_as<Real>(cos_a);
  const auto sn = contiguous_as<Real>(sin_a);
  const int64_t half = cos_a.shape(1), rows = cos_a.shape(0);
  for (size_t i = 0; i < L.positions.size(); ++i)
    if (L.positions[i] >= rows)
      fail("cos and sin have {} rows, but token {} needs row {} (seqlen_offsets + position)", rows,
           i, L.positions[i]);
  const Real* src = static_cast<const Real*>(io.src.data());
  Real* x = static_cast<Real*>(const_cast<void*>(io.out.data()));
  const Real* c = cs.data();
  const Real* s = sn.data();
  const auto layout = interleaved ? rope_layout::interleaved : rope_layout::half;
  const int64_t H = L.H, D = L.D;
  const int64_t* pos = L.positions.data();
  py::gil_scoped_release nogil;
  parallel_for(
      L.N,
      [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          if (src != x)
            std::memcpy(x + t * H * D, src + t * H * D, static_cast<size_t>(H * D) * sizeof(Real));
          rope_rotate(layout, 2 * half, c + pos[t] * half, s + pos[t] * half, x + t * H * D, H, D,
                      inverse);
        }
      },
      16);
}

// RopeConfig's constructors: from keyword parameters, a config.json text or a file.
void bind_rope_config_constructors(py::class_<rope_config>& cls) {
  cls.def(py::init([](const py::kwargs& kw) {
            // RopeConfig(head_dim=..., theta=..., scaling=..., ...): posenc.rope_config
            // builds the config.json these name and parses it like from_hf.
            return py::module_::import("posenc").attr("rope_config")(**kw).cast<rope_config>();
          }),
          "RopeConfig(head_dim=..., rotary_dim=None, theta=10000, scaling='default', "
          "factor=None, ...): see posenc.rope_config.")
      .def_static("_from_json", &config_from_json_text, py::arg("text"), py::arg("layer_type") = "")
      .def_static(
          "_from_file",
          [](const std::string& path, const std::string& layer_type) {
            std::vector<std::string> warnings;
            auto c = rope_config_from_file(path, layer_type, &warnings);
            emit_warnings(warnings);
            return c;
          },
          py::arg("path"), py::arg("layer_type") = "");
}

// RopeConfig's read-only properties.
void bind_rope_config_properties(py::class_<rope_config>& cls) {
  cls.def_property_readonly(
         "head_dim", [](const rope_config& c) { return c.head_dim; }, "D, the head dim.")
      .def_property_readonly(
          "rotary_dim", [](const rope_config& c) { return c.rotary_dim; },
          "R, the rotated channels (head_dim * partial_rotary_factor; even).")
      .def_property_readonly(
          "theta", [](const rope_config& c) { return c.theta; },
          "rope_theta, the base of the frequencies.")
      .def_property_readonly(
          "scaling", [](const rope_config& c) { return rope_type_name(c.type); },
          "The HF rope_type: default, linear, dynamic, yarn, longrope, llama3 or proportional.")
      .def_property_readonly(
          "factor", [](const rope_config& c) { return c.factor; },
          "The scaling factor (1 without scaling).")
      .def_property_readonly(
          "max_position_embeddings", [](const rope_config& c) { return c.max_position_embeddings; },
          "The context length the model is configured for (dynamic: where NTK starts).")
      .def_property_readonly(
          "original_max_position_embeddings",
          [](const rope_config& c) { return c.original_max_position_embeddings; },
          "The pretraining context length (yarn, longrope, llama3); 0 = not given.")
      .def_property_readonly(
          "alpha", [](const rope_config& c) { return c.dynamic_alpha; },
          "Hunyuan's NTK alpha (rope_scaling.alpha, dynamic): the base is theta * "
          "alpha^(R/(R-2)) up to max_position_embeddings; 0 = none.")
      .def_property_readonly(
          "llama_4_scaling_beta", [](const rope_config& c) { return c.llama_4_scaling_beta; },
          "Ministral 3's / Mistral 4's query scale (rope_parameters.llama_4_scaling_beta): "
          "every layer multiplies its rotated queries by 1 + beta * log(1 + floor(pos / "
          "llama_4_scaling_floor)); posenc.attention(..., attn_temperature_tuning=True, "
          "floor_scale=llama_4_scaling_floor, attn_scale=beta, floor_offset=0) applies it. 0 = "
          "none.")
      .def_property_readonly(
          "llama_4_scaling_floor", [](const rope_config& c) { return c.llama_4_scaling_floor; },
          "Positions per step of the query scale: transformers' original_max_position_embeddings; "
          "from a GGUF file llama.cpp's (n_ctx_orig_yarn for mistral3, "
          "attention.temperature_length for deepseek2). 0 without a query scale.")
      .def_property_readonly(
          "rotated_pairs",
          [](const rope_config& c) {
            // proportional: the pairs that rotate (the rest have omega 0)
            return c.type == rope_type::proportional ? c.rotated_pairs.value_or(c.head_dim / 2)
                                                     : c.rotary_dim / 2;
          },
          "Pairs that rotate: rotary_dim / 2, fewer for proportional RoPE (the rest have omega 0).")
      .def_property_readonly(
          "mrope_section",
          [](const rope_config& c) {
            return c.mrope_section.empty() ? py::object(py::none())
                                           : py::object(py::cast(c.mrope_section));
          },
          "M-RoPE sections (temporal, height, width pairs), None for 1-D RoPE.")
      .def_property_readonly(
          "mrope_interleaved", [](const rope_config& c) { return c.mrope_interleaved; },
          "M-RoPE components interleaved t h w t h w ... (Qwen3-VL) instead of contiguous "
          "sections.");
}

// RopeConfig's methods: frequencies, hf_inv_freq and __repr__.
void bind_rope_config_methods(py::class_<rope_config>& cls) {
  cls.def(
         "frequencies",
         [](const rope_config& c, std::optional<int64_t> seq_len) {
           if (seq_len && *seq_len < 0) fail("seq_len must be >= 0, got {}", *seq_len);
           const auto f = rope_frequencies(c, seq_len.value_or(0));
           py::array_t<double> inv(static_cast<py::ssize_t>(f.inv_freq.size()));
           std::memcpy(inv.mutable_data(), f.inv_freq.data(), f.inv_freq.size() * sizeof(double));
           return py::make_tuple(inv, f.attention_factor);
         },
         py::arg("seq_len") = py::none(),
         "(inv_freq (R/2,) float64, attention_factor): transformers' "
         "ROPE_INIT_FUNCTIONS[rope_type](config, device, seq_len). seq_len None = 0 (HF at "
         "initialisation: dynamic unscaled, longrope short_factor).")
      .def(
          "hf_inv_freq",
          [](const rope_config& c, std::optional<int64_t> seq_len) {
            if (seq_len && *seq_len < 0) fail("seq_len must be >= 0, got {}", *seq_len);
            const auto f = rope_frequencies(c, seq_len.value_or(0));
            const auto& v = f.hf->inv_freq;
            py::array_t<float> inv(static_cast<py::ssize_t>(v.size()));
            std::memcpy(inv.mutable_data(), v.data(), v.size() * sizeof(float));
            return inv;
          },
          py::arg("seq_len") = py::none(),
          "The float32 inv_freq (R/2,) angle 'hf_f32' uses: transformers' float32 formula with "
          "torch's pow rounded correctly (its CPU SLEEF pow may differ in the last bit; pass the "
          "engine's buffer as rope_cos_sin(..., hf_inv_freq=) / apply_rope(..., hf_inv_freq=) "
          "to use it instead).")
      .def("__repr__", [](const rope_config& c) {
        return fmt::format(
            "RopeConfig(head_dim={}, rotary_dim={}, theta={}, scaling='{}', factor={}, "
            "max_position_embeddings={}, original_max_position_embeddings={}{})",
            c.head_dim, c.rotary_dim, c.theta, rope_type_name(c.type), c.factor,
            c.max_position_embeddings, c.original_max_position_embeddings,
            c.dynamic_alpha > 0 ? fmt::format(", alpha={}", c.dynamic_alpha) : "");
      });
}

// RopeConfig: construction from a config.json or parameters, its properties and frequencies.
void bind_rope_config(py::module_& m) {
  py::class_<rope_config> cls(m, "RopeConfig", R"doc(
A RoPE configuration: head_dim, rotary_dim, theta and the scaling (HF rope_type) with its
parameters. Build it with RopeConfig.from_hf(path_or_dict) from a Hugging Face config.json, or
with posenc.RopeConfig(head_dim=..., theta=..., scaling=..., ...). Immutable.)doc");
  bind_rope_config_constructors(cls);
  bind_rope_config_properties(cls);
  bind_rope_config_methods(cls);
}

// rope_cos_sin: cos and sin tables of a RopeConfig.
void bind_rope_cos_sin(py::module_& m) {
  m.def(
      "rope_cos_sin",
      [](const rope_config& c, py::handle positions, const std::string& angle_name,
         const py::object& dtype, std::optional<int64_t> seq_len, py::handle hf_inv_freq) {
        const auto angle = rope_angle_from_name(angle_name, "angle");
        const py::array pa = as_array(positions, "positions");
        if (pa.ndim() != 1) fail("positions must have shape (N,), got {}", shape_str(pa));
        const auto pos = int_values(pa, "positions");
        require_min(pos, "positions", 0);
        auto f = rope_frequencies(c, seq_len_for(seq_len, pos));
        if (!hf_inv_freq.is_none() && angle != rope_angle::hf_f32)
          fail("hf_inv_freq is the buffer of angle 'hf_f32'; got angle '{}'", angle_name);
        apply_hf_inv_freq(f, hf_inv_freq);
        const py::dtype dt = py::dtype::from_args(dtype);
        const int64_t N = static_cast<int64_t>(pos.size()), half = f.rotary_dim / 2;
        auto run = [&](auto tag) {
          using Real = decltype(tag);
          py::array_t<Real> cs({N, half}), sn({N, half});
          Real* cp = cs.mutable_data();
          Real* sp = sn.mutable_data();
          {
            py::gil_scoped_release nogil;
            parallel_for(
                N,
                [&](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t)
                    rope_cos_sin(f, angle, pos[t], cp + t * half, sp + t * half);
                },
                64);
          }
          return py::make_tuple(cs, sn);
        };
        if (dt.is(py::dtype::of<double>())) return run(double{});
        if (dt.is(py::dtype::of<float>())) return run(float{});
        throw py::type_error("dtype must be float32 or float64, got " + dtype_name(dt));
      },
      py::arg("cfg"), py::arg("positions"), py::arg("angle") = "exact",
      py::arg("dtype") = py::dtype::of<double>(), py::arg("seq_len") = py::none(),
      py::arg("hf_inv_freq") = py::none(),
      R"doc(cos, sin (N, R/2) of cfg at positions (N,) in angle mode `angle`, times the attention
factor. hf_inv_freq (angle "hf_f32" only): the engine's own float32 inv_freq buffer
(transformers' rotary_emb.inv_freq) in place of posenc's model of it (RopeConfig.hf_inv_freq;
the model rounds torch's float32 pow correctly, torch's SLEEF pow can differ in the last bit).)doc");
}

// apply_rope: rotate x by a RopeConfig at its positions.
void bind_apply_rope(py::module_& m) {
  m.def(
      "apply_rope",
      [](py::handle x_obj, py::handle positions, const rope_config& c,
         const std::string& layout_name, const std::string& angle_name, py::handle seqlen_offsets,
         py::handle cu_seqlens, bool inplace, bool inverse, std::optional<int64_t> seq_len,
         py::handle hf_inv_freq) {
        const py::array x = as_array(x_obj, "x");
        require_float(x, "x");
        const auto layout = rope_layout_from_name(layout_name, "layout");
        const auto angle = rope_angle_from_name(angle_name, "angle");
        if (!hf_inv_freq.is_none() && angle != rope_angle::hf_f32)
          fail("hf_inv_freq is the buffer of angle 'hf_f32'; got angle '{}'", angle_name);
        const auto L = layout_of(x, positions, seqlen_offsets, cu_seqlens, "x");
        if (L.D != c.head_dim)
          fail("x must have head dim D = cfg.head_dim = {}, got shape {}", c.head_dim,
               shape_str(x));
        auto f = rope_frequencies(c, seq_len_for(seq_len, L.positions));
        apply_hf_inv_freq(f, hf_inv_freq);
        const rope_io io = io_for(x, inplace, "x");
        if (is_f32(x))
          rotate_tokens<float>(f, layout, angle, L.positions, io, L.N, L.H, L.D, inverse);
        else
          rotate_tokens<double>(f, layout, angle, L.positions, io, L.N, L.H, L.D, inverse);
        return io.out;
      },
      py::arg("x"), py::arg("positions") = py::none(), py::kw_only(), py::arg("cfg"),
      py::arg("layout") = "half", py::arg("angle") = "exact", py::arg("seqlen_offsets") = 0,
      py::arg("cu_seqlens") = py::none(), py::arg("inplace") = false, py::arg("inverse") = false,
      py::arg("seq_len") = py::none(), py::arg("hf_inv_freq") = py::none());
}

// _rotary_tables: rotate x by given cos and sin tables (FlashAttention's apply_rotary_emb).
void bind_rotary_tables(py::module_& m) {
  m.def(
      "_rotary_tables",
      [](py::handle x_obj, py::handle cos_obj, py::handle sin_obj, bool interleaved, bool inplace,
         py::handle seqlen_offsets, py::handle cu_seqlens, bool inverse) {
        const py::array x = as_array(x_obj, "x");
        require_float(x, "x");
        const py::array cs = as_array(cos_obj, "cos"), sn = as_array(sin_obj, "sin");
        require_float(cs, "cos");
        require_float(sn, "sin");
        if (cs.ndim() != 2)
          fail("cos must have shape (seqlen_ro, rotary_dim / 2), got {}", shape_str(cs));
        if (sn.ndim() != 2 || sn.shape(0) != cs.shape(0) || sn.shape(1) != cs.shape(1))
          fail("sin must have the shape of cos {}, got {}", shape_str(cs), shape_str(sn));
        const auto L = layout_of(x, py::none(), seqlen_offsets, cu_seqlens, "x");
        if (cs.shape(1) < 1 || 2 * cs.shape(1) > L.D)
          fail(
              "cos must have shape (seqlen_ro, rotary_dim / 2) with 1 <= rotary_dim / 2 <= D / 2 "
              "= {}, got {}",
              L.D / 2, shape_str(cs));
        const rope_io io = io_for(x, inplace, "x");
        if (is_f32(x))
          rotate_with_tables<float>(L, cs, sn, interleaved, inverse, io);
        else
          rotate_with_tables<double>(L, cs, sn, interleaved, inverse, io);
        return io.out;
      },
      py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("interleaved") = false,
      py::arg("inplace") = false, py::arg("seqlen_offsets") = 0, py::arg("cu_seqlens") = py::none(),
      py::arg("inverse") = false);
}

// rope_cos_sin, apply_rope and the FlashAttention-style tables.
void bind_rope_apply(py::module_& m) {
  bind_rope_cos_sin(m);
  bind_apply_rope(m);
  bind_rotary_tables(m);
}

// hf_layer_plan.
void bind_layer_plan(py::module_& m) {
  m.def(
      "_hf_layer_plan", [](const std::string& text) { return layer_plan_dict(parse_config(text)); },
      py::arg("text"));
  m.def(
      "_hf_layer_plan_file",
      [](const std::string& path) { return layer_plan_dict(hf_config_read(path)); },
      py::arg("path"));
  // dual_chunk_attention_config as posenc.attention's DCA keywords ({} when absent), and the
  // reader's warnings.
  auto dca = [](const nlohmann::json& j) {
    std::vector<std::string> warnings;
    const hf_dca_config c = hf_dca_config_from_json(j, &warnings);
    py::dict out;
    if (c.present) {
      out["dca"] = true;
      for (const auto& [name, value] : hf_dca_scheme_params(c))
        out[py::str(name)] = static_cast<int64_t>(value);
    }
    return py::make_tuple(out, warnings);
  };
  m.def(
      "_hf_dca", [dca](const std::string& text) { return dca(parse_config(text)); },
      py::arg("text"));
  m.def(
      "_hf_dca_file", [dca](const std::string& path) { return dca(hf_config_read(path)); },
      py::arg("path"));
}

// M-RoPE: mrope_apply and positions_mrope.
void bind_mrope(py::module_& m) {
  m.def(
      "mrope_apply",
      [](py::handle x_obj, py::handle positions, const rope_config& c,
         const std::string& layout_name, const std::string& angle_name, bool inplace, bool inverse,
         std::optional<int64_t> seq_len) {
        const py::array x = as_array(x_obj, "x");
        require_float(x, "x");
        require_ndim(x, "x", {3}, "(T, H, D)");
        const auto layout = rope_layout_from_name(layout_name, "layout");
        const auto angle = rope_angle_from_name(angle_name, "angle");
        const int64_t T = x.shape(0), H = x.shape(1), D = x.shape(2);
        if (D != c.head_dim)
          fail("x must have head dim D = cfg.head_dim = {}, got shape {}", c.head_dim,
               shape_str(x));
        if (c.mrope_section.empty())
          fail(
              "cfg must be an M-RoPE config (mrope_section in rope_scaling or rope_parameters), "
              "got a 1-D RoPE config");
        const py::array pa = as_array(positions, "positions");
        auto pos = int_values(pa, "positions");
        if (pa.ndim() != 2 || pa.shape(0) != 3 || pa.shape(1) != T)
          fail("positions must have shape (3, T) = (3, {}) (temporal, height, width ids), got {}",
               T, shape_str(pa));
        require_min(pos, "positions", 0);
        const auto f = rope_frequencies(c, seq_len_for(seq_len, pos));
        const auto comp = mrope_components(c.mrope_section, c.mrope_interleaved, f.rotary_dim / 2);
        const rope_io io = io_for(x, inplace, "x");
        void* dst = const_cast<void*>(io.out.data());
        const void* src = io.src.data();
        const bool f32 = is_f32(x);
        const auto bytes = static_cast<size_t>(x.nbytes());
        {
          py::gil_scoped_release nogil;
          // mrope_apply rotates in place: out of place, start from a copy of x
          if (dst != src) std::memcpy(dst, src, bytes);
          if (f32)
            mrope_apply(f, comp, layout, angle, pos, static_cast<float*>(dst), T, H, D, inverse);
          else
            mrope_apply(f, comp, layout, angle, pos, static_cast<double*>(dst), T, H, D, inverse);
        }
        return io.out;
      },
      py::arg("x"), py::arg("positions"), py::kw_only(), py::arg("cfg"), py::arg("layout") = "half",
      py::arg("angle") = "exact", py::arg("inplace") = false, py::arg("inverse") = false,
      py::arg("seq_len") = py::none(),
      R"doc(M-RoPE (Qwen2-VL): rotate x (T, H, D) with three position ids per token.

positions (3, T): rows temporal, height, width (posenc.positions_mrope builds them for
text-image sequences). cfg: an M-RoPE RopeConfig (mrope_section in rope_scaling or
rope_parameters; mrope_interleaved for Qwen3-VL's layout). Pair i turns by pos[c_i] omega_i,
with c_i from the sections; a text token (the same id in all three rows) is rotated exactly as
apply_rope rotates it. layout, angle, inverse, seq_len as apply_rope. Returns a new array, or x
when inplace.)doc");

  m.def(
      "positions_mrope",
      [](const std::vector<std::vector<int64_t>>& segments, int64_t start,
         const std::string& rule) {
        const mrope_rule r = mrope_rule_from_name(rule, "rule");
        std::vector<mrope_segment> segs;
        for (size_t i = 0; i < segments.size(); ++i) {
          const auto& s = segments[i];
          if (s.size() != 4 && s.size() != 1)
            fail(
                "segments[{}] must be (text,) or (text, t, h, w): text tokens, then an image "
                "grid, got {} values",
                i, s.size());
          segs.push_back(s.size() == 1 ? mrope_segment{s[0], 0, 0, 0}
                                       : mrope_segment{s[0], s[1], s[2], s[3]});
        }
        const auto ids = positions_mrope(segs, start, r);
        const auto n = static_cast<py::ssize_t>(ids.size() / 3);
        py::array_t<int64_t> out({py::ssize_t{3}, n});
        std::memcpy(out.mutable_data(), ids.data(), ids.size() * sizeof(int64_t));
        return out;
      },
      py::arg("segments"), py::arg("start") = 0, py::arg("rule") = "transformers_v5",
      R"doc(M-RoPE position ids (3, n) int64 for a sequence of text runs and images.

segments: a list of (text, t, h, w): `text` text tokens followed by an image of grid (t, h, w)
tokens (after the vision merger; (text,) or t = h = w = 0 for text only). As transformers'
Qwen2-VL get_rope_index: a text token gets (n, n, n); image token (a, b, c) gets
(n + a, n + b, n + c); the next token then starts at n + max(h, w) (rule "transformers_v5",
the default: transformers 5, PR #43972) or n + max(t, h, w) (rule "transformers_v4": transformers
4.x, one past the largest id). The two differ only for a video with t > max(h, w). start: the
first id.)doc");
}

// Axial RoPE (posenc/encodings/axial_rope.hpp): Pixtral's 2-D and FLUX's N-axis conventions as
// per-pair frequencies over M-RoPE's components.
void bind_axial(py::module_& m) {
  py::class_<axial_rope>(m, "AxialRope",
                         "Axial RoPE: per-pair frequencies over up to 3 position axes (Pixtral's "
                         "2-D, FLUX's axes_dim). Pass it as rope= to posenc.attention with "
                         "(3, n) position ids (posenc.axial_grid_ids).")
      .def_property_readonly(
          "inv_freq",
          [](const axial_rope& a) {
            py::array_t<double> out(static_cast<py::ssize_t>(a.freqs.inv_freq.size()));
            std::copy(a.freqs.inv_freq.begin(), a.freqs.inv_freq.end(), out.mutable_data());
            return out;
          },
          "(D/2,) the frequency of each rotary pair, in its axis's units")
      .def_property_readonly(
          "section",
          [](const axial_rope& a) {
            return py::make_tuple(a.section[0], a.section[1], a.section[2]);
          },
          "pairs per axis (M-RoPE's contiguous sections), in channel order")
      .def_property_readonly(
          "layout", [](const axial_rope& a) { return rope_layout_name(a.layout); },
          "pair layout: half (rotate_half) or interleaved")
      .def_property_readonly(
          "axes", [](const axial_rope& a) { return a.axes; }, "axes in use (2 or 3)")
      .def_property_readonly(
          "head_dim", [](const axial_rope& a) { return a.freqs.head_dim; },
          "D, the head dim (every channel rotates)")
      .def("__repr__", [](const axial_rope& a) {
        return fmt::format("AxialRope(head_dim={}, axes={}, section=({}, {}, {}), layout='{}')",
                           a.freqs.head_dim, a.axes, a.section[0], a.section[1], a.section[2],
                           rope_layout_name(a.layout));
      });
  m.def(
      "axial_rope_2d",
      [](int64_t head_dim, double theta, const std::string& layout) {
        return axial_rope_2d(head_dim, theta, rope_layout_from_name(layout, "layout"));
      },
      py::arg("head_dim"), py::kw_only(), py::arg("theta") = 10000.0, py::arg("layout") = "half",
      R"doc(Pixtral's 2-D RoPE (Llama 4's vision encoder the same idea): the 1-D frequencies
theta^(-2k/D) dealt out alternately, the first D/4 pairs turned by the patch's row at the even
ones, the last D/4 by its column at the odd ones. layout "half" as transformers'
PixtralRotaryEmbedding, "interleaved" as mistral-inference and vLLM. head_dim a multiple of 4.
Ids: (3, n) with row 1 the patch row and row 2 its column (posenc.axial_grid_ids).)doc");
  m.def(
      "axial_rope_nd",
      [](const std::vector<int64_t>& axes_dim, const std::vector<double>& theta) {
        return axial_rope_nd(axes_dim, theta);
      },
      py::arg("axes_dim"), py::kw_only(), py::arg("theta") = std::vector<double>{10000.0},
      R"doc(FLUX-style N-axis RoPE (diffusers' FluxPosEmbed, EmbedND): axis a owns axes_dim[a]
channels in order at theta_a^(-2i / axes_dim[a]), interleaved pairs. 1 to 3 axes, each even;
theta one base for every axis or one per axis. Ids: (3, n), row a = axis a.)doc");
  m.def(
      "axial_grid_ids",
      [](int64_t rows, int64_t cols, int64_t frame) {
        const auto ids = axial_grid_ids(rows, cols, frame);
        const auto n = static_cast<py::ssize_t>(ids.size() / 3);
        py::array_t<int64_t> out({py::ssize_t{3}, n});
        std::copy(ids.begin(), ids.end(), out.mutable_data());
        return out;
      },
      py::arg("rows"), py::arg("cols"), py::kw_only(), py::arg("frame") = 0,
      R"doc(Ids of a rows x cols grid of patches in row-major order, (3, rows * cols): row 0 the
frame, row 1 the patch row, row 2 its column.)doc");
  m.def(
      "axial_apply",
      [](py::handle x_obj, py::handle positions, const axial_rope& a, bool inverse) {
        const py::array x = as_array(x_obj, "x");
        require_float(x, "x");
        require_ndim(x, "x", {3}, "(T, H, D)");
        const int64_t T = x.shape(0), H = x.shape(1), D = x.shape(2);
        if (D != a.freqs.head_dim)
          fail("x must have head dim D = axial.head_dim = {}, got shape {}", a.freqs.head_dim,
               shape_str(x));
        const py::array pa = as_array(positions, "positions");
        auto pos = int_values(pa, "positions");
        if (pa.ndim() != 2 || pa.shape(0) != 3 || pa.shape(1) != T)
          fail("positions must have shape (3, T) = (3, {}) (one id per axis), got {}", T,
               shape_str(pa));
        require_min(pos, "positions", 0);
        const auto comp = axial_components(a);
        const rope_io io = io_for(x, false, "x");
        void* dst = const_cast<void*>(io.out.data());
        std::memcpy(dst, io.src.data(), static_cast<size_t>(x.nbytes()));
        if (is_f32(x))
          mrope_apply(a.freqs, comp, a.layout, rope_angle::exact, pos, static_cast<float*>(dst), T,
                      H, D, inverse);
        else
          mrope_apply(a.freqs, comp, a.layout, rope_angle::exact, pos, static_cast<double*>(dst), T,
                      H, D, inverse);
        return io.out;
      },
      py::arg("x"), py::arg("positions"), py::kw_only(), py::arg("axial"),
      py::arg("inverse") = false,
      R"doc(Rotate x (T, H, D) by axial RoPE at (3, T) ids (one per axis), exact angles; inverse
applies the transpose. Returns a new array.)doc");
}

}  // namespace

void bind_rope(py::module_& m) {
  bind_rope_config(m);
  bind_rope_apply(m);
  bind_layer_plan(m);
  bind_mrope(m);
  bind_axial(m);
}

}  // namespace posenc::py_bind
