// The model ops case table: inputs, both modes and the named lists
// (include/posenc/verify/ops_cases.hpp holds the derivations).
#include "posenc/verify/ops_cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "posenc/core/rng.hpp"
#include "posenc/model/ops.hpp"
#include "posenc/verify/gradcheck.hpp"

namespace posenc::model::ops_cases {

namespace {

constexpr double kU = 0x1p-53;
constexpr double kUf = 0x1p-24;
constexpr long double kUl = 0x1p-64L;

template <typename Real>
const char* type_name() {
  return std::is_same_v<Real, float> ? "float32" : "float64";
}
template <typename Real>
double unit() {
  return std::is_same_v<Real, float> ? kUf : kU;
}
double gamma(int64_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1 - nu);
}

// The worst ratio so far, and where; NaN sticks.
struct worst {
  double r = 0;
  std::string at;
  void take(double ratio, const std::function<std::string()>& where) {
    if (std::isnan(r)) return;
    if (std::isnan(ratio) || ratio > r || at.empty()) {
      r = ratio;
      at = where();
    }
  }
};

std::vector<double> randn(rng& r, int64_t n, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = r.normal() * scale;
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

const char* k_fd_detail =
    "central differences h = 1e-6 in double; error normalised by max(max|g|, 1e-3) per tensor; "
    "rounding 4 eps |f| / 2h ~ 7e-10 plus truncation h^2 |f'''| / 6 ~ 2e-10 give <~ 1e-6, "
    "tolerance 1e-5 (include/posenc/verify/gradcheck.hpp)";

}  // namespace

const char* name(op o) {
  static const char* n[] = {"matmul_nn",     "matmul_nt",      "matmul_tn", "gelu",
                            "linear",        "layernorm",      "rmsnorm",   "embedding",
                            "cross_entropy", "matmul_adjoint", "model",     "model_float"};
  return n[static_cast<int>(o)];
}

std::string describe(const spec& c) {
  if (c.o == op::model)
    return fmt::format("op=model scheme={} norm={} seed={}", pos_scheme_name(c.scheme),
                       norm_kind_name(c.norm), c.seed);
  if (c.o == op::model_float) return fmt::format("op=model_float every scheme seed={}", c.seed);
  return fmt::format("op={} M={} K={} N={} pad={} accumulate={} seed={}", name(c.o), c.M, c.K, c.N,
                     c.pad, c.accumulate, c.seed);
}

// ---- check mode -----------------------------------------------------------------------------

namespace {

// a (rows_a, cols_a) and b (rows_b, cols_b) of the op's layout, leading dims + pad.
template <typename Real>
void check_matmul(const spec& c, worst& w) {
  const int64_t M = c.M, K = c.K, N = c.N, p = c.pad;
  const bool nt = c.o == op::matmul_nt, tn = c.o == op::matmul_tn;
  // a: nn/nt (M, K), tn (K, M); b: nn/tn (K, N), nt (N, K).
  const int64_t ar = tn ? K : M, ac = tn ? M : K, br = nt ? N : K, bc = nt ? K : N;
  const int64_t lda = ac + p, ldb = bc + p, ldc = N + p;
  rng r(c.seed);
  auto fill = [&](int64_t rows, int64_t cols, int64_t ld) {
    std::vector<Real> x(static_cast<size_t>(rows * ld), Real(-7));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        x[static_cast<size_t>(i * ld + j)] = static_cast<Real>(r.normal());
    return x;
  };
  const auto a = fill(ar, ac, lda), b = fill(br, bc, ldb);
  auto cm = fill(M, N, ldc);
  const auto c0 = cm;
  auto A = [&](int64_t i, int64_t k) {
    return a[static_cast<size_t>(tn ? k * lda + i : i * lda + k)];
  };
  auto B = [&](int64_t k, int64_t j) {
    return b[static_cast<size_t>(nt ? j * ldb + k : k * ldb + j)];
  };
  if (c.o == op::matmul_nn)
    matmul_nn(a.data(), lda, b.data(), ldb, cm.data(), ldc, M, K, N, c.accumulate);
  else if (nt)
    matmul_nt(a.data(), lda, b.data(), ldb, cm.data(), ldc, M, K, N, c.accumulate);
  else
    matmul_tn(a.data(), lda, b.data(), ldb, cm.data(), ldc, M, K, N, c.accumulate);
  const double g = gamma(K + 1, unit<Real>()) + gamma(K + 1, static_cast<double>(kUl));
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      const auto e = static_cast<size_t>(i * ldc + j);
      long double ref = c.accumulate ? static_cast<long double>(c0[e]) : 0.0L;
      double mag = c.accumulate ? std::fabs(static_cast<double>(c0[e])) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        ref += static_cast<long double>(A(i, k)) * static_cast<long double>(B(k, j));
        mag += std::fabs(static_cast<double>(A(i, k)) * static_cast<double>(B(k, j)));
      }
      const double tol = g * mag + 0x1p-1074;
      const double err = std::fabs(static_cast<double>(static_cast<long double>(cm[e]) - ref));
      w.take(err / tol, [&] {
        return fmt::format("{} c[{}, {}] = {:.17g}, reference {:.17g}, tol {:.3g}",
                           type_name<Real>(), i, j, static_cast<double>(cm[e]),
                           static_cast<double>(ref), tol);
      });
    }
    // The padding of c stays untouched.
    for (int64_t j = N; j < ldc; ++j) {
      const auto e = static_cast<size_t>(i * ldc + j);
      if (cm[e] != c0[e])
        w.take(std::numeric_limits<double>::infinity(), [&] {
          return fmt::format("{} padding c[{}, {}] written", type_name<Real>(), i, j);
        });
    }
  }
}

