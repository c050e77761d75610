// Forgetting Attention (Lin et al. 2025; posenc/encodings/forgetting.hpp), a score bias reached by
// name with a tensor parameter: the engine against attention written out from the paper's sum of
// log gates (no running sums), its gates' gradient against finite differences, packing and the KV
// cache, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/forgetting.hpp"

using namespace posenc;

namespace {

// N tokens, causal self-attention, gates log sigmoid(z), z ~ N(1, 2^2): log f in about [-7, 0].
template <typename Real>
struct fox_problem {
  int64_t N, Hq = 4, Hkv = 2, D = 16;
  std::vector<Real> q, k, v, gates;
  explicit fox_problem(int64_t n, uint64_t seed = 7) : N(n) {
    rng r(seed);
    for (auto* x : {&q, &k}) {
      x->resize(N * (x == &q ? Hq : Hkv) * D);
      for (auto& e : *x) e = static_cast<Real>(r.normal());
    }
    v.resize(N * Hkv * D);
    for (auto& e : v) e = static_cast<Real>(r.normal());
    gates.resize(N * Hq);
    for (auto& e : gates) e = static_cast<Real>(fox_log_gate(1 + 2 * r.normal()));
  }
  named_scheme fox(int64_t S, int64_t first = 0) const {
    named_scheme n{"fox"};
    named_tensor t{"fox", {S, Hq}, {}, {}};
    if constexpr (std::is_same_v<Real, float>)
      t.f32 = std::span<const float>(gates.data() + first * Hq, S * Hq);
    else
      t.f64 = std::span<const double>(gates.data() + first * Hq, S * Hq);
    n.tensors.push_back(t);
    return n;
  }
  attention_params<Real> params(std::vector<Real>& out) const {
    attention_params<Real> p;
    out.assign(N * Hq * D, Real(0));
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
    p.T = N, p.S = N, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.causal = true;
    p.pos.named = {fox(N)};
    return p;
  }
  // The paper's form: s_ij = q_i . k_j / sqrt(D) + sum_{l = j+1 .. i} log f_l, causal softmax.
  // max_dot: the largest sum_e |q_e k_e| / sqrt(D), max_bias the largest |bias|, over visible
  // pairs.
  std::vector<double> written_out(double* max_dot = nullptr, double* max_bias = nullptr) const {
    std::vector<double> out(N * Hq * D, 0.0), s(N);
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < N; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0, abs_dot = 0;
          for (int64_t e = 0; e < D; ++e) {
            const double x = double(q[(i * Hq + h) * D + e]);
            const double y = double(k[(j * Hkv + h / (Hq / Hkv)) * D + e]);
            dot += x * y, abs_dot += std::abs(x * y);
          }
          double bias = 0;
          for (int64_t l = j + 1; l <= i; ++l) bias += double(gates[l * Hq + h]);
          s[j] = dot / std::sqrt(double(D)) + bias;
          m = std::max(m, s[j]);
          if (max_dot) *max_dot = std::max(*max_dot, abs_dot / std::sqrt(double(D)));
          if (max_bias) *max_bias = std::max(*max_bias, std::abs(bias));
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - m));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < D; ++e)
            out[(i * Hq + h) * D + e] += s[j] / sum * double(v[(j * Hkv + h / (Hq / Hkv)) * D + e]);
      }
    return out;
  }
};

template <typename Real>
double max_dev(const std::vector<Real>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t x = 0; x < a.size(); ++x) d = std::max(d, std::abs(double(a[x]) - b[x]));
  return d;
}

}  // namespace

TEST(Fox, DeclaredAsATensorScheme) {
  const scheme_decl& d = scheme_decl_of("fox");
  ASSERT_NE(d.named, nullptr);
  EXPECT_TRUE(is_tensor_scheme(d));
  EXPECT_TRUE(d.learned);
  EXPECT_TRUE(d.causal_only);
  EXPECT_TRUE(named_bias_by_token(d));
  EXPECT_EQ(tensor_param_shape(d.params[0], 3, 5, 4, 2, 8), (std::vector<int64_t>{5, 4}));
  EXPECT_THROW(named_bias_value(d, {}, 0, 4, 1, 0), invalid_argument);
}

TEST(Fox, EngineEqualsThePapersSumOfLogGates) {
  // 150 tokens: three key blocks of the tiled paths, the last partial.
  const fox_problem<double> pd(150);
  const auto want = pd.written_out();
  for (const char* ref : {"0", "1"}) {
    setenv("POSENC_REFERENCE", ref, 1);
    std::vector<double> out;
    attention_forward(pd.params(out));
    // Double: each score within a few ulp of B, the softmax and the sum over 150 keys.
    EXPECT_LE(max_dev(out, want), 1e-12) << "POSENC_REFERENCE=" << ref;
  }
  unsetenv("POSENC_REFERENCE");
  // float32, u = 2^-24: the product within (D + 2) u A (A = max sum |q_e k_e| / sqrt(D)), the
  // bias rounded once and the two added, 3 u (A + |bias|) more: e_s. Each probability is then
  // within 2 e_s + (S + 4) u relative (the exponentials, the row sum of S terms, the division),
  // so each output within max|v| times that.
  const fox_problem<float> pf(150);
  double A = 0, Bb = 0, V = 0;
  const auto want32 = pf.written_out(&A, &Bb);
  for (float x : pf.v) V = std::max(V, double(std::abs(x)));
  const double u = 0x1p-24, e_s = (16 + 2) * u * A + 3 * u * (A + Bb);
  const double tol = V * (2 * e_s + (150 + 4) * u);
  std::vector<float> out;
  attention_forward(pf.params(out));
  EXPECT_LE(max_dev(out, want32), tol);
}

