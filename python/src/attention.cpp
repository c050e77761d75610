// python/src/attention.cpp: the attention engine's forward and backward
// (include/posenc/attention/attention.hpp) over NumPy arrays, one call per batch element.
//
// posenc.attention (python/posenc/__init__.py) collects the options into a dict `opts` with
// the keys read below; the forward and the backward read the same dict, so the backward runs
// with exactly the forward's parameters.
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include <fmt/ranges.h>

#include "common.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/encodings/axial_rope.hpp"
#include "posenc/formats/hf_config.hpp"

namespace posenc::py_bind {

namespace {

py::handle opt(const py::dict& opts, const char* key) {
  return opts.contains(key) ? py::handle(opts[key]) : py::handle(Py_None);
}

// Per-batch integer data: (B, n) or (n,) (shared by every batch element), or None.
std::vector<int64_t> per_batch_ints(py::handle obj, const char* name, int64_t B, int64_t n,
                                    bool batched, const char* nname, bool* shared) {
  *shared = true;
  if (obj.is_none()) return {};
  const py::array a = as_array(obj, name);
  auto v = int_values(a, name);
  if (a.ndim() == 1 && a.shape(0) == n) return v;
  if (batched && a.ndim() == 2 && a.shape(0) == B && a.shape(1) == n) {
    *shared = false;
    return v;
  }
  if (batched)
    fail("{} must have shape (B, {}) = ({}, {}) or ({},) = ({},), got {}", name, nname, B, n, nname,
         n, shape_str(a));
  fail("{} must have shape ({},) = ({},), got {}", name, nname, n, shape_str(a));
}

// M-RoPE ids: (3, n), or (B, 3, n) per batch element when batched. Rows temporal, height, width;
// -1 marks a padding slot (its rotation does not matter: it is masked).
std::vector<int64_t> mrope_ints(py::handle obj, const char* name, int64_t B, int64_t n,
                                bool batched, const char* nname, bool* shared) {
  const py::array a = as_array(obj, name);
  auto v = int_values(a, name);
  *shared = a.ndim() == 2;
  const bool one = a.ndim() == 2 && a.shape(0) == 3 && a.shape(1) == n;
  const bool per =
      batched && a.ndim() == 3 && a.shape(0) == B && a.shape(1) == 3 && a.shape(2) == n;
  if (!one && !per)
    fail("{} must have shape (3, {}) = (3, {}){} for an M-RoPE rope config, got {}", name, nname, n,
         batched ? fmt::format(" or (B, 3, {}) = ({}, 3, {})", nname, B, n) : "", shape_str(a));
  require_min(v, name, -1);
  for (size_t b = 0; n > 0 && b < v.size() / (3 * n); ++b)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t* id = v.data() + b * 3 * n + j;
      const int pads = (id[0] < 0) + (id[n] < 0) + (id[2 * n] < 0);
      if (pads != 0 && pads != 3)
        fail("{} must mark a padding slot with -1 in all three rows, got ({}, {}, {}) at index {}",
             name, id[0], id[n], id[2 * n], j);
    }
  return v;
}

// The temporal rows of (3, n) ids (one per batch element unless shared): the engine's ids.
std::vector<int64_t> temporal_rows(const std::vector<int64_t>& ids, int64_t n) {
  std::vector<int64_t> t;
  if (n == 0) return t;  // no tokens: no rows (and no count of batch elements to divide by)
  for (size_t b = 0; b < ids.size() / (3 * n); ++b)
    t.insert(t.end(), ids.begin() + b * 3 * n, ids.begin() + b * 3 * n + n);
  return t;
}

// Everything but q, k, v and the outputs, parsed once and shared by the batch elements.
struct attn_setup {
  bool batched = false;
  int64_t B = 1, T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  bool causal = false;
  std::optional<double> scale;
  int64_t window = 0;
  std::vector<int64_t> qpos, kpos, cu;  // per batch (B * T / B * S) unless *_shared
  bool qpos_shared = true, kpos_shared = true, pad_shared = true;
  std::vector<uint8_t> pad;
  std::optional<rope_freqs> freqs;
  rope_layout layout = rope_layout::half;
  rope_angle angle = rope_angle::exact;
  bool keys_rotated = false;
  bool keys_transformed = false;  // keys_rotated, for a q/k transform reached by name
  // M-RoPE (rope with mrope_section and (3, n) ids): the engine's hook 1 (mrope_scheme)
  // rotates q and k pair by pair at their ids, forward and backward. Its masks and biases see
  // the temporal row (qpos, kpos above, -1 = pad); the hook's ids read a pad's -1 as 0 (a
  // masked slot: its rotation does not matter).
  bool mrope = false;
  std::array<int64_t, 3> mrope_section{};
  bool mrope_interleaved = false;
  std::vector<int64_t> qids, kids;  // (3, T) / (3, S) per batch element unless *_shared
  py::object sinks;                 // (Hq,) sink logits (gpt-oss); None = off
  attention_products products = attention_products::f32;  // "products": "f32" or "bf16"
  // The schemes reached by name (schemes.hpp): (name, {param: value}) pairs from opts["named"],
  // validated by the engine against their declarations.
  std::vector<named_scheme> named;
  // Their tensor arguments, per scheme in named's order: (parameter, array as given). A tensor
  // with a row per token (declared (S, ...) or (T, ...)) takes a leading batch dimension when q
  // is batched: (B, S, Hq) for (S, Hq); the others are shared by the batch.
  std::vector<std::vector<std::pair<std::string, py::object>>> named_tensors;
};

// A float32 or float64 parameter table (TypeError naming it otherwise); shapes checked by the
// caller.
py::array float_table(py::handle obj, const char* name) {
  py::array a = as_array(obj, name);  // not const: the return moves it
  require_float(a, name);
  return a;
}

void parse_options(attn_setup& s, const py::dict& opts);

// q: (T, Hq, D) or (B, T, Hq, D); k, v: (S, Hkv, D) or (B, S, Hkv, D); same float dtype.
// half_kv: k and v are float16 or bfloat16 bits (uint16), checked by the caller; q float32 or
// (half_q) in k's dtype.
attn_setup setup(const py::array& q, const py::array& k, const py::array& v, const py::dict& opts,
                 bool half_kv = false, bool half_q = false) {
  attn_setup s;
  if (!half_q) require_float(q, "q");
  if (q.ndim() != 3 && q.ndim() != 4)
    fail("q must have shape (T, Hq, D) or (B, T, Hq, D), got {}", shape_str(q));
  s.batched = q.ndim() == 4;
  const char* kv_shape = s.batched ? "(B, S, Hkv, D)" : "(S, Hkv, D)";
  for (auto [a, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    if (!half_kv && !a->dtype().is(q.dtype()))
      type_fail(std::string(name) + " must have the dtype of q (" + dtype_str(q) + "), got " +
                dtype_str(*a));
    if (a->ndim() != q.ndim()) fail("{} must have shape {}, got {}", name, kv_shape, shape_str(*a));
  }
  const int o = s.batched ? 1 : 0;
  s.B = s.batched ? q.shape(0) : 1;
  s.T = q.shape(o), s.Hq = q.shape(o + 1), s.D = q.shape(o + 2);
  s.S = k.shape(o), s.Hkv = k.shape(o + 1);
  if ((s.batched && k.shape(0) != s.B) || k.shape(o + 2) != s.D)
    fail("k must have shape {} with {}D = {} of q {}, got {}", kv_shape, s.batched ? "B and " : "",
         s.D, shape_str(q), shape_str(k));
  for (py::ssize_t i = 0; i < k.ndim(); ++i)
    if (v.shape(i) != k.shape(i))
      fail("v must have the shape of k {}, got {}", shape_str(k), shape_str(v));
  parse_options(s, opts);
  return s;
}

// RoPE and M-RoPE: the frequencies, layout, angle and whether the ids have three rows.
void parse_rope(attn_setup& s, const py::dict& opts) {
  // Axial RoPE (posenc.axial_rope_2d / axial_rope_nd): per-pair frequencies over M-RoPE's
  // components, its own layout, (3, n) ids.
  if (py::isinstance<axial_rope>(opt(opts, "rope"))) {
    const auto& a = opt(opts, "rope").cast<const axial_rope&>();
    if (a.freqs.head_dim != s.D)
      fail("rope.head_dim (AxialRope) must equal the head dim D = {} of q, got {}", s.D,
           a.freqs.head_dim);
    const std::string layout = opt(opts, "rope_layout").cast<std::string>();
    if (layout != "half" && rope_layout_from_name(layout, "rope_layout") != a.layout)
      fail("rope_layout = '{}' disagrees with the AxialRope's layout '{}' (leave it out)", layout,
           rope_layout_name(a.layout));
    s.freqs = a.freqs;
    s.layout = a.layout;
    s.angle = rope_angle_from_name(opt(opts, "rope_angle").cast<std::string>(), "rope_angle");
    if (s.angle != rope_angle::exact && s.angle != rope_angle::f32)
      fail(
          "rope_angle must be exact or f32 with an AxialRope (the engines' pipelines model 1-D "
          "configs), got {}",
          rope_angle_name(s.angle));
    s.keys_rotated = opt(opts, "keys_rotated").cast<bool>();
    const int rows3 = s.batched ? 3 : 2;
    for (const char* name : {"q_positions", "k_positions"}) {
      const py::handle x = opt(opts, name);
      if (x.is_none() || as_array(x, name).ndim() != rows3)
        fail("an AxialRope needs {} of shape (3, n) (one id per axis; posenc.axial_grid_ids)",
             name);
    }
    s.mrope = true;
    s.mrope_section = a.section;
    s.mrope_interleaved = false;
    return;
  }
  if (!opt(opts, "rope").is_none()) {
    const auto& c = opt(opts, "rope").cast<const rope_config&>();
    if (c.head_dim != s.D)
      fail("rope.head_dim must equal the head dim D = {} of q, got {}", s.D, c.head_dim);
    int64_t seq_len = s.S;
    if (!opt(opts, "rope_seq_len").is_none()) {
      seq_len = opt(opts, "rope_seq_len").cast<int64_t>();
      if (seq_len < 0) fail("rope_seq_len must be >= 0, got {}", seq_len);
    }
    s.freqs = rope_frequencies(c, seq_len);
    s.layout = rope_layout_from_name(opt(opts, "rope_layout").cast<std::string>(), "rope_layout");
    s.angle = rope_angle_from_name(opt(opts, "rope_angle").cast<std::string>(), "rope_angle");
    s.keys_rotated = opt(opts, "keys_rotated").cast<bool>();
    // M-RoPE when the config has sections and the ids have three rows ((3, n), or (B, 3, n)
    // batched); 1-D ids with an M-RoPE config are text tokens, (p, p, p): plain RoPE at p.
    const py::handle qp = opt(opts, "q_positions"), kp = opt(opts, "k_positions");
    const int rows3 = s.batched ? 3 : 2;
    const bool q3 = !qp.is_none() && as_array(qp, "q_positions").ndim() == rows3;
    const bool k3 = !kp.is_none() && as_array(kp, "k_positions").ndim() == rows3;
    if ((q3 || k3) && c.mrope_section.empty())
      fail(
          "positions of shape (3, n) need an M-RoPE rope config (mrope_section in rope_scaling "
          "or rope_parameters), got a 1-D RoPE config");
    if (q3 != k3)
      fail("M-RoPE needs both q_positions (3, T) and k_positions (3, S), got {} and {}",
           q3 ? "(3, T)" : "(T,) or None", k3 ? "(3, S)" : "(S,) or None");
    if (q3) {
      if (c.mrope_section.size() != 3)
        fail("rope.mrope_section must have 3 entries (temporal, height, width), got {}",
             c.mrope_section.size());
      s.mrope = true;
      std::copy(c.mrope_section.begin(), c.mrope_section.end(), s.mrope_section.begin());
      s.mrope_interleaved = c.mrope_interleaved;
    }
  }
}

// Position ids (three rows for M-RoPE; the temporal row drives masks and biases).
void parse_positions(attn_setup& s, const py::dict& opts) {
  if (s.mrope) {
    s.qids = mrope_ints(opt(opts, "q_positions"), "q_positions", s.B, s.T, s.batched, "T",
                        &s.qpos_shared);
    s.kids = mrope_ints(opt(opts, "k_positions"), "k_positions", s.B, s.S, s.batched, "S",
                        &s.kpos_shared);
    s.qpos = temporal_rows(s.qids, s.T);
    s.kpos = temporal_rows(s.kids, s.S);
    for (auto* ids : {&s.qids, &s.kids})
      for (auto& id : *ids) id = std::max<int64_t>(id, 0);
  } else {
    s.qpos = per_batch_ints(opt(opts, "q_positions"), "q_positions", s.B, s.T, s.batched, "T",
                            &s.qpos_shared);
    s.kpos = per_batch_ints(opt(opts, "k_positions"), "k_positions", s.B, s.S, s.batched, "S",
                            &s.kpos_shared);
  }
}

// key_padding and cu_seqlens.
void parse_masks(attn_setup& s, const py::dict& opts) {
  if (!opt(opts, "key_padding").is_none()) {
    const py::array m = as_array(opt(opts, "key_padding"), "key_padding");
    if (m.dtype().kind() != 'b' && !m.dtype().is(py::dtype::of<uint8_t>()))
      type_fail("key_padding must be bool or uint8, got " + dtype_str(m));
    const bool one = m.ndim() == 1 && m.shape(0) == s.S;
    const bool per = s.batched && m.ndim() == 2 && m.shape(0) == s.B && m.shape(1) == s.S;
    if (!one && !per)
      fail("key_padding must have shape {}, got {}",
           s.batched ? fmt::format("(B, S) = ({}, {}) or (S,)", s.B, s.S)
                     : fmt::format("(S,) = ({},)", s.S),
           shape_str(m));
    s.pad_shared = one;
    const auto c = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(m);
    s.pad.assign(c.data(), c.data() + c.size());
    for (size_t j = 0; j < s.pad.size(); ++j)
      if (s.pad[j] > 1)
        fail("key_padding must hold 0 (pad) or 1 (real token), got {} at index {}", s.pad[j], j);
  }
  if (!opt(opts, "cu_seqlens").is_none()) {
    if (s.batched) fail("cu_seqlens needs unbatched q (T, Hq, D) and k, v (S, Hkv, D)");
    s.cu = int_values(opt(opts, "cu_seqlens"), "cu_seqlens");
    validate_cu_seqlens(s.cu, s.S, "cu_seqlens");
  }
}

// Attention sinks.
void parse_research(attn_setup& s, const py::dict& opts) {
  // Attention sinks (gpt-oss): one logit per query head in each row's softmax denominator.
  if (!opt(opts, "sinks").is_none()) {
    const py::array a = float_table(opt(opts, "sinks"), "sinks");
    if (a.ndim() != 1 || a.shape(0) != s.Hq)
      fail("sinks must have shape (Hq,) = ({},) (one logit per query head), got {}", s.Hq,
           shape_str(a));
    s.sinks = a;
  }
}

// Every option but q, k and v, for a call of s's shapes (B, T, S, Hq, Hkv, D set).
void parse_options(attn_setup& s, const py::dict& opts) {
  s.causal = opt(opts, "causal").is_none() ? false : opt(opts, "causal").cast<bool>();
  s.keys_transformed =
      !opt(opts, "keys_rotated").is_none() && opt(opts, "keys_rotated").cast<bool>();
  if (!opt(opts, "scale").is_none()) s.scale = opt(opts, "scale").cast<double>();
  if (!opt(opts, "window").is_none()) {
    s.window = opt(opts, "window").cast<int64_t>();
    if (s.window < 0) fail("window must be >= 0 (0 or None = no window), got {}", s.window);
  }
  parse_rope(s, opts);
  parse_positions(s, opts);
  parse_masks(s, opts);
  parse_research(s, opts);
  if (!opt(opts, "products").is_none()) {
    const auto x = opt(opts, "products").cast<std::string>();
    if (x != "f32" && x != "bf16") fail("products must be \"f32\" or \"bf16\", got \"{}\"", x);
    s.products = x == "bf16" ? attention_products::bf16 : attention_products::f32;
  }
  // The schemes reached by name: [(name, {param: number})], as posenc/__init__.py builds them
  // from the declarations' keywords.
  if (!opt(opts, "named").is_none())
    for (const py::handle item : opt(opts, "named").cast<py::list>()) {
      const auto pair = item.cast<py::tuple>();
      named_scheme n{pair[0].cast<std::string>(), {}};
      for (const auto& [key, value] : pair[1].cast<py::dict>())
        n.params.emplace_back(key.cast<std::string>(), value.cast<double>());
      s.named.push_back(std::move(n));
      s.named_tensors.emplace_back();
      if (pair.size() > 2)
        for (const auto& [key, value] : pair[2].cast<py::dict>())
          s.named_tensors.back().emplace_back(key.cast<std::string>(),
                                              py::reinterpret_borrow<py::object>(value));
    }
  // Which schemes may be on together (schemes.hpp's one rule) is checked by the engine, which
  // sees every scheme of the call (M-RoPE included).
}

// Real copies of the tables (small) and the params of batch element b.
// A tensor argument of a scheme reached by name, as its declaration shapes it for this call:
// the shape, whether it has a row per token (and so a batch dimension with batched q), and its
// values in Real.
// A float64 parameter (is_f64_tensor_param) has its values in values64, in every call; an
// optional one left out (the term derives it) has neither, but its gradient when learned.
template <typename Real>
struct named_arg {
  std::string scheme, name;
  std::vector<int64_t> shape;
  bool per_token = false, learned = false, wide = false, given = true;
  py::array_t<Real, py::array::c_style> values;
  py::array_t<double, py::array::c_style> values64;
  int64_t count() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
};

template <typename Real>
std::vector<named_arg<Real>> named_args(const attn_setup& s) {
  std::vector<named_arg<Real>> out;
  for (size_t i = 0; i < s.named.size(); ++i) {
    const scheme_decl& d = scheme_decl_of(s.named[i].name);
    for (const auto& prm : d.params) {  // an optional tensor left out: its gradient alone
      bool given = false;
      for (const auto& x : s.named_tensors[i]) given |= x.first == prm.name;
      if (!is_optional_tensor_param(prm) || given) continue;
      named_arg<Real> a;
      a.scheme = d.name, a.name = prm.name, a.learned = d.learned, a.given = false;
      a.wide = is_f64_tensor_param(prm);
      a.shape = tensor_param_shape(prm, s.T, s.S, s.Hq, s.Hkv, s.D);
      out.push_back(std::move(a));
    }
    for (const auto& [pname, obj] : s.named_tensors[i]) {
      const scheme_param* prm = nullptr;
      for (const auto& x : d.params)
        if (is_tensor_param(x) && pname == x.name) prm = &x;
      if (!prm) fail("{}: no tensor parameter '{}'", d.name, pname);
      named_arg<Real> a;
      a.scheme = d.name, a.name = pname, a.learned = d.learned;
      const std::string decl = prm->shape;
      a.per_token = decl.rfind("(S", 0) == 0 || decl.rfind("(T", 0) == 0;
      const py::array arr = float_table(obj, pname.c_str());
      // A free extent of the declared shape (FIRE's width) is the array's own.
      std::vector<int64_t> given(arr.shape(), arr.shape() + arr.ndim());
      if (a.per_token && s.batched && !given.empty()) given.erase(given.begin());
      a.shape = tensor_param_shape(*prm, s.T, s.S, s.Hq, s.Hkv, s.D, given);
      std::vector<int64_t> want = a.shape;
      if (a.per_token && s.batched) want.insert(want.begin(), s.B);
      bool same = arr.ndim() == static_cast<py::ssize_t>(want.size());
      for (size_t e = 0; same && e < want.size(); ++e) same = arr.shape(e) == want[e];
      if (!same)
        fail("{} must have shape {} = ({}{}){}, got {}", pname, prm->shape, fmt::join(want, ", "),
             want.size() == 1 ? "," : "",
             a.per_token && s.batched ? " (a row per token of each batch element)" : "",
             shape_str(arr));
      a.wide = is_f64_tensor_param(*prm);
      if (a.wide)
        a.values64 = contiguous_as<double>(arr);
      else
        a.values = contiguous_as<Real>(arr);
      out.push_back(std::move(a));
    }
  }
  return out;
}

// The gradients of the named schemes' learned tensors: per batch element, then written per
// element (a row per token) or summed over the batch in order (shared).
template <typename Real>
struct named_grads {
  const std::vector<named_arg<Real>>& args;
  std::vector<std::vector<Real>> one;      // per argument, of one batch element (empty: not wanted)
  std::vector<std::vector<double>> one64;  // the same of a float64 parameter
  std::vector<std::vector<double>> all;    // per argument, every element's or the sum
  named_grads(const std::vector<named_arg<Real>>& a, bool param_grads, int64_t B) : args(a) {
    for (const auto& x : args) {
      const bool want = param_grads && x.learned;
      one.emplace_back(want && !x.wide ? x.count() : 0);
      one64.emplace_back(want && x.wide ? x.count() : 0);
      all.emplace_back(want ? (x.per_token ? B : 1) * x.count() : 0, 0.0);
    }
  }
  void bind(attention_grads<Real>& g) {
    for (size_t x = 0; x < args.size(); ++x)
      if (!one[x].empty() || !one64[x].empty()) g.named.push_back({args[x].name, one[x], one64[x]});
  }
  void add(int64_t b) {
    for (size_t x = 0; x < args.size(); ++x) {
      if (all[x].empty()) continue;
      double* to = all[x].data() + (args[x].per_token ? b * args[x].count() : 0);
      for (size_t e = 0; e < one[x].size(); ++e) to[e] += one[x][e];
      for (size_t e = 0; e < one64[x].size(); ++e) to[e] += one64[x][e];
    }
  }
  // r["d<name>"]: (B, shape) for a per-token tensor with batched q, else shape.
  template <typename ToArray>
  void put(py::dict& r, bool batched, const ToArray& to_array) const {
    for (size_t x = 0; x < args.size(); ++x) {
      if (all[x].empty()) continue;
      std::vector<py::ssize_t> shape(args[x].shape.begin(), args[x].shape.end());
      if (args[x].per_token && batched)
        shape.insert(shape.begin(), static_cast<py::ssize_t>(all[x].size() / args[x].count()));
      r[("d" + args[x].name).c_str()] = to_array(all[x], shape, !args[x].wide);
    }
  }
};

template <typename Real>
struct attn_call {
  py::array_t<Real, py::array::c_style> sinks;
  std::vector<named_arg<Real>> named;
  attention_params<Real> p;

  attn_call(const attn_setup& s) {
    p.T = s.T, p.S = s.S, p.Hq = s.Hq, p.Hkv = s.Hkv, p.D = s.D;
    p.scale = s.scale;
    p.causal = s.causal;
    p.window = s.window;
    p.cu_seqlens = s.cu;
    p.products = s.products;
    if (s.sinks) {
      sinks = contiguous_as<Real>(s.sinks);
      p.sinks = std::span<const Real>(sinks.data(), sinks.size());
    }
    // The q/k transform maps keys given transformed (keys_rotated) by q alone.
    p.pos.keys_transformed = s.keys_transformed;
    p.pos.named = s.named;
    if (s.freqs && !s.mrope) p.pos.named.push_back(rope_scheme(*s.freqs, s.layout, s.angle));
    if (s.mrope) {  // the ids per batch element: select()
      mrope_at = p.pos.named.size();
      p.pos.named.push_back({});
    }
    named = named_args<Real>(s);
  }
  size_t mrope_at = SIZE_MAX;  // M-RoPE's entry in p.pos.named, when on

  // The named tensors of batch element b into p.pos.named.
  void select_named(int64_t b) {
    for (auto& n : p.pos.named) n.tensors.clear();
    for (const auto& a : named) {
      if (!a.given) continue;
      const int64_t n = a.count(), at = a.per_token ? b * n : 0;
      named_tensor t{a.name, a.shape, {}, {}};
      if (a.wide)
        t.f64 = std::span<const double>(a.values64.data() + at, n);
      else if constexpr (std::is_same_v<Real, float>)
        t.f32 = std::span<const float>(a.values.data() + at, n);
      else
        t.f64 = std::span<const double>(a.values.data() + at, n);
      for (auto& ns : p.pos.named)
        if (ns.name == a.scheme) ns.tensors.push_back(t);
    }
  }

  // Positions (and M-RoPE's ids) and padding of batch element b.
  void select(const attn_setup& s, int64_t b) {
    auto part = [](const std::vector<int64_t>& v, bool shared, int64_t b, int64_t n) {
      return v.empty() ? std::span<const int64_t>()
                       : std::span<const int64_t>(v.data() + (shared ? 0 : b * n), n);
    };
    p.q_positions = part(s.qpos, s.qpos_shared, b, s.T);
    p.k_positions = part(s.kpos, s.kpos_shared, b, s.S);
    p.key_padding =
        s.pad.empty() ? std::span<const uint8_t>()
                      : std::span<const uint8_t>(s.pad.data() + (s.pad_shared ? 0 : b * s.S), s.S);
    select_named(b);
    if (s.mrope)
      p.pos.named[mrope_at] = mrope_scheme(*s.freqs, s.mrope_section, s.mrope_interleaved, s.layout,
                                           s.angle, part(s.qids, s.qpos_shared, b, 3 * s.T),
                                           part(s.kids, s.kpos_shared, b, 3 * s.S));
  }
};

template <typename Real>
py::object forward(const py::array& q0, const py::array& k0, const py::array& v0,
                   const py::dict& opts, bool return_lse) {
  const attn_setup s = setup(q0, k0, v0, opts);
  // Contiguous inputs are used as they are; a strided view is copied once.
  const auto q = contiguous_as<Real>(q0), k = contiguous_as<Real>(k0), v = contiguous_as<Real>(v0);
  std::vector<py::ssize_t> oshape(q0.shape(), q0.shape() + q0.ndim());
  std::vector<py::ssize_t> lshape(oshape.begin(), oshape.end() - 1);
  py::array_t<Real> out(oshape), lse(lshape);
  attn_call<Real> c(s);
  const int64_t qn = s.T * s.Hq * s.D, kn = s.S * s.Hkv * s.D;
  Real* o = out.mutable_data();
  Real* l = lse.mutable_data();
  {
    py::gil_scoped_release nogil;
    for (int64_t b = 0; b < s.B; ++b) {
      c.select(s, b);
      c.p.q = q.data() + b * qn, c.p.k = k.data() + b * kn, c.p.v = v.data() + b * kn;
      c.p.out = o + b * qn, c.p.lse = l + b * s.T * s.Hq;
      attention_forward(c.p);
    }
  }
  if (return_lse) return py::make_tuple(out, lse);
  return py::object(out);
}

// Half-precision keys and values: k, v float16 (or bfloat16 bits in uint16 with
// kv_dtype="bf16"), q float32 or in k's dtype; computed in float32 (attention_params::kv and
// q_storage) or with bfloat16 products, nothing widened here.
py::object forward_half(const py::array& q0, const py::array& k0, const py::array& v0,
                        const py::dict& opts, bool return_lse, kv_storage kv) {
  const bool half_q = q0.dtype().is(k0.dtype());
  if (!is_f32(q0) && !half_q)
    type_fail("half-precision k and v (" + name(kv) +
              ") are computed in float32 and need float32 q (or q in their dtype), got " +
              dtype_str(q0));
  const attn_setup s = setup(q0, k0, v0, opts, true, half_q);
  // A 16-bit q as stored, like k and v; else float32.
  const py::array q16 = half_q ? py::array::ensure(q0, py::array::c_style) : py::array();
  const auto q = half_q ? py::array_t<float, py::array::c_style>() : contiguous_as<float>(q0);
  // The 16-bit words as stored (a forcecast to uint16 would convert float16 values).
  const py::array k = py::array::ensure(k0, py::array::c_style),
                  v = py::array::ensure(v0, py::array::c_style);
  const auto* kw = static_cast<const uint16_t*>(k.data());
  const auto* vw = static_cast<const uint16_t*>(v.data());
  std::vector<py::ssize_t> oshape(q0.shape(), q0.shape() + q0.ndim());
  std::vector<py::ssize_t> lshape(oshape.begin(), oshape.end() - 1);
  py::array_t<float> out(oshape), lse(lshape);
  attn_call<float> c(s);
  c.p.kv = kv;
  if (half_q) c.p.q_storage = kv;
  const int64_t qn = s.T * s.Hq * s.D, kn = s.S * s.Hkv * s.D;
  float* o = out.mutable_data();
  float* l = lse.mutable_data();
  {
    py::gil_scoped_release nogil;
    for (int64_t b = 0; b < s.B; ++b) {
      c.select(s, b);
      if (half_q)
        c.p.q16 = static_cast<const uint16_t*>(q16.data()) + b * qn;
      else
        c.p.q = q.data() + b * qn;
      c.p.k16 = kw + b * kn, c.p.v16 = vw + b * kn;
      c.p.out = o + b * qn, c.p.lse = l + b * s.T * s.Hq;
      attention_forward(c.p);
    }
  }
  if (return_lse) return py::make_tuple(out, lse);
  return py::object(out);
}

// out, dout and lse have q's dtype and shape (lse without D).
void check_backward_inputs(const py::array& q0, const py::array& out0, const py::array& lse0,
                           const py::array& dout0) {
  for (auto [a, name] : {std::pair{&out0, "out"}, std::pair{&dout0, "dout"}}) {
    if (!a->dtype().is(q0.dtype()))
      type_fail(std::string(name) + " must have the dtype of q (" + dtype_str(q0) + "), got " +
                dtype_str(*a));
    bool same = a->ndim() == q0.ndim();
    for (py::ssize_t i = 0; same && i < q0.ndim(); ++i) same = a->shape(i) == q0.shape(i);
    if (!same) fail("{} must have the shape of q {}, got {}", name, shape_str(q0), shape_str(*a));
  }
  if (!lse0.dtype().is(q0.dtype()))
    type_fail("lse must have the dtype of q (" + dtype_str(q0) + "), got " + dtype_str(lse0));
  bool lse_ok = lse0.ndim() == q0.ndim() - 1;
  for (py::ssize_t i = 0; lse_ok && i < lse0.ndim(); ++i) lse_ok = lse0.shape(i) == q0.shape(i);
  if (!lse_ok)
    fail("lse must have shape {} (q's without D), got {}", shape_str(q0), shape_str(lse0));
}

template <typename Real>
py::dict backward(const py::array& q0, const py::array& k0, const py::array& v0,
                  const py::array& out0, const py::array& lse0, const py::array& dout0,
                  const py::dict& opts, bool param_grads) {
  const attn_setup s = setup(q0, k0, v0, opts);
  check_backward_inputs(q0, out0, lse0, dout0);

  const auto q = contiguous_as<Real>(q0), k = contiguous_as<Real>(k0), v = contiguous_as<Real>(v0);
  const auto out = contiguous_as<Real>(out0), lse = contiguous_as<Real>(lse0),
             dout = contiguous_as<Real>(dout0);
  py::array_t<Real> dq(std::vector<py::ssize_t>(q0.shape(), q0.shape() + q0.ndim())),
      dk(std::vector<py::ssize_t>(k0.shape(), k0.shape() + k0.ndim())),
      dv(std::vector<py::ssize_t>(k0.shape(), k0.shape() + k0.ndim()));
  attn_call<Real> c(s);
  const bool want_sinks = param_grads && s.sinks;
  // Per batch element gradients of the shared parameters, summed over the batch in order.
  std::vector<Real> dsi_b(want_sinks ? s.Hq : 0);
  std::vector<double> dsi(dsi_b.size(), 0.0);
  named_grads<Real> ng(c.named, param_grads, s.B);
  const int64_t qn = s.T * s.Hq * s.D, kn = s.S * s.Hkv * s.D;
  Real* dqp = dq.mutable_data();
  Real* dkp = dk.mutable_data();
  Real* dvp = dv.mutable_data();
  {
    py::gil_scoped_release nogil;
    for (int64_t b = 0; b < s.B; ++b) {
      c.select(s, b);
      c.p.q = q.data() + b * qn, c.p.k = k.data() + b * kn, c.p.v = v.data() + b * kn;
      attention_grads<Real> g;
      g.out = out.data() + b * qn, g.lse = lse.data() + b * s.T * s.Hq;
      // The engine validates p.out and reads it as the forward's output; it does not write it.
      c.p.out = const_cast<Real*>(g.out);
      g.dout = dout.data() + b * qn;
      g.dq = dqp + b * qn, g.dk = dkp + b * kn, g.dv = dvp + b * kn;
      if (want_sinks) g.dsinks = dsi_b.data();
      ng.bind(g);
      attention_backward(c.p, g);
      ng.add(b);
      for (size_t i = 0; i < dsi.size(); ++i) dsi[i] += dsi_b[i];
    }
  }
  py::dict r;
  r["dq"] = dq, r["dk"] = dk, r["dv"] = dv;
  auto to_array = [](const std::vector<double>& v, std::vector<py::ssize_t> shape, bool as_real) {
    if (!as_real) {
      py::array_t<double> a(shape);
      std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(double));
      return py::array(a);
    }
    py::array_t<Real> a(shape);
    for (size_t i = 0; i < v.size(); ++i) a.mutable_data()[i] = static_cast<Real>(v[i]);
    return py::array(a);
  };
  if (want_sinks) r["dsinks"] = to_array(dsi, {s.Hq}, true);
  ng.put(r, s.batched, to_array);
  return r;
}

}  // namespace

