// xPos (Sun et al. 2022, sec. 3): the engine's hook 1, RoPE (half layout, rotary width D, exact
// angles) with a per-pair exponential scale that makes q'_n . k'_m decay in n - m; and the
// model's hook (theta = rope_theta, gamma and scale_base from the options).
//   zeta_i = (i / (D/2) + gamma) / (1 + gamma),  i < D/2
//   q'_n = zeta^((n - c) / B) R(n) q_n,  k'_m = zeta^(-(m - c) / B) R(m) k_m,  B = scale_base
// The transpose (the backward) is R(pos)^T with the same scale: each pair's scale commutes with
// that pair's rotation. A KV cache stores keys after the transform (make_xpos_key_transform), as
// for RoPE; each key row's bits do not depend on how many keys are transformed at once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

class xpos_transform final : public qk_transform {
 public:
  // D: the head dim of the call (the frequencies and zetas depend on it and on nothing else).
  xpos_transform(const attention_xpos& x, int64_t D) : x_(x), h2_(D / 2), omega_(h2_), lz_(h2_) {
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
  attention_xpos x_;
  int64_t h2_;
  std::vector<double> omega_, lz_;  // theta^(-2i/D) and log zeta_i, i < D / 2
};

void validate_xpos(const attention_xpos& x, int64_t D) {
  if (!(x.theta > 1) || !std::isfinite(x.theta))
    fail("xpos theta must be finite and > 1 (0 = off), got {}", x.theta);
  if (!(x.gamma > 0) || !std::isfinite(x.gamma))
    fail("xpos gamma must be finite and > 0, got {}", x.gamma);
  if (!(x.scale_base > 0) || !std::isfinite(x.scale_base))
    fail("xpos scale_base must be finite and > 0, got {}", x.scale_base);
  if (!std::isfinite(x.center)) fail("xpos center must be finite, got {}", x.center);
  if (D % 2 != 0) fail("xpos needs an even head dim D, got {}", D);
}

template <typename S>
class xpos_hook final : public position_hook<S> {
 public:
  explicit xpos_hook(attention_xpos x) : x_(x) {}
  pos_scheme scheme() const override { return pos_scheme::xpos; }
  attention_position<S> attention(const S* const*) const override {
    attention_position<S> p;
    p.xpos = x_;
    return p;
  }

 private:
  attention_xpos x_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_xpos_hook(const position_options& o,
                                                 const position_shape& shape) {
  const attention_xpos x{o.rope_theta, o.xpos_gamma, o.xpos_scale_base, 0.0};
  validate_xpos(x, shape.d_model / shape.n_heads);
  return std::make_unique<xpos_hook<S>>(x);
}

template <typename Real>
void add_xpos_terms(const attention_params<Real>& p, const attention_plan&,
                    const attention_grads<Real>*, engine_terms<Real>& t) {
  const attention_xpos& x = p.pos.xpos;
  if (x.theta == 0) return;
  validate_xpos(x, p.D);
  if (t.transform) fail("attention: two q/k transforms are on; at most one is allowed");
  t.transform = std::make_unique<xpos_transform>(x, p.D);
  t.transform->keys_transformed = x.keys_rotated;
}

template <typename Real>
std::unique_ptr<qk_transform> make_xpos_key_transform(const attention_position<Real>& pos,
                                                      int64_t D, const char* who) {
  const attention_xpos& x = pos.xpos;
  if (x.theta == 0) return nullptr;
  try {
    validate_xpos(x, D);
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string(who) + e.what());
  }
  return std::make_unique<xpos_transform>(x, D);
}

// What the declaration of xpos points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(xpos, p.xpos.theta != 0)
extern const scheme_impl xpos_impl;
const scheme_impl xpos_impl = {POSENC_BOTH(xpos_on), POSENC_BOTH(add_xpos_terms),
                               POSENC_BOTH(make_xpos_key_transform), POSENC_BOTH(make_xpos_hook)};

}  // namespace posenc::detail