template <typename Real>
void check_gelu(const spec& c, worst& w) {
  const int64_t n = c.N;
  const double u = unit<Real>();
  std::vector<Real> x(static_cast<size_t>(n)), y(x.size()), dy(x.size()), du(x.size(), Real(0.25));
  for (int64_t i = 0; i < n; ++i) {
    x[static_cast<size_t>(i)] =
        static_cast<Real>(-8.0 + 16.0 * static_cast<double>(i) / static_cast<double>(n));
    dy[static_cast<size_t>(i)] = static_cast<Real>(1.0 + 0.01 * static_cast<double>(i));
  }
  gelu_forward(x.data(), y.data(), n);
  gelu_backward(x.data(), dy.data(), du.data(), n);
  const long double A = 0.7978845608028654L, Bc = 0.044715L;
  for (int64_t i = 0; i < n; ++i) {
    const auto I = static_cast<size_t>(i);
    const long double xl = x[I];
    const long double t = std::tanh(A * (xl + Bc * xl * xl * xl));
    const long double g = 0.5L * (1 + t) + 0.5L * xl * (1 - t * t) * A * (1 + 3 * Bc * xl * xl);
    const double yr = static_cast<double>(0.5L * xl * (1 + t));
    const double xi = static_cast<double>(x[I]);
    const double tol_y = 8 * u * std::fabs(xi) + 0x1p-1074;
    w.take(std::fabs(static_cast<double>(y[I]) - yr) / tol_y, [&] {
      return fmt::format("{} gelu({:.9g}) = {:.17g}, formula {:.17g}, tol {:.3g}",
                         type_name<Real>(), xi, static_cast<double>(y[I]), yr, tol_y);
    });
    const double want = 0.25 + static_cast<double>(dy[I]) * static_cast<double>(g);
    const double tol_g = 32 * u * (1 + xi * xi) * static_cast<double>(dy[I]) + 2 * u;
    w.take(std::fabs(static_cast<double>(du[I]) - want) / tol_g, [&] {
      return fmt::format("{} du at {:.9g} = {:.17g}, formula {:.17g}, tol {:.3g}",
                         type_name<Real>(), xi, static_cast<double>(du[I]), want, tol_g);
    });
  }
}

void check_model_float(const spec& c, worst& w) {
  for (int i = 0; i < pos_scheme_count(); ++i) {
    const auto s = static_cast<pos_scheme>(i);
    const auto cfg = gradcheck_model_config(s, norm_kind::layernorm);
    transformer<double> md(cfg);
    md.init(c.seed);
    transformer<float> mf(cfg);
    std::copy(md.params().begin(), md.params().end(), mf.params().begin());
    for (size_t k = 0; k < md.params().size(); ++k) md.params()[k] = mf.params()[k];
    const batch b = gradcheck_batch();
    const double ld = md.forward(b), lf = mf.forward(b);
    // Relative loss difference against the derived 1e-4 (header).
    w.take(std::fabs(ld - lf) / std::fabs(ld) / 1e-4, [&] {
      return fmt::format("{}: float loss {:.9g}, double {:.17g}", pos_scheme_name(s), lf, ld);
    });
  }
}

}  // namespace