// posenc.KVCache.attend (kv_cache.cpp): q (T, Hq, D) over the S keys of a library cache, with
// posenc.attention's options in opts; rope, keys_rotated, k_positions, key_padding and
// cu_seqlens are the cache's (refused here or by attention_forward_cached). q_positions: None =
// the last T cache positions (attention_forward_cached's default), (T,) ids, or with M-RoPE
// (rows = 3 ids per token) (3, T) ids (a 1-D id p is a text token, (p, p, p)). `run` calls
// attention_forward_cached on the params, without the GIL.
template <typename Real>
py::object attend_cached(const py::array& q0, const py::dict& opts, int64_t S, int64_t Hkv,
                         int64_t rows, const std::function<void(attention_params<Real>&)>& run,
                         bool return_lse) {
  if (!q0.dtype().is(py::dtype::of<Real>()))
    type_fail("q must be " + dtype_name(py::dtype::of<Real>()) +
              " (the dtype the cache computes in), got " + dtype_str(q0));
  if (q0.ndim() != 3) fail("q must have shape (T, Hq, D), got {}", shape_str(q0));
  for (const char* own : {"rope", "k_positions"})
    if (!opt(opts, own).is_none())
      fail("attend: {} is the cache's (give rope to KVCache(...); keys bring their positions)",
           own);
  attn_setup s;
  s.T = q0.shape(0), s.Hq = q0.shape(1), s.D = q0.shape(2), s.S = S, s.Hkv = Hkv;
  // The options less q_positions (read below), in a copy: py::dict(opts) would be opts itself,
  // and clearing its q_positions there dropped the caller's ids.
  py::dict rest = opts.attr("copy")();
  rest["q_positions"] = py::none();
  parse_options(s, rest);
  // q ids: (T,), or (rows, T) row-major for a transform with several ids per token.
  std::vector<int64_t> qpos, qids;
  const py::handle qp = opt(opts, "q_positions");
  if (!qp.is_none()) {
    const py::array a = as_array(qp, "q_positions");
    const bool one = a.ndim() == 1 && a.shape(0) == s.T;
    const bool per = rows > 1 && a.ndim() == 2 && a.shape(0) == rows && a.shape(1) == s.T;
    if (!one && !per)
      fail("q_positions must have shape (T,) = ({},){}, got {}", s.T,
           rows > 1 ? fmt::format(" or ({}, T) = ({}, {})", rows, rows, s.T) : "", shape_str(a));
    const auto v = int_values(a, "q_positions");
    qpos.assign(v.begin(), v.begin() + s.T);
    for (int64_t r = 0; rows > 1 && r < rows; ++r)
      qids.insert(qids.end(), v.begin() + (one ? 0 : r * s.T), v.begin() + (one ? 1 : r + 1) * s.T);
  }
  const auto q = contiguous_as<Real>(q0);
  py::array_t<Real> out(std::vector<py::ssize_t>{s.T, s.Hq, s.D}),
      lse(std::vector<py::ssize_t>{s.T, s.Hq});
  attn_call<Real> c(s);
  c.select_named(0);       // a named scheme's tensors (a row per cached token: (S, ...))
  c.p.S = 0, c.p.Hkv = 0;  // the cache's
  c.p.q = q.data(), c.p.out = out.mutable_data(), c.p.lse = lse.mutable_data();
  c.p.q_positions = qpos;
  if (!qids.empty()) c.p.pos.named.push_back(mrope_query_ids(qids));
  {
    py::gil_scoped_release nogil;
    run(c.p);
  }
  if (return_lse) return py::make_tuple(out, lse);
  return py::object(out);
}
template py::object attend_cached(const py::array&, const py::dict&, int64_t, int64_t, int64_t,
                                  const std::function<void(attention_params<float>&)>&, bool);
