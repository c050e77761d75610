// xPos (Sun et al. 2022, sec. 3): a q/k transform reached by name (hook 1), RoPE (half layout,
// rotary width D, exact angles) times a per-pair scale that makes q'_n . k'_m decay in n - m:
//   zeta_i = (i / (D/2) + gamma) / (1 + gamma),  i < D/2
//   q'_n = zeta^((n - c) / B) R(n) q_n,  k'_m = zeta^(-(m - c) / B) R(m) k_m,  B = scale_base
// so q'_n . k'_m carries zeta^((n - m) / B), whatever the centre c (x-transformers centres at half
// the sequence length so that the scales stay representable). The scales are computed in double
// and rounded once; the exponent (pos - c) / B log zeta_i saturates at +-80, so every scale stays
// finite in float32 (pad slots, passed as position 0, too): with the default gamma the formula
// holds exactly for |pos - c| up to 64 B. Parameters (after the switch xpos): xpos_theta (the
// RoPE base), xpos_gamma, xpos_scale_base, xpos_center.
// The transpose (the backward) is R(pos)^T with the same scale: each pair's scale commutes with
// that pair's rotation. A KV cache stores keys after the transform, as for RoPE; each key row's
// bits do not depend on how many keys are transformed at once. The model's hook: theta from the
// lab's rope_theta unless xpos_theta is given.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

// xPos's parameters, from the declared args (theta, gamma, scale_base, center).
struct xpos_params {
  double theta, gamma, scale_base, center;
};
xpos_params xpos_of(std::span<const double> a) {
  return {a[0], a[1], a[2], a[3]};
}

class xpos_transform final : public qk_transform {
 public:
  // D: the head dim of the call (the frequencies and zetas depend on it and on nothing else).
  xpos_transform(const xpos_params& x, int64_t D) : x_(x), h2_(D / 2), omega_(h2_), lz_(h2_) {
    for (int64_t i = 0; i < h2_; ++i) {
      omega_[i] = std::pow(x_.theta, -2.0 * double(i) / double(D));
      lz_[i] = std::log((double(i) / double(h2_) + x_.gamma) / (1 + x_.gamma));
    }
  }
  void apply(std::span<const int64_t> pos, float* x, int64_t n, int64_t H, int64_t D, bool key,
             bool transpose) const override {
    run(pos, x, n, H, D, key, transpose);
  }
  void apply(std::span<const int64_t> pos, double* x, int64_t n, int64_t H, int64_t D, bool key,
             bool transpose) const override {
    run(pos, x, n, H, D, key, transpose);
  }
  // Row form: the table is one position's D / 2 cosines and D / 2 sines, already scaled, in
  // double (2 D floats' room, copied bytewise), and apply_rows the same double arithmetic as
  // run(): the bits of apply(). The per-position work (an angle reduction, exp, cos and sin per
  // pair) then runs once per position on the call's threads instead of in one thread over q and
  // k before the tiles.
  int64_t row_table_size() const override { return 4 * h2_; }
  void fill_row_table(int64_t, int64_t pos, bool key, float* table) const override {
    thread_local std::vector<double> c, s;
    c.resize(h2_), s.resize(h2_);
    coefficients(pos, key, false, c.data(), s.data());
    std::memcpy(table, c.data(), h2_ * sizeof(double));
    std::memcpy(table + 2 * h2_, s.data(), h2_ * sizeof(double));
  }
  void apply_rows(const float* table, bool, float* x, int64_t H, int64_t stride) const override {
    const table_view c{table}, s{table + 2 * h2_};
    for (int64_t h = 0; h < H; ++h) rotate(c, s, x + h * stride);
  }

 private:
  // Per position: angle pos omega_i (omega_i = theta^(-2i/D)) reduced mod 2 pi in double, times
  // the scale zeta_i^(+-(pos - center)/B); sines negated for the transpose.
  void coefficients(int64_t pos, bool key, bool transpose, double* c, double* s) const {
    const double p = double(pos);
    const double e = (p - x_.center) / x_.scale_base;
    for (int64_t i = 0; i < h2_; ++i) {
      const double ang = std::fmod(p * omega_[i], 2 * M_PI);
      // zeta^e = exp(e log zeta), the exponent saturated at +-80 (see attention.hpp).
      const double sc = std::exp(std::clamp((key ? -e : e) * lz_[i], -80.0, 80.0));
      c[i] = sc * std::cos(ang);
      s[i] = sc * (transpose ? -std::sin(ang) : std::sin(ang));
    }
  }
  // Doubles stored in a float table (read bytewise: no alignment or aliasing assumption).
  struct table_view {
    const float* t;
    double operator[](int64_t i) const {
      double v;
      std::memcpy(&v, t + 2 * i, sizeof v);
      return v;
    }
  };
  // One row, in double, rounded once to Real.
  template <typename Coef, typename Real>
  void rotate(const Coef& c, const Coef& s, Real* r) const {
    for (int64_t i = 0; i < h2_; ++i) {
      const double a = double(r[i]), b = double(r[i + h2_]);
      r[i] = static_cast<Real>(a * c[i] - b * s[i]);
      r[i + h2_] = static_cast<Real>(b * c[i] + a * s[i]);
    }
  }
  // The coefficients once per position, reused across heads.
  template <typename Real>
  void run(std::span<const int64_t> pos, Real* x, int64_t n, int64_t H, int64_t D, bool key,
           bool transpose) const {
    if (D / 2 != h2_) fail("xpos: the transform was made for D = {}, got D = {}", 2 * h2_, D);
    std::vector<double> c(h2_), s(h2_);
    for (int64_t t = 0; t < n; ++t) {
      coefficients(pos[t], key, transpose, c.data(), s.data());
      for (int64_t h = 0; h < H; ++h) rotate(c.data(), s.data(), x + (t * H + h) * D);
    }
  }
  xpos_params x_;
  int64_t h2_;
  std::vector<double> omega_, lz_;  // theta^(-2i/D) and log zeta_i, i < D / 2
};