check_result check_case(const spec& c) {
  worst w;
  std::string claim, detail;
  switch (c.o) {
    case op::matmul_nn:
    case op::matmul_nt:
    case op::matmul_tn:
      if (c.dtypes & f32) check_matmul<float>(c, w);
      if (c.dtypes & f64) check_matmul<double>(c, w);
      claim = fmt::format(
          "{} (blocked, tiled, threaded) matches a plain long double loop within "
          "the derived bound, on {}",
          name(c.o), describe(c));
      detail =
          "max_error is the worst |c - reference| / tol, tol = (gamma_{K+1}(u_T) + "
          "gamma_{K+1}(2^-64)) (|c0| + sum |a||b|) (derived in "
          "include/posenc/verify/ops_cases.hpp)";
      break;
    case op::gelu:
      if (c.dtypes & f32) check_gelu<float>(c, w);
      if (c.dtypes & f64) check_gelu<double>(c, w);
      claim = fmt::format(
          "the SIMD GELU forward and backward match the formula in long double "
          "within the derived bound, on {} elements over [-8, 8]",
          c.N);
      detail =
          "max_error is the worst |err| / tol, tol 8u|x| (forward), 32u(1 + x^2)|dy| + 2u "
          "(backward, accumulating into 0.25) (derived in include/posenc/verify/ops_cases.hpp)";
      break;
    case op::model_float:
      check_model_float(c, w);
      // Reported as the relative difference itself against 1e-4, as before.
      return measured_check("gradients", c.name,
                            "float forward loss agrees with the double forward", w.r * 1e-4, 1e-4,
                            fmt::format("relative loss difference, worst {}; 30 float ops x 6e-8 "
                                        "x cond 10",
                                        w.at));
    default:
      return measured_check("gradients", c.name, describe(c) + " has no check mode",
                            std::numeric_limits<double>::quiet_NaN(), 0,
                            "the op's only implementation is checked in grad mode");
  }
  return measured_check("gradients", c.name, claim, w.r, 1, detail + "; worst at " + w.at);
}

// ---- grad mode ------------------------------------------------------------------------------

