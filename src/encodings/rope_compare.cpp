// rope_compare: another engine's RoPE output against posenc's under each angle pipeline, with
// the tolerances derived in include/posenc/encodings/rope_compare.hpp and the hint search.
// Every candidate is posenc's own rope_apply on the engine's input (no second implementation
// of the rotation here); candidates are built a block of tokens at a time and compared while
// still in cache, and a hint stops at its first entry out of tolerance.
#include "posenc/encodings/rope_compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "posenc/core/error.hpp"

namespace posenc {

namespace {

constexpr double kU64 = 0x1p-53, kU32 = 0x1p-24;
constexpr int64_t kMaxShift = 64;
constexpr rope_angle kModes[4] = {rope_angle::exact, rope_angle::f32, rope_angle::hf_f32,
                                  rope_angle::ggml_f32};

// The per-pair rounding bound rho of a named pipeline (header): cos / sin 4u, the engine's
// rotation and casts 4 u_d, posenc's rotation 2 u_w; rtol = 2 rho on the vector's scale.
double pipeline_rtol(double u_data, double u_work) {
  return 2 * (4 * kU32 + 4 * u_data + 2 * u_work);
}

// The angle allowance eps (theta_i may be off by eps omega_i p on the vector's scale).
double pipeline_eps(rope_angle a) {
  switch (a) {
    case rope_angle::exact:
      return 10 * kU64;
    case rope_angle::f32:
    case rope_angle::hf_f32:
      return 20 * kU32;
    case rope_angle::ggml_f32:
      return 0;
  }
  return 0;
}

// One candidate to compare against: values given, or posenc's output recomputed from x.
struct candidate {
  const double* given = nullptr;  // (N, H, D) or null: recompute
  rope_angle angle = rope_angle::exact;
  rope_layout layout = rope_layout::half;
  double scale = 1;   // multiplies the recomputed output (1 / a: without the attention factor)
  int64_t shift = 0;  // added to every position
  bool wide = true;   // recompute in double (else in float from x rounded to float)
  double rtol = 0, eps = 0;
};

struct stats {
  double max_error = 0, max_ratio = 0, tol = 0, ang = 0, sum_error = 0;
  int64_t worst = 0, identical = 0, compared = 0;
};

class comparer {
 public:
  // pos: (B * T,) or empty. The frequencies are those of seq_len, else of max position + 1
  // (like rope_apply's callers and transformers' forward).
  comparer(const rope_compare_input& in, std::vector<int64_t> pos)
      : in_(in), pos_store_(std::move(pos)) {
    HD_ = in.H * in.D;
    if (in.cfg) {
      int64_t seq_len = in.seq_len;
      if (seq_len < 0) {
        seq_len = 0;
        for (int64_t p : pos_store_) seq_len = std::max(seq_len, p + 1);
      }
      f_ = rope_frequencies(*in.cfg, seq_len);
    }
  }

  std::span<const int64_t> pos_() const { return pos_store_; }
  bool has_freqs() const { return f_.has_value(); }
  const rope_freqs& freqs() const { return *f_; }
  int64_t R() const { return f_ ? f_->rotary_dim : in_.D; }

  // The pair of channel c in layout l, or -1 for a pass-through channel (or no config).
  int64_t pair_of(int64_t c, rope_layout l) const {
    if (!f_ || c >= f_->rotary_dim) return -1;
    return l == rope_layout::interleaved ? c / 2 : c % (f_->rotary_dim / 2);
  }