void xpos_check(std::span<const double> a, int64_t D) {
  const xpos_params x = xpos_of(a);
  if (!(x.theta > 1) || !std::isfinite(x.theta))
    fail("xpos_theta must be finite and > 1 (the RoPE base), got {}", x.theta);
  if (!(x.gamma > 0) || !std::isfinite(x.gamma))
    fail("xpos_gamma must be finite and > 0, got {}", x.gamma);
  if (!(x.scale_base > 0) || !std::isfinite(x.scale_base))
    fail("xpos_scale_base must be finite and > 0, got {}", x.scale_base);
  if (!std::isfinite(x.center)) fail("xpos_center must be finite, got {}", x.center);
  if (D > 0 && D % 2 != 0) fail("xpos needs an even head dim D, got D = {}", D);
}

std::unique_ptr<qk_transform> xpos_make(const transform_args& a, std::unique_ptr<qk_transform>) {
  xpos_check(a.args, a.D);
  return std::make_unique<xpos_transform>(xpos_of(a.args), a.D);
}

// The case tables and checks: centred on the middle of the positions (the scales stay near 1),
// scale_base B = max(64, (hi - lo) / 4), so that the decay shows at the tables' distances while
// F <= 150.
std::vector<std::pair<std::string, double>> xpos_case_params(int64_t lo, int64_t hi) {
  return {{"xpos_scale_base", std::max(64.0, double(hi - lo) / 4)},
          {"xpos_center", 0.5 * double(lo + hi)}};
}

// |q'_n . k'_m| <= zeta_max^((n - m) / B) |q||k| for n >= m and zeta_0^((n - m) / B) |q||k| for
// n < m, every zeta < 1: F = 1 when causal (n >= m), else zeta_0^(-(hi - lo) / B), zeta_0 =
// gamma / (1 + gamma).
double xpos_amplitude(std::span<const double> a, int64_t lo, int64_t hi, bool causal) {
  const xpos_params x = xpos_of(a);
  return causal ? 1.0 : std::pow(x.gamma / (1 + x.gamma), -double(hi - lo) / x.scale_base);
}

// Angles pos omega rounded once in double: u |pos| per angle, then reduced and cos/sin'd (8e-16);
// the scale zeta^e through exp: a few ulp (8u).
double xpos_coef_error(std::span<const double>, int64_t P) {
  constexpr double u = 0x1p-53;
  return 8e-16 + 2 * u * double(P) + 8 * u;
}

// The model's hook: the lab's parameters for xpos (position_options::named_params), its theta the
// model's rope_theta unless xpos_theta is given.
template <typename S>
std::unique_ptr<position_hook<S>> xpos_hook_of(pos_scheme id, const position_options& o,
                                               const position_shape&) {
  std::vector<std::pair<std::string, double>> params = {
      {"xpos_theta", named_option(o, "xpos_theta", o.rope_theta)}};
  const scheme_decl& d = scheme_decl_of("xpos");
  for (const auto& [name, value] : o.named_params)
    for (size_t i = 2; i < d.params.size(); ++i)  // after the switch and xpos_theta
      if (name == d.params[i].name) params.emplace_back(name, value);
  return make_tensor_hook<S>(id, "xpos", std::move(params), "", 0, 0);
}

}  // namespace

extern const named_transform xpos_transform_decl;
const named_transform xpos_transform_decl = {
    .check = &xpos_check,
    .make = &xpos_make,
    .case_params = &xpos_case_params,
    .amplitude = &xpos_amplitude,
    .coef_error = &xpos_coef_error,
    .hook_f32 = &xpos_hook_of<float>,
    .hook_f64 = &xpos_hook_of<double>,
};

}  // namespace posenc::detail