namespace {

// One gradient check's result.
check_result ops_grad_result(const spec& c, const std::string& claim, double e, double t,
                             const std::string& detail) {
  return measured_check("gradients", c.name, claim, e, t, detail);
}

// y = x W + b, loss <y, w>: linear_backward against central differences.
check_result ops_grad_linear(const spec& c, rng& r) {
  const int64_t n = c.M, in = c.K, o = c.N;
  auto x = randn(r, n * in), wt = randn(r, in * o), b = randn(r, o), wy = randn(r, n * o);
  std::vector<double> y(n * o), dx(n * in, 0), dw(in * o, 0), db(o, 0);
  auto f = [&] {
    linear_forward(x.data(), wt.data(), b.data(), y.data(), n, in, o);
    return dot(y, wy);
  };
  linear_backward(x.data(), wt.data(), wy.data(), dx.data(), dw.data(), db.data(), n, in, o);
  const double e = std::max({finite_difference_error(x, f, dx), finite_difference_error(wt, f, dw),
                             finite_difference_error(b, f, db)});
  return ops_grad_result(c, "linear_backward matches central differences of y = x W + b", e,
                         gradcheck_tolerance, k_fd_detail);
}

// layernorm_backward or rmsnorm_backward (c.o) against central differences.
check_result ops_grad_norm(const spec& c, rng& r) {
  const bool ln = c.o == op::layernorm;
  const int64_t n = c.M, ch = c.N;
  auto x = randn(r, n * ch, 2.0), g = randn(r, ch), bb = randn(r, ch), wy = randn(r, n * ch);
  for (auto& v : x) v += 0.5;  // nonzero mean
  std::vector<double> y(n * ch), mean(n), rstd(n), dx(n * ch, 0), dg(ch, 0), db(ch, 0);
  auto f = [&] {
    if (ln)
      layernorm_forward(x.data(), g.data(), bb.data(), y.data(), mean.data(), rstd.data(), n, ch,
                        1e-5);
    else
      rmsnorm_forward(x.data(), g.data(), y.data(), rstd.data(), n, ch, 1e-5);
    return dot(y, wy);
  };
  f();
  if (ln)
    layernorm_backward(x.data(), g.data(), mean.data(), rstd.data(), wy.data(), dx.data(),
                       dg.data(), db.data(), n, ch);
  else
    rmsnorm_backward(x.data(), g.data(), rstd.data(), wy.data(), dx.data(), dg.data(), n, ch);
  double e = std::max(finite_difference_error(x, f, dx), finite_difference_error(g, f, dg));
  if (ln) e = std::max(e, finite_difference_error(bb, f, db));
  return ops_grad_result(c,
                         ln ? "layernorm_backward matches central differences (x, gain, bias)"
                            : "rmsnorm_backward matches central differences (x, gain)",
                         e, gradcheck_tolerance, k_fd_detail);
}

// gelu_backward against central differences at N points spread over [-3, 4].
check_result ops_grad_gelu(const spec& c, rng& r) {
  const int64_t n = c.N;
  std::vector<double> u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    u[static_cast<size_t>(i)] =
        n == 1 ? 0.3 : -3.0 + 7.0 * static_cast<double>(i) / static_cast<double>(n - 1);
  auto wy = randn(r, n);
  std::vector<double> y(n), du(n, 0);
  auto f = [&] {
    gelu_forward(u.data(), y.data(), n);
    return dot(y, wy);
  };
  gelu_backward(u.data(), wy.data(), du.data(), n);
  return ops_grad_result(c, "gelu_backward matches central differences on [-3, 4]",
                         finite_difference_error(u, f, du), gradcheck_tolerance, k_fd_detail);
}

// M indices into K rows of N channels, one index repeated: embedding_backward against
// central differences.
check_result ops_grad_embedding(const spec& c, rng& r) {
  const int64_t rows = c.K, ch = c.N, n = c.M;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (auto& i : idx) i = static_cast<int64_t>(r.below(static_cast<uint64_t>(rows)));
  if (n > 2) idx[2] = idx[0];
  auto table = randn(r, rows * ch), wy = randn(r, n * ch);
  std::vector<double> y(n * ch), dt(rows * ch, 0);
  auto f = [&] {
    embedding_forward(table.data(), idx.data(), y.data(), n, ch, false);
    return dot(y, wy);
  };
  embedding_backward(idx.data(), wy.data(), dt.data(), n, ch);
  return ops_grad_result(c, "embedding_backward sums repeated rows (central differences)",
                         finite_difference_error(table, f, dt), gradcheck_tolerance, k_fd_detail);
}

// M rows of N classes, row 1 unscored: cross_entropy_backward against central differences.
check_result ops_grad_cross_entropy(const spec& c, rng& r) {
  const int64_t n = c.M, v = c.N;
  std::vector<int64_t> tg(static_cast<size_t>(n));
  for (auto& t : tg) t = static_cast<int64_t>(r.below(static_cast<uint64_t>(v)));
  if (n > 1) tg[1] = -1;
  int64_t scored = 0;
  for (auto t : tg) scored += t >= 0;
  auto logits = randn(r, n * v, 2.0);
  std::vector<double> p(n * v), nll(n), dl(n * v);
  auto f = [&] {
    return cross_entropy_forward(logits.data(), tg.data(), p.data(), nll.data(), n, v);
  };
  f();
  cross_entropy_backward(p.data(), tg.data(), dl.data(), n, v,
                         1.0 / static_cast<double>(std::max<int64_t>(scored, 1)));
  return ops_grad_result(
      c, "cross_entropy_backward = (softmax - onehot) / #scored (central differences)",
      finite_difference_error(logits, f, dl), gradcheck_tolerance, k_fd_detail);
}

// The adjoint identity <A B, C> = <B, A^T C> = <A, C B^T> of matmul nn, tn and nt.
check_result ops_grad_matmul_adjoint(const spec& c, rng& r) {
  const int64_t M = c.M, K = c.K, N = c.N;
  auto A = randn(r, M * K), B = randn(r, K * N), C = randn(r, M * N);
  std::vector<double> AB(M * N), AtC(K * N), CBt(M * K);
  matmul_nn(A.data(), K, B.data(), N, AB.data(), N, M, K, N, false);
  matmul_tn(A.data(), K, C.data(), N, AtC.data(), N, K, M, N, false);
  matmul_nt(C.data(), N, B.data(), N, CBt.data(), K, M, N, K, false);
  const double lhs = dot(AB, C);
  // Each side is a double computation of sum_{i,j,k} A_ik B_kj C_ij: an inner sum of K, M or
  // N products, then an outer dot of M N, K N or M K terms, so each errs by <= gamma_n mag
  // with n = max(K + M N, M + K N, N + M K) + 1 and mag = sum |A_ik| |B_kj| |C_ij|; the
  // difference of two sides by <= 2 gamma_n mag.
  double mag = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(A[i * K + k] * B[k * N + j] * C[i * N + j]);
  const int64_t n = std::max({K + M * N, M + K * N, N + M * K}) + 1;
  const double e = std::max(std::abs(lhs - dot(B, AtC)), std::abs(lhs - dot(A, CBt))) / mag;
  return ops_grad_result(
      c, "<A B, C> = <B, A^T C> = <A, C B^T> (nn, tn, nt)", e, 2 * gamma(n, kU),
      fmt::format("double; max |difference| / sum |A_ik B_kj C_ij| against 2 gamma_n, "
                  "n = max(K + M N, M + K N, N + M K) + 1 = {}",
                  n));
}

}  // namespace