  // Compares tokens [n0, n1) against `cand`. early_exit: stop at the first entry out of
  // tolerance. by_t (T,) and by_pair (R/2,) receive the maxima of the ratios when given.
  stats run(const candidate& cand, int64_t n0, int64_t n1, bool early_exit,
            std::vector<double>* by_t = nullptr, std::vector<double>* by_pair = nullptr) const {
    stats st;
    const int64_t HD = HD_, D = in_.D, H = in_.H;
    const int64_t bt = early_exit ? 8 : std::max<int64_t>(1, 65536 / std::max<int64_t>(1, HD));
    std::vector<double> buf;
    std::vector<float> fbuf;
    std::vector<int64_t> pb;
    const bool angle_term = f_.has_value() && !pos_().empty() && cand.eps > 0;
    std::vector<int64_t> pairs(static_cast<size_t>(D));
    for (int64_t c = 0; c < D; ++c) pairs[c] = pair_of(c, cand.layout);
    for (int64_t b0 = n0; b0 < n1; b0 += bt) {
      const int64_t nb = std::min(bt, n1 - b0);
      const double* e = nullptr;
      pb.resize(static_cast<size_t>(nb));
      for (int64_t k = 0; k < nb && !pos_().empty(); ++k) pb[k] = pos_()[b0 + k] + cand.shift;
      if (cand.given) {
        e = cand.given + b0 * HD;
      } else {
        buf.resize(static_cast<size_t>(nb * HD));
        const double* x = in_.x.data() + b0 * HD;
        if (cand.wide) {
          std::copy(x, x + nb * HD, buf.begin());
          rope_apply(*f_, cand.layout, cand.angle, pb, buf.data(), nb, H, D);
        } else {
          fbuf.resize(static_cast<size_t>(nb * HD));
          for (int64_t i = 0; i < nb * HD; ++i) fbuf[i] = static_cast<float>(x[i]);
          rope_apply(*f_, cand.layout, cand.angle, pb, fbuf.data(), nb, H, D);
          for (int64_t i = 0; i < nb * HD; ++i) buf[i] = fbuf[i];
        }
        if (cand.scale != 1)
          for (auto& v : buf) v *= cand.scale;
        e = buf.data();
      }
      const double* a = in_.actual.data() + b0 * HD;
      for (int64_t k = 0; k < nb; ++k) {
        const int64_t n = b0 + k;
        const double p = pos_().empty() ? 0.0 : static_cast<double>(pb[k]);
        for (int64_t h = 0; h < H; ++h) {
          const double* ev = e + (k * H + h) * D;
          const double* av = a + (k * H + h) * D;
          double scale = 0;
          for (int64_t c = 0; c < D; ++c)
            if (std::isfinite(ev[c])) scale = std::max(scale, std::fabs(ev[c]));
          for (int64_t c = 0; c < D; ++c) {
            const double x = av[c], y = ev[c];
            double err = 0, ratio = 0, tol = 0, ang = 0;
            ++st.compared;
            if (x == y || (std::isnan(x) && std::isnan(y))) {
              ++st.identical;
            } else {
              err = std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)
                        ? std::numeric_limits<double>::infinity()
                        : std::fabs(x - y);
              if (angle_term && pairs[c] >= 0)
                ang = cand.eps * f_->inv_freq[static_cast<size_t>(pairs[c])] * p;
              tol = in_.atol + (cand.rtol + ang) * scale;
              ratio = tol > 0 ? err / tol : std::numeric_limits<double>::infinity();
            }
            st.max_error = std::max(st.max_error, err);
            st.sum_error += err;
            if (ratio > st.max_ratio || st.compared == 1) {
              st.max_ratio = ratio;
              st.worst = (n * H + h) * D + c;
              if (pairs[c] >= 0 && angle_term)
                ang = cand.eps * f_->inv_freq[static_cast<size_t>(pairs[c])] * p;
              st.tol = in_.atol + (cand.rtol + ang) * scale;
              st.ang = ang;
            }
            if (by_t) {
              auto& m = (*by_t)[static_cast<size_t>(n % in_.T)];
              m = std::max(m, ratio);
            }
            if (by_pair && pairs[c] >= 0) {
              auto& m = (*by_pair)[static_cast<size_t>(pairs[c])];
              m = std::max(m, ratio);
            }
            if (early_exit && ratio > 1) return st;
          }
        }
      }
    }
    return st;
  }