TEST(Fox, GateGradientEqualsFiniteDifferences) {
  fox_problem<double> pd(70);
  std::vector<double> out, lse(pd.N * pd.Hq), dout(pd.N * pd.Hq * pd.D);
  rng r(3);
  for (auto& e : dout) e = r.normal();
  auto loss = [&](const fox_problem<double>& x) {
    std::vector<double> o;
    auto p = x.params(o);
    attention_forward(p);
    double l = 0;
    for (size_t e = 0; e < o.size(); ++e) l += o[e] * dout[e];
    return l;
  };
  auto p = pd.params(out);
  p.lse = lse.data();
  attention_forward(p);
  std::vector<double> dq(pd.q.size()), dk(pd.k.size()), dv(pd.v.size()), dg(pd.gates.size());
  for (const char* ref : {"0", "1"}) {
    setenv("POSENC_REFERENCE", ref, 1);
    attention_grads<double> g;
    g.out = out.data(), g.lse = lse.data(), g.dout = dout.data();
    g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    g.named = {{"fox", dg}};
    attention_backward(p, g);
    double worst = 0;
    for (int64_t x = 0; x < pd.N * pd.Hq; x += 7) {
      fox_problem<double> a = pd, b = pd;
      const double e = 1e-5;
      a.gates[x] += e, b.gates[x] -= e;
      const double fd = (loss(a) - loss(b)) / (2 * e);
      // Central differences: truncation e^2 |L'''| / 6 and rounding 1e-16 |L| / e, both < 1e-8.
      worst = std::max(worst, std::abs(fd - dg[x]));
    }
    EXPECT_LE(worst, 1e-7) << "POSENC_REFERENCE=" << ref;
    // The first token's gate never lies strictly between a key and a query.
    for (int64_t h = 0; h < pd.Hq; ++h) EXPECT_LE(std::abs(dg[h]), 1e-14);
  }
  unsetenv("POSENC_REFERENCE");
}

TEST(Fox, PackedDocumentsEqualSeparateCalls) {
  const fox_problem<double> pd(150);
  std::vector<double> out;
  auto p = pd.params(out);
  const std::vector<int64_t> cu = {0, 60, 150};
  p.cu_seqlens = cu;
  attention_forward(p);
  for (int doc = 0; doc < 2; ++doc) {
    const int64_t a = cu[doc], n = cu[doc + 1] - cu[doc];
    std::vector<double> o(n * pd.Hq * pd.D);
    attention_params<double> s;
    s.q = &pd.q[a * pd.Hq * pd.D], s.k = &pd.k[a * pd.Hkv * pd.D], s.v = &pd.v[a * pd.Hkv * pd.D];
    s.out = o.data(), s.T = n, s.S = n, s.Hq = pd.Hq, s.Hkv = pd.Hkv, s.D = pd.D, s.causal = true;
    s.pos.named = {pd.fox(n, a)};
    attention_forward(s);
    double dev = 0;
    for (size_t x = 0; x < o.size(); ++x)
      dev = std::max(dev, std::abs(o[x] - out[a * pd.Hq * pd.D + x]));
    EXPECT_LE(dev, 1e-13) << "document " << doc;
  }
}

TEST(Fox, CacheDecodeEqualsTheFullForward) {
  // The gates of every cached token are passed at each step: the running sum continues.
  const fox_problem<double> pd(40);
  std::vector<double> full;
  attention_forward(pd.params(full));
  kv_cache<double> cache(pd.N, pd.Hkv, pd.D);
  std::vector<double> out(pd.N * pd.Hq * pd.D);
  for (int64_t t = 0; t < pd.N; ++t) {
    cache.append(&pd.k[t * pd.Hkv * pd.D], &pd.v[t * pd.Hkv * pd.D], 1);
    attention_params<double> p;
    p.q = &pd.q[t * pd.Hq * pd.D], p.out = &out[t * pd.Hq * pd.D];
    p.T = 1, p.Hq = pd.Hq, p.D = pd.D, p.causal = true;
    p.pos.named = {pd.fox(t + 1)};
    attention_forward_cached(p, cache);
  }
  double dev = 0;
  for (size_t x = 0; x < out.size(); ++x) dev = std::max(dev, std::abs(out[x] - full[x]));
  EXPECT_LE(dev, 1e-13);
}

TEST(Fox, ErrorsNameTheArgument) {
  fox_problem<double> pd(8);
  std::vector<double> out;
  auto expect_error = [&](const attention_params<double>& p, const std::string& part) {
    try {
      attention_forward(p);
      ADD_FAILURE() << "no error, expected " << part;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto p = pd.params(out);
  p.causal = false;
  expect_error(p, "fox needs causal attention");
  p = pd.params(out);
  p.pos.named[0].tensors[0].shape = {8, 3};
  expect_error(p, "fox must have shape (S, Hq) = (8, 4), got (8, 3)");
  p = pd.params(out);
  p.pos.named[0].tensors.clear();
  expect_error(p, "fox: tensor parameter fox (S, Hq) is required");
  fox_problem<double> bad = pd;
  bad.gates[5] = 0.25;  // the gate itself, not its log
  expect_error(bad.params(out), "pass log f");
  bad.gates[5] = NAN;
  expect_error(bad.params(out), "finite and <= 0");
  p = pd.params(out);
  named_tensor f32{"fox", {8, 4}, std::span<const float>(), {}};
  p.pos.named[0].tensors = {f32};
  expect_error(p, "a float64 call needs 32 float64 values");
}