check_result grad_case(const spec& c) {
  rng r(c.seed);
  switch (c.o) {
    case op::linear:
      return ops_grad_linear(c, r);
    case op::layernorm:
    case op::rmsnorm:
      return ops_grad_norm(c, r);
    case op::gelu:
      return ops_grad_gelu(c, r);
    case op::embedding:
      return ops_grad_embedding(c, r);
    case op::cross_entropy:
      return ops_grad_cross_entropy(c, r);
    case op::matmul_adjoint:
      return ops_grad_matmul_adjoint(c, r);
    case op::model: {
      const bool ln = c.norm == norm_kind::layernorm;
      return ops_grad_result(
          c,
          fmt::format("whole-model backward with {} matches central differences for "
                      "every parameter (2 layers, {})",
                      pos_scheme_name(c.scheme), ln ? "LayerNorm" : "RMSNorm"),
          model_gradient_error(gradcheck_model_config(c.scheme, c.norm), c.seed),
          gradcheck_tolerance, k_fd_detail);
    }
    default:
      return measured_check("gradients", c.name, describe(c) + " has no grad mode",
                            std::numeric_limits<double>::quiet_NaN(), 0,
                            "a forward-only comparison: check mode");
  }
}

std::vector<check_result> run_case(const spec& c) {
  std::vector<check_result> out;
  if (c.passes & check) out.push_back(check_case(c));
  if (c.passes & grad) out.push_back(grad_case(c));
  return out;
}

// ---- the lists ------------------------------------------------------------------------------