 private:
  const rope_compare_input& in_;
  int64_t HD_ = 0;
  std::optional<rope_freqs> f_;
  std::vector<int64_t> pos_store_;
};

rope_compare_fit fit_of(const candidate& c, const stats& s, std::string hint = "",
                        std::string detail = "") {
  rope_compare_fit f;
  f.angle = c.angle;
  f.hint = std::move(hint);
  f.detail = std::move(detail);
  f.rtol = c.rtol;
  f.eps = c.eps;
  f.max_error = s.max_error;
  f.max_ratio = s.max_ratio;
  f.sum_error = s.sum_error;
  f.identical = s.identical;
  f.compared = s.compared;
  f.ok = s.max_ratio <= 1;
  return f;
}

// Ranks two fits that are both within tolerance: more entries bit-identical first (the
// pipeline the engine follows reproduces every entry whose angle and rotation order agree),
// then the smaller summed error.
bool closer(const rope_compare_fit& a, const rope_compare_fit& b) {
  if (a.identical != b.identical) return a.identical > b.identical;
  return a.sum_error < b.sum_error;
}

void check_u(double u, const char* name) {
  if (!(u > 0 && u < 1)) fail("{} must be a unit roundoff in (0, 1), got {}", name, u);
}

std::string index_str(int64_t flat, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t c = flat % D, h = flat / D % H, t = flat / (D * H) % T, b = flat / (D * H * T);
  return B > 1 ? fmt::format("({}, {}, {}, {})", b, t, h, c) : fmt::format("({}, {}, {})", t, h, c);
}

const char* other_layout(rope_layout l) {
  return l == rope_layout::half ? "interleaved" : "half";
}

}  // namespace

std::string rope_angle_description(rope_angle a) {
  switch (a) {
    case rope_angle::exact:
      return "exact angles (exact)";
    case rope_angle::f32:
      return "plain float32 angles (f32)";
    case rope_angle::hf_f32:
      return "transformers' float32 (hf_f32)";
    case rope_angle::ggml_f32:
      return "ggml's float32 (ggml_f32)";
  }
  return "";
}

namespace {

// Every argument against its contract (rope_compare.hpp), in the order the messages are tested.
void check_compare_input(const rope_compare_input& in) {
  if (in.B < 1 || in.T < 1 || in.H < 1 || in.D < 1)
    fail("actual must have shape (B, T, H, D) with every size >= 1, got ({}, {}, {}, {})", in.B,
         in.T, in.H, in.D);
  const int64_t N = in.B * in.T, size = N * in.H * in.D;
  if (static_cast<int64_t>(in.actual.size()) != size)
    fail("actual must hold B * T * H * D = {} values, got {}", size, in.actual.size());
  if (!in.expected.empty() && static_cast<int64_t>(in.expected.size()) != size)
    fail("expected must have the shape of actual ({} values), got {}", size, in.expected.size());
  if (!in.x.empty() && static_cast<int64_t>(in.x.size()) != size)
    fail("x must have the shape of actual ({} values), got {}", size, in.x.size());
  if (!in.positions.empty() && static_cast<int64_t>(in.positions.size()) != N)
    fail("positions must hold one position per token, B * T = {}, got {}", N, in.positions.size());
  for (size_t i = 0; i < in.positions.size(); ++i)
    if (in.positions[i] < 0) fail("positions must be >= 0, got {} at token {}", in.positions[i], i);
  check_u(in.actual_u, "actual_u");
  check_u(in.expected_u, "expected_u");
  if (in.rtol && !(std::isfinite(*in.rtol) && *in.rtol >= 0))
    fail("rtol must be finite and >= 0, got {}", *in.rtol);
  if (!(std::isfinite(in.atol) && in.atol >= 0))
    fail("atol must be finite and >= 0, got {}", in.atol);
  if (in.cfg && in.cfg->head_dim != in.D)
    fail("actual must have head dim D = cfg head_dim = {}, got D = {}", in.cfg->head_dim, in.D);
  if (in.expected.empty() && (in.x.empty() || !in.cfg))
    fail("compare needs expected, or x and cfg to recompute posenc's output");
  if (in.angle == rope_angle::ggml_f32)
    for (int64_t p : in.positions)
      if (p > INT32_MAX) fail("positions must be <= 2^31 - 1 in angle mode ggml_f32, got {}", p);
}

// What the steps of rope_compare share: the input, the comparer, the positions (given or
// 0 .. T-1 per sequence), the working precision and the largest position.
struct compare_state {
  const rope_compare_input& in;
  const comparer& cmp;
  const std::vector<int64_t>& pos;
  double u_work = kU64;
  int64_t max_pos = 0;