template py::object attend_cached(const py::array&, const py::dict&, int64_t, int64_t, int64_t,
                                  const std::function<void(attention_params<double>&)>&, bool);

// kv_cache.cpp: when obj is a posenc KV cache, attention of q over it (attend_cached); else a
// null object.
py::object kv_cache_attend(py::handle obj, const py::array& q, const py::dict& opts,
                           bool return_lse);

void bind_attention(py::module_& m) {
  m.def(
      "_schemes_json", [] { return schemes_json(); },
      "The declaration of every position scheme (posenc schemes --format json).");
  m.def(
      "_attention_forward",
      [](py::handle q, py::handle k, py::handle v, const py::dict& opts, bool return_lse) {
        const py::array qa = as_array(q, "q");
        // k: posenc.KVCache's library cache (its attend): keys and values are the cache's.
        if (py::object r = kv_cache_attend(k, qa, opts, return_lse)) return r;
        const py::array ka = as_array(k, "k"), va = as_array(v, "v");
        // q in half precision beside k and v of its dtype (forward_half checks the rest).
        const bool q16 =
            qa.dtype().is(py::dtype("float16")) || qa.dtype().is(py::dtype::of<uint16_t>());
        if (q16 && !qa.dtype().is(ka.dtype()))
          type_fail(
              "a 16-bit q must have the dtype of k and v (read with the same kv_dtype); "
              "got q " +
              dtype_str(qa) + " and k " + dtype_str(ka));
        if (!q16) require_float(qa, "q");
        // k, v in half precision: float16, or uint16 holding bfloat16 bits with kv_dtype="bf16".
        const std::string kvd =
            opt(opts, "kv_dtype").is_none() ? "" : opt(opts, "kv_dtype").cast<std::string>();
        if (!kvd.empty() && kvd != "f16" && kvd != "bf16")
          fail("kv_dtype must be None, \"f16\" or \"bf16\", got \"{}\"", kvd);
        const bool k16 = ka.dtype().is(py::dtype("float16")),
                   ku16 = ka.dtype().is(py::dtype::of<uint16_t>());
        if (k16 || ku16 || !kvd.empty()) {
          if (!va.dtype().is(ka.dtype()))
            type_fail("v must have the dtype of k (" + dtype_str(ka) + "), got " + dtype_str(va));
          if (k16 && (kvd.empty() || kvd == "f16"))
            return forward_half(qa, ka, va, opts, return_lse, kv_storage::f16);
          if (ku16 && kvd == "bf16")
            return forward_half(qa, ka, va, opts, return_lse, kv_storage::bf16);
          type_fail("kv_dtype=\"" + (kvd.empty() ? std::string("None") : kvd) +
                    "\" does not match k's dtype " + dtype_str(ka) +
                    ": float16 k and v are read as f16; bfloat16 bits travel as uint16 with "
                    "kv_dtype=\"bf16\"");
        }
        if (is_f32(qa)) return forward<float>(qa, ka, va, opts, return_lse);
        return forward<double>(qa, ka, va, opts, return_lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("opts"), py::arg("return_lse") = false);
  m.def(
      "_attention_backward",
      [](py::handle q, py::handle k, py::handle v, py::handle out, py::handle lse, py::handle dout,
         const py::dict& opts, bool param_grads) {
        const py::array qa = as_array(q, "q"), ka = as_array(k, "k"), va = as_array(v, "v");
        const py::array oa = as_array(out, "out"), la = as_array(lse, "lse"),
                        da = as_array(dout, "dout");
        require_float(qa, "q");
        if (is_f32(qa)) return backward<float>(qa, ka, va, oa, la, da, opts, param_grads);
        return backward<double>(qa, ka, va, oa, la, da, opts, param_grads);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("dout"),
      py::arg("opts"), py::arg("param_grads") = true);
}

}  // namespace posenc::py_bind