namespace {

spec grad_spec(op o, int64_t M, int64_t K, int64_t N, uint64_t seed, const std::string& nm) {
  spec c;
  c.o = o;
  c.M = M, c.K = K, c.N = N;
  c.seed = seed;
  c.passes = grad;
  c.group = "ops";
  c.name = nm;
  return c;
}

spec matmul(op o, int64_t M, int64_t K, int64_t N, int64_t pad, bool acc, uint64_t seed,
            const std::string& group) {
  spec c;
  c.o = o;
  c.M = M, c.K = K, c.N = N;
  c.pad = pad;
  c.accumulate = acc;
  c.seed = seed;
  c.group = group;
  c.name = fmt::format("{}/{}/M{}/K{}/N{}{}{}", group, name(o), M, K, N,
                       pad ? fmt::format("/pad{}", pad) : std::string(), acc ? "/acc" : "");
  return c;
}

spec gelu_check(int64_t n, const std::string& group) {
  spec c;
  c.o = op::gelu;
  c.N = n;
  c.group = group;
  c.name = fmt::format("{}/gelu/n{}", group, n);
  return c;
}

spec model_spec(pos_scheme s, norm_kind n, uint64_t seed, const std::string& group,
                const std::string& nm) {
  spec c;
  c.o = op::model;
  c.scheme = s;
  c.norm = n;
  c.seed = seed;
  c.passes = grad;
  c.group = group;
  c.name = nm;
  return c;
}

std::vector<spec> make_check() {
  std::vector<spec> v;
  // Grad mode: finite differences against gradcheck_tolerance (derived in gradcheck.hpp); the
  // matmul adjoint against 2 gamma_n (derived at its case in grad_case).
  v.push_back(grad_spec(op::linear, 3, 4, 5, 2024, "linear"));
  v.push_back(grad_spec(op::layernorm, 3, 0, 6, 2025, "layernorm"));
  v.push_back(grad_spec(op::rmsnorm, 3, 0, 6, 2026, "rmsnorm"));
  v.push_back(grad_spec(op::gelu, 1, 1, 9, 2027, "gelu"));
  v.push_back(grad_spec(op::embedding, 4, 5, 4, 2028, "embedding"));
  v.push_back(grad_spec(op::cross_entropy, 4, 0, 6, 2029, "cross_entropy"));
  v.push_back(grad_spec(op::matmul_adjoint, 5, 7, 9, 2030, "matmul_adjoint"));
  for (int i = 0; i < pos_scheme_count(); ++i)
    for (auto n : {norm_kind::layernorm, norm_kind::rmsnorm}) {
      const auto s = static_cast<pos_scheme>(i);
      v.push_back(model_spec(s, n, 7, "model",
                             fmt::format("model_{}{}", pos_scheme_name(s),
                                         n == norm_kind::layernorm ? "" : "_rmsnorm")));
    }
  {  // check mode: relative loss difference against 1e-4 (derived in ops_cases.hpp)
    spec c;
    c.o = op::model_float;
    c.seed = 11;
    c.group = "model";
    c.name = "float_vs_double";
    v.push_back(c);
  }
  // Check mode: the matmul bound (gamma_{K+1}(u_T) + gamma_{K+1}(2^-64)) mag and the GELU bounds
  // 8u|x|, 32u(1 + x^2)|dy| + 2u (derived in ops_cases.hpp).
  for (auto o : {op::matmul_nn, op::matmul_nt, op::matmul_tn})
    v.push_back(matmul(o, 17, 59, 37, 3, true, 2031, "fast"));
  v.push_back(gelu_check(17, "fast"));
  return v;
}

std::vector<spec> make_full() {
  std::vector<spec> v;
  // Check mode with the bounds of ops_cases.hpp (matmul, gelu); grad mode against
  // gradcheck_tolerance (model_seed3).
  uint64_t seed = 2100;
  for (auto o : {op::matmul_nn, op::matmul_nt, op::matmul_tn})
    for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                           {3, 59, 16},
                           {4, 300, 37},
                           {17, 1, 129},
                           {17, 300, 1},
                           {33, 64, 256}})
      for (bool acc : {false, true})
        v.push_back(matmul(o, M, K, N, acc ? 5 : 0, acc, seed++, "matmul"));
  for (int64_t n : {1, 3, 7, 8, 9, 15, 17, 100}) v.push_back(gelu_check(n, "gelu"));
  for (int i = 0; i < pos_scheme_count(); ++i) {
    const auto s = static_cast<pos_scheme>(i);
    v.push_back(model_spec(s, norm_kind::rmsnorm, 3, "model_seed3",
                           fmt::format("model_seed3/{}_rmsnorm", pos_scheme_name(s))));
  }
  return v;
}

std::vector<spec> make_perf() {
  auto mm = matmul(op::matmul_nn, 2048, 64, 256, 0, false, 7, "model");
  mm.dtypes = f32;
  mm.name = "model/matmul_nn/M=2048/K=64/N=256";
  auto g = gelu_check(524288, "model");
  g.dtypes = f32;
  g.name = "model/gelu/n=524288";
  return {mm, g};
}

}  // namespace

const std::vector<spec>& check_cases() {
  return case_list<make_check>();
}

const std::vector<spec>& full_cases() {
  return case_list<make_full>();
}

const std::vector<spec>& perf_cases() {
  return case_list<make_perf>();
}

spec perf_quick(const spec& c) {
  spec r = c;
  if (c.o == op::gelu)
    r.N = 4096;
  else
    r.M = 64;
  return r;
}

}  // namespace posenc::model::ops_cases