  // The candidate of mode m as given (recomputed from x).
  candidate mode_candidate(rope_angle m) const {
    candidate c;
    c.angle = m;
    c.layout = in.layout;
    c.wide = m == rope_angle::exact || u_work == kU64;
    c.rtol = in.rtol.value_or(m == rope_angle::exact ? 8 * std::max(in.actual_u, kU64)
                                                     : pipeline_rtol(in.actual_u, u_work));
    c.eps = pipeline_eps(m);
    return c;
  }
  bool ggml_ok() const { return max_pos + kMaxShift <= INT32_MAX; }
};

// The reference: expected as given, else posenc's output in mode `angle` recomputed. Fills
// r's error figures; true when within tolerance.
bool compare_reference(const compare_state& st, rope_compare_result& r) {
  const auto& in = st.in;
  const int64_t N = in.B * in.T;
  candidate ref = st.mode_candidate(in.angle);
  if (!in.expected.empty()) {
    ref.given = in.expected.data();
    const double u = std::max(in.actual_u, in.expected_u);
    ref.rtol = in.rtol.value_or(
        in.angle == rope_angle::exact ? 8 * u : pipeline_rtol(in.actual_u, in.expected_u));
  }
  r.ratio_by_t.assign(static_cast<size_t>(in.T), 0.0);
  if (in.cfg) r.ratio_by_pair.assign(static_cast<size_t>(in.cfg->rotary_dim / 2), 0.0);
  const stats rs = st.cmp.run(ref, 0, N, false, &r.ratio_by_t, in.cfg ? &r.ratio_by_pair : nullptr);
  r.max_error = rs.max_error;
  r.max_ratio = rs.max_ratio;
  r.tolerance = rs.tol;
  r.rtol = ref.rtol;
  r.angle_rtol = rs.ang;
  r.worst = rs.worst;
  if (!st.pos.empty()) r.worst_position = st.pos[static_cast<size_t>(rs.worst / (in.H * in.D))];
  if (in.cfg) {
    const int64_t pr = st.cmp.pair_of(rs.worst % in.D, in.layout);
    if (pr >= 0) r.worst_pair = pr;
  }
  return rs.max_ratio <= 1;
}

// The named pipelines as given; the closest within tolerance becomes r.match.
void compare_pipelines(const compare_state& st, rope_compare_result& r) {
  const int64_t N = st.in.B * st.in.T;
  for (rope_angle m : kModes) {
    if (m == st.in.angle || (m == rope_angle::ggml_f32 && !st.ggml_ok())) continue;
    const candidate c = st.mode_candidate(m);
    r.pipelines.push_back(fit_of(c, st.cmp.run(c, 0, N, false)));
  }
  for (const auto& p : r.pipelines)
    if (p.ok && (!r.match || closer(p, *r.match))) r.match = p;
}

// Positions shifted by a constant per sequence (d != 0, the first d in [-64, 64]): a hint when
// some sequence fits shifted and every other fits as it is.
void shift_hint(const compare_state& st, const candidate& base, rope_compare_result& r) {
  const auto& in = st.in;
  std::vector<std::optional<int64_t>> shifts(static_cast<size_t>(in.B));
  bool any = false, all = true;
  double worst = 0, sum = 0;
  int64_t same = 0;
  for (int64_t b = 0; b < in.B && all; ++b) {
    const int64_t n0 = b * in.T, n1 = n0 + in.T;
    const int64_t lo = *std::min_element(st.pos.begin() + n0, st.pos.begin() + n1);
    for (int64_t d = -kMaxShift; d <= kMaxShift; ++d) {
      if (d == 0 || lo + d < 0) continue;
      candidate sh = base;
      sh.shift = d;
      const stats ss = st.cmp.run(sh, n0, n1, true);
      if (ss.max_ratio <= 1) {
        shifts[b] = d;
        any = true;
        worst = std::max(worst, ss.max_ratio);
        sum += ss.sum_error;
        same += ss.identical;
        same += ss.identical;
        break;
      }
    }
    if (!shifts[b]) {
      const stats ss = st.cmp.run(base, n0, n1, true);
      if (ss.max_ratio > 1) all = false;
      worst = std::max(worst, ss.max_ratio);
      sum += ss.sum_error;
      same += ss.identical;
    }
  }
  if (any && all) {
    std::string desc;
    for (int64_t b = 0; b < in.B; ++b)
      if (shifts[b])
        desc += fmt::format("{}row {}: {:+d}", desc.empty() ? "" : ", ", b, *shifts[b]);
    stats ss;
    ss.max_ratio = worst;
    ss.sum_error = sum;
    ss.identical = same;
    r.hints.push_back(fit_of(base, ss, "shift", desc));
  }
}

// Hints, each under every mode: the other layout, no attention factor, shifted positions.
void compare_hints(const compare_state& st, rope_compare_result& r) {
  const auto& in = st.in;
  const int64_t N = in.B * in.T;
  const double a = st.cmp.freqs().attention_factor;
  for (rope_angle m : kModes) {
    if (m == rope_angle::ggml_f32 && !st.ggml_ok()) continue;
    const candidate base = st.mode_candidate(m);
    candidate lay = base;
    lay.layout = in.layout == rope_layout::half ? rope_layout::interleaved : rope_layout::half;
    stats s = st.cmp.run(lay, 0, N, true);
    if (s.max_ratio <= 1) r.hints.push_back(fit_of(lay, s, "layout", other_layout(in.layout)));
    if (a != 1) {
      candidate noa = base;
      noa.scale = 1 / a;
      s = st.cmp.run(noa, 0, N, true);
      if (s.max_ratio <= 1)
        r.hints.push_back(fit_of(noa, s, "attention_factor", fmt::format("{:.6g}", a)));
    }
    shift_hint(st, base, r);
  }
}

// Without x: is every vector scaled by the same factor against the reference? The hint, or
// empty.
std::string norm_hint(const rope_compare_input& in) {
  const int64_t N = in.B * in.T;
  std::vector<double> ratios;
  for (int64_t v = 0; v < N * in.H; ++v) {
    double na = 0, ne = 0;
    for (int64_t c = 0; c < in.D; ++c) {
      const double x = in.actual[v * in.D + c], y = in.expected[v * in.D + c];
      na += x * x;
      ne += y * y;
    }
    if (ne > 0) ratios.push_back(std::sqrt(na) / std::sqrt(ne));
  }
  if (ratios.empty()) return "";
  std::vector<double> sorted = ratios;
  const size_t mid = sorted.size() / 2;
  std::nth_element(sorted.begin(), sorted.begin() + mid, sorted.end());
  double med = sorted[mid];
  if (sorted.size() % 2 == 0) {
    const double lower = *std::max_element(sorted.begin(), sorted.begin() + mid);
    med = (med + lower) / 2;
  }
  double spread = 0;
  for (double q : ratios) spread = std::max(spread, std::fabs(q - med));
  if (std::fabs(med - 1) > 1e-3 && spread <= 1e-3 * med)
    return fmt::format(
        "every vector is scaled by {:.6g} against posenc's: a missing or extra attention "
        "factor (YaRN, LongRoPE) or softmax scale?",
        med);
  return "";
}

}  // namespace

