// Finite-difference gradient checks in double (see gradcheck.hpp for the error bound).
#include "posenc/model/gradcheck.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/model/ops.hpp"

namespace posenc::model {
namespace {

std::vector<double> randn(rng& r, int64_t n, double scale = 1.0) {
  std::vector<double> v(n);
  for (auto& x : v) x = r.normal() * scale;
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

check_result make(const std::string& name, const std::string& claim, double err, double tol,
                  const std::string& detail) {
  return measured_check("gradients", name, claim, err, tol, detail);
}

const char* k_fd_detail =
    "central differences h = 1e-6 in double; error normalised by max(max|g|, 1e-3) per tensor; "
    "rounding 4 eps |f| / 2h ~ 7e-10 plus truncation h^2 |f'''| / 6 ~ 2e-10 give <~ 1e-6, "
    "tolerance 1e-5";

}  // namespace

double finite_difference_error(std::vector<double>& x, const std::function<double()>& f,
                               const std::vector<double>& analytic) {
  double scale = gradcheck_floor;
  for (double g : analytic) scale = std::max(scale, std::abs(g));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + gradcheck_step;
    const double fp = f();
    x[i] = x0 - gradcheck_step;
    const double fm = f();
    x[i] = x0;
    const double fd = (fp - fm) / (2 * gradcheck_step);
    const double e = std::abs(fd - analytic[i]) / scale;
    if (!(e <= worst)) worst = e;  // keeps NaN
  }
  return worst;
}

model_config gradcheck_model_config(pos_scheme s, norm_kind n) {
  model_config c;
  c.vocab = 7;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  c.d_ff = 12;
  c.scheme = s;
  c.norm = n;
  c.pos = position_options_for_gradcheck();
  c.pos.max_positions = 16;
  c.init_std = 0.3;
  return c;
}

batch gradcheck_batch() {
  batch b;
  b.B = 2;
  b.T = 5;
  b.tokens = {1, 4, 2, 6, 0, 3, 3, 5, 1, 2};
  b.positions = {0, 1, 2, 3, 4, 1, 3, 4, 8, 12};
  b.targets = {4, 2, -1, 0, 5, 3, 5, -1, 2, 6};
  return b;
}

double model_gradient_error(const model_config& c, uint64_t seed) {
  transformer<double> m(c);
  m.init(seed);
  const batch b = gradcheck_batch();
  m.forward(b);
  m.backward();
  const std::vector<double> g = m.grads();
  double worst = 0;
  for (const auto& t : m.layout().tensors) {
    std::vector<double> x(m.params().begin() + t.offset, m.params().begin() + t.offset + t.size);
    std::vector<double> an(g.begin() + t.offset, g.begin() + t.offset + t.size);
    auto f = [&] {
      std::copy(x.begin(), x.end(), m.params().begin() + t.offset);
      return m.forward(b);
    };
    const double e = finite_difference_error(x, f, an);
    std::copy(x.begin(), x.end(), m.params().begin() + t.offset);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

std::vector<check_result> gradient_checks() {
  // The models here are tiny: one thread avoids an OpenMP barrier per op on a shared machine
  // (thread-count independence is tested separately in tests/test_model_grad.cpp).
  const int threads = num_threads();
  set_num_threads(1);
  struct restore {
    int n;
    ~restore() { set_num_threads(n); }
  } restore_threads{threads};
  std::vector<check_result> out;
  rng r(2024);
  const double tol = gradcheck_tolerance;

  {  // linear: y = x W + b, loss <y, w>
    const int64_t n = 3, in = 4, o = 5;
    auto x = randn(r, n * in), w = randn(r, in * o), b = randn(r, o), wy = randn(r, n * o);
    std::vector<double> y(n * o), dx(n * in, 0), dw(in * o, 0), db(o, 0);
    auto f = [&] {
      linear_forward(x.data(), w.data(), b.data(), y.data(), n, in, o);
      return dot(y, wy);
    };
    linear_backward(x.data(), w.data(), wy.data(), dx.data(), dw.data(), db.data(), n, in, o);
    const double e = std::max({finite_difference_error(x, f, dx), finite_difference_error(w, f, dw),
                               finite_difference_error(b, f, db)});
    out.push_back(make("linear", "linear_backward matches central differences of y = x W + b", e,
                       tol, k_fd_detail));
  }
  for (bool ln : {true, false}) {  // LayerNorm / RMSNorm
    const int64_t n = 3, c = 6;
    auto x = randn(r, n * c, 2.0), g = randn(r, c), bb = randn(r, c), wy = randn(r, n * c);
    for (int64_t i = 0; i < n * c; ++i) x[i] += 0.5;  // nonzero mean
    std::vector<double> y(n * c), mean(n), rstd(n), dx(n * c, 0), dg(c, 0), db(c, 0);
    auto f = [&] {
      if (ln)
        layernorm_forward(x.data(), g.data(), bb.data(), y.data(), mean.data(), rstd.data(), n, c,
                          1e-5);
      else
        rmsnorm_forward(x.data(), g.data(), y.data(), rstd.data(), n, c, 1e-5);
      return dot(y, wy);
    };
    f();
    if (ln)
      layernorm_backward(x.data(), g.data(), mean.data(), rstd.data(), wy.data(), dx.data(),
                         dg.data(), db.data(), n, c);
    else
      rmsnorm_backward(x.data(), g.data(), rstd.data(), wy.data(), dx.data(), dg.data(), n, c);
    double e = std::max(finite_difference_error(x, f, dx), finite_difference_error(g, f, dg));
    if (ln) e = std::max(e, finite_difference_error(bb, f, db));
    out.push_back(make(ln ? "layernorm" : "rmsnorm",
                       ln ? "layernorm_backward matches central differences (x, gain, bias)"
                          : "rmsnorm_backward matches central differences (x, gain)",
                       e, tol, k_fd_detail));
  }
  {  // GELU
    std::vector<double> u = {-3.0, -1.7, -0.4, 0.0, 0.3, 0.9, 1.6, 2.5, 4.0};
    const int64_t n = static_cast<int64_t>(u.size());
    auto wy = randn(r, n);
    std::vector<double> y(n), du(n, 0);
    auto f = [&] {
      gelu_forward(u.data(), y.data(), n);
      return dot(y, wy);
    };
    gelu_backward(u.data(), wy.data(), du.data(), n);
    out.push_back(make("gelu", "gelu_backward matches central differences on [-3, 4]",
                       finite_difference_error(u, f, du), tol, k_fd_detail));
  }
  {  // embedding with a repeated index
    const int64_t rows = 5, c = 4;
    std::vector<int64_t> idx = {1, 3, 1, 0};
    const int64_t n = 4;
    auto table = randn(r, rows * c), wy = randn(r, n * c);
    std::vector<double> y(n * c), dt(rows * c, 0);
    auto f = [&] {
      embedding_forward(table.data(), idx.data(), y.data(), n, c, false);
      return dot(y, wy);
    };
    embedding_backward(idx.data(), wy.data(), dt.data(), n, c);
    out.push_back(make("embedding", "embedding_backward sums repeated rows (central differences)",
                       finite_difference_error(table, f, dt), tol, k_fd_detail));
  }
  {  // cross-entropy with unscored rows
    const int64_t n = 4, v = 6;
    std::vector<int64_t> tg = {2, -1, 5, 0};
    auto logits = randn(r, n * v, 2.0);
    std::vector<double> p(n * v), nll(n), dl(n * v);
    auto f = [&] {
      return cross_entropy_forward(logits.data(), tg.data(), p.data(), nll.data(), n, v);
    };
    f();
    cross_entropy_backward(p.data(), tg.data(), dl.data(), n, v, 1.0 / 3.0);
    out.push_back(
        make("cross_entropy",
             "cross_entropy_backward = (softmax - onehot) / #scored (central differences)",
             finite_difference_error(logits, f, dl), tol, k_fd_detail));
  }
  {  // adjoint identities of the three matmuls: <A B, C> = <B, A^T C> = <A, C B^T>
    const int64_t M = 5, K = 7, N = 9;
    auto A = randn(r, M * K), B = randn(r, K * N), C = randn(r, M * N);
    std::vector<double> AB(M * N), AtC(K * N), CBt(M * K);
    matmul_nn(A.data(), K, B.data(), N, AB.data(), N, M, K, N, false);
    matmul_tn(A.data(), K, C.data(), N, AtC.data(), N, K, M, N, false);
    matmul_nt(C.data(), N, B.data(), N, CBt.data(), K, M, N, K, false);
    const double lhs = dot(AB, C);
    const double e = std::max(std::abs(lhs - dot(B, AtC)), std::abs(lhs - dot(A, CBt))) /
                     std::max(1.0, std::abs(lhs));
    // Each inner product sums M*K*N ~ 315 products of O(1) terms: rounding <= 315 eps * sum|.|
    // ~ 315 * 1.1e-16 * 300 ~ 1e-11 relative to max(1, |lhs|); tolerance 1e-10.
    out.push_back(make("matmul_adjoint", "<A B, C> = <B, A^T C> = <A, C B^T> (nn, tn, nt)", e,
                       1e-10, "double; 315 products per inner product, rounding ~1e-11"));
  }
  std::vector<pos_scheme> all;
  for (int i = 0; i < static_cast<int>(pos_scheme::count); ++i)
    all.push_back(static_cast<pos_scheme>(i));
  for (auto s : all)
    for (auto n : {norm_kind::layernorm, norm_kind::rmsnorm}) {
      const auto c = gradcheck_model_config(s, n);
      const bool ln = n == norm_kind::layernorm;
      out.push_back(make(fmt::format("model_{}{}", pos_scheme_name(s), ln ? "" : "_rmsnorm"),
                         fmt::format("whole-model backward with {} matches central differences "
                                     "for every parameter (2 layers, {})",
                                     pos_scheme_name(s), ln ? "LayerNorm" : "RMSNorm"),
                         model_gradient_error(c, 7), tol, k_fd_detail));
    }
  {  // float forward against the double forward on the same parameters
    double worst = 0;
    for (auto s : all) {
      const auto c = gradcheck_model_config(s, norm_kind::layernorm);
      transformer<double> md(c);
      md.init(11);
      transformer<float> mf(c);
      std::copy(md.params().begin(), md.params().end(), mf.params().begin());
      for (size_t i = 0; i < md.params().size(); ++i) md.params()[i] = mf.params()[i];
      const batch b = gradcheck_batch();
      const double ld = md.forward(b), lf = mf.forward(b);
      worst = std::max(worst, std::abs(ld - lf) / std::abs(ld));
    }
    // Two layers of width 8 in float: each op rounds at 2^-24 ~ 6e-8 relative; about 30
    // dependent ops (norms, 3 matmuls per block, softmax, cross-entropy) amplify this to
    // <~ 30 * 6e-8 * condition (<~ 10) ~ 2e-5 in the loss; tolerance 1e-4.
    out.push_back(make("float_vs_double", "float forward loss agrees with the double forward",
                       worst, 1e-4, "relative loss difference; 30 float ops x 6e-8 x cond 10"));
  }
  return out;
}

}  // namespace posenc::model