rope_compare_result rope_compare(const rope_compare_input& in) {
  check_compare_input(in);
  const int64_t N = in.B * in.T;
  std::vector<int64_t> pos(in.positions.begin(), in.positions.end());
  if (pos.empty() && !in.x.empty() && in.cfg) {
    pos.resize(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) pos[n] = n % in.T;
  }
  const comparer cmp(in, pos);
  rope_compare_result r;
  r.atol = in.atol;
  r.reference = in.angle;
  r.rotary_dim = in.cfg ? in.cfg->rotary_dim : 0;
  r.B = in.B, r.T = in.T, r.H = in.H, r.D = in.D;
  r.layout = in.layout;
  const bool recompute = !in.x.empty() && in.cfg.has_value();
  compare_state st{in, cmp, pos};
  st.u_work = in.actual_u > kU64 ? kU32 : kU64;
  for (int64_t p : pos) st.max_pos = std::max(st.max_pos, p);

  if (compare_reference(st, r)) {
    r.ok = true;
    r.verdict = in.angle == rope_angle::exact ? "ok" : "ok as " + rope_angle_description(in.angle);
    return r;
  }
  if (recompute) {
    compare_pipelines(st, r);
    if (r.match) {
      r.ok = true;
      r.verdict = "ok as " + rope_angle_description(r.match->angle);
      return r;
    }
  }
  r.verdict = "MISMATCH";
  if (recompute) compare_hints(st, r);
  if (in.x.empty()) r.norm_hint = norm_hint(in);
  return r;
}

namespace {

std::string hint_text(const rope_compare_fit& fit, rope_layout layout) {
  const std::string under = " under " + rope_angle_description(fit.angle);
  if (fit.hint == "layout")
    return fmt::format(
        "matches the other pair layout ({}){}; posenc used {} (half = NeoX / HF rotate_half, "
        "interleaved = GPT-J / Meta llama)",
        other_layout(layout), under, rope_layout_name(layout));
  if (fit.hint == "attention_factor")
    return fmt::format("matches without the attention factor a = {}{} (cos and sin unscaled)",
                       fit.detail, under);
  return fmt::format(
      "matches positions shifted per sequence ({}){}: padding counted as positions? "
      "(left-padded rows must start at 0 at their first real token)",
      fit.detail, under);
}

}  // namespace

std::vector<std::string> rope_compare_hints(const rope_compare_result& r) {
  std::vector<std::string> out;
  for (const char* kind : {"layout", "attention_factor", "shift"}) {
    std::vector<const rope_compare_fit*> fits;
    for (const auto& f : r.hints)
      if (f.hint == kind) fits.push_back(&f);
    if (fits.empty()) continue;
    std::stable_sort(fits.begin(), fits.end(),
                     [](const auto* a, const auto* b) { return closer(*a, *b); });
    std::string s = hint_text(*fits[0], r.layout);
    for (size_t i = 1; i < fits.size(); ++i)
      s += fmt::format("{}{}", i == 1 ? " (also within tolerance under " : ", ",
                       rope_angle_name(fits[i]->angle));
    if (fits.size() > 1) s += ")";
    out.push_back(s);
  }
  if (!r.norm_hint.empty()) out.push_back(r.norm_hint);
  return out;
}

std::string rope_compare_text(const rope_compare_result& r) {
  std::string s;
  auto where = [&] {
    std::string w;
    if (r.worst_position) w += fmt::format("; position {}", *r.worst_position);
    if (r.worst_pair) w += fmt::format(", channel pair {}", *r.worst_pair);
    return w;
  };
  const std::string ref_line = fmt::format(
      "max error {:.3g} at {}, {:.3g} x the tolerance ({:.3g} = {:.3g} + ({:.3g} + {:.3g}) "
      "x |vector|)",
      r.max_error, index_str(r.worst, r.B, r.T, r.H, r.D), r.max_ratio, r.tolerance, r.atol, r.rtol,
      r.angle_rtol);
  if (r.match) {
    const auto& m = *r.match;
    s = fmt::format(
        "{}: max error {:.3g} = {:.3g} x its tolerance (({:.3g} + {:.3g} omega_i p) x |vector|); "
        "{} of {} entries bit-identical",
        r.verdict, m.max_error, m.max_ratio, m.rtol, m.eps, m.identical, m.compared);
    s += fmt::format("\nagainst {}: {}{}", rope_angle_description(r.reference), ref_line, where());
    std::string also;
    for (const auto& p : r.pipelines)
      if (p.ok && p.angle != m.angle)
        also += fmt::format("{}{} ({:.3g} x)", also.empty() ? "" : ", ", rope_angle_name(p.angle),
                            p.max_ratio);
    if (!also.empty()) s += "\nalso within tolerance: " + also;
    return s;
  }
  s = fmt::format("{}: {}{}", r.verdict, ref_line, where());
  if (!r.ok && !r.pipelines.empty()) {
    const auto best =
        std::min_element(r.pipelines.begin(), r.pipelines.end(),
                         [](const auto& a, const auto& b) { return a.max_ratio < b.max_ratio; });
    s += fmt::format("\nclosest pipeline: {} at {:.3g} x its tolerance",
                     rope_angle_name(best->angle), best->max_ratio);
  }
  for (const auto& h : rope_compare_hints(r)) s += "\nhint: " + h;
  return s;
}

}  // namespace posenc
