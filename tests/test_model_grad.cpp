// The lab's transformer ops through their case table (ops_cases.hpp): finite-difference gradient
// checks in double for every op and for the whole model with each position scheme, the matmul
// and GELU fast paths against their references; golden values of the forward ops (computed with
// python3 from the papers' formulas, pasted below), the optimizer schedule, and determinism.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "case_tables.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/model/ops.hpp"
#include "posenc/model/transformer.hpp"
#include "posenc/verify/gradcheck.hpp"
#include "posenc/verify/ops_cases.hpp"

using namespace posenc;
using namespace posenc::model;

TEST(Gradients, EveryCheckPasses) {
  const auto checks = gradient_checks();
  EXPECT_GE(checks.size(), 16u);
  for (const auto& c : checks) {
    EXPECT_TRUE(c.passed) << c.name << ": max_error " << c.max_error << " > " << c.tolerance;
    EXPECT_TRUE(std::isfinite(c.max_error)) << c.name;
  }
}

TEST(Gradients, CheckerRejectsAWrongGradient) {
  // The same harness must fail when the analytic gradient is off by 1%: f = sum_i x_i^3 / 3,
  // gradient x_i^2.
  std::vector<double> x = {0.5, -1.2, 2.0, 0.1};
  auto f = [&] {
    double s = 0;
    for (double v : x) s += v * v * v / 3;
    return s;
  };
  std::vector<double> right, wrong;
  for (double v : x) {
    right.push_back(v * v);
    wrong.push_back(1.01 * v * v);
  }
  EXPECT_LT(finite_difference_error(x, f, right), gradcheck_tolerance);
  EXPECT_GT(finite_difference_error(x, f, wrong), 1e-3);
}

// The rest of the case table (include/posenc/verify/ops_cases.hpp): the matmul kernels against a
// plain long double loop (awkward, strided and accumulating shapes, float32 and float64) and the
// SIMD GELU against the formula (every tail length) within the bounds derived there; the whole
// model with RMSNorm for every scheme from a second seed.
TEST(Gradients, FullCaseTable) {
  set_num_threads(1);  // tiny models: avoid an OpenMP barrier per op
  auto ran = test::run_cases(
      ops_cases::full_cases(), [](const ops_cases::spec&) { return true; },
      [](const ops_cases::spec& c) { return ops_cases::run_case(c); });
  set_num_threads(0);
  EXPECT_EQ(ran["matmul"], 36);
  EXPECT_EQ(ran["gelu"], 8);
  EXPECT_EQ(ran["model_seed3"], pos_scheme_count());
}

// Golden values: python3, math module.
//   gelu(u) = 0.5 u (1 + tanh(sqrt(2/pi)(u + 0.044715 u^3)))
//   gelu(1) = 0.8411919906082768, gelu(-0.5) = -0.15428599017485606, gelu(2) = 1.954597694087775
TEST(Ops, GeluGolden) {
  const double u[3] = {1.0, -0.5, 2.0};
  double y[3];
  gelu_forward(u, y, 3);
  // tanh and the polynomial in double: a few ulp, well under 1e-15 absolute at these values.
  EXPECT_NEAR(y[0], 0.8411919906082768, 1e-15);
  EXPECT_NEAR(y[1], -0.15428599017485606, 1e-15);
  EXPECT_NEAR(y[2], 1.954597694087775, 1e-15);
}

// LayerNorm of [1, 2, 3, 4], g = 1, b = 0, eps = 1e-5: mean 2.5, var 1.25,
//   (x - 2.5) / sqrt(1.25 + 1e-5) = [-1.3416354199689269, -0.447211806656309, ...]
// RMSNorm: ms = 7.5, x / sqrt(7.5 + 1e-5) = [0.3651481282381064, 0.7302962564762128,
//   1.0954443847143192, 1.4605925129524255]
TEST(Ops, NormGolden) {
  const double x[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, b[4] = {0, 0, 0, 0};
  double y[4], mean, rstd;
  layernorm_forward(x, g, b, y, &mean, &rstd, 1, 4, 1e-5);
  const double ln[4] = {-1.3416354199689269, -0.447211806656309, 0.447211806656309,
                        1.3416354199689269};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], ln[i], 1e-15);
  rmsnorm_forward(x, g, y, &rstd, 1, 4, 1e-5);
  const double rms[4] = {0.3651481282381064, 0.7302962564762128, 1.0954443847143192,
                         1.4605925129524255};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], rms[i], 1e-15);
}

// Uniform logits over V = 7 classes: loss = ln 7 = 1.9459101490553132 for any target.
TEST(Ops, CrossEntropyUniform) {
  std::vector<double> logits(2 * 7, 0.25), p(14), nll(2);
  const int64_t t[2] = {3, -1};
  EXPECT_NEAR(cross_entropy_forward(logits.data(), t, p.data(), nll.data(), 2, 7),
              1.9459101490553132, 1e-15);
  EXPECT_EQ(nll[1], 0.0);  // unscored row
}

RC_GTEST_PROP(Ops, MatmulMatchesNaive, ()) {
  const int64_t M = *rc::gen::inRange(1, 19), K = *rc::gen::inRange(1, 300),
                N = *rc::gen::inRange(1, 37);
  std::vector<float> a(M * K), b(K * N), c(M * N, 1.0f), ref(M * N);
  for (auto& v : a) v = static_cast<float>(*rc::gen::inRange(-100, 101)) / 64;
  for (auto& v : b) v = static_cast<float>(*rc::gen::inRange(-100, 101)) / 64;
  // Products of multiples of 1/64 bounded by 100/64 are exact in float and their sums (|.| <=
  // 300 * 2.5 = 750, multiples of 1/4096) stay exact below 2^24 / 4096 = 4096: bitwise equal.
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 1.0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(a[i * K + k]) * b[k * N + j];
      ref[i * N + j] = static_cast<float>(s);
    }
  matmul_nn(a.data(), K, b.data(), N, c.data(), N, M, K, N, true);
  RC_ASSERT(c == ref);
}

// learning_rate with lr = 1e-2, warm-up 10, total 110, min 10%: python3 gives
//   step 0: 0.001, 4: 0.005, 9: 0.01, 10: 0.01, 60: 0.0055, 110: 0.001, 200: 0.001
TEST(Optimizer, ScheduleGolden) {
  adamw_config c;
  c.lr = 1e-2;
  c.warmup = 10;
  c.total = 110;
  c.min_lr_frac = 0.1;
  const std::pair<int64_t, double> want[] = {{0, 0.001},   {4, 0.005},   {9, 0.01},   {10, 0.01},
                                             {60, 0.0055}, {110, 0.001}, {200, 0.001}};
  for (auto [s, v] : want) EXPECT_NEAR(learning_rate(c, s), v, 1e-15) << "step " << s;
}

// First AdamW step (Loshchilov and Hutter 2019): the bias-corrected m/sqrt(v) = g/|g|, so
// p1 = p0 - lr (sign(g) |g| / (|g| + eps) + wd p0) on decayed tensors, no wd on the others.
TEST(Optimizer, FirstAdamWStep) {
  model_config c = gradcheck_model_config(pos_scheme::nope, norm_kind::layernorm);
  const param_layout L = make_layout(c);
  std::vector<double> p(L.total, 0.5), g(L.total);
  for (int64_t i = 0; i < L.total; ++i) g[i] = (i % 3 == 0) ? -2.0 : 0.25;
  adamw_config a;
  a.lr = 0.1;
  a.warmup = 0;
  a.total = 100;
  a.weight_decay = 0.5;
  a.eps = 1e-8;
  adamw_state st;
  adamw_update(a, L, p, g, st);
  EXPECT_EQ(st.step, 1);
  for (const auto& t : L.tensors) {
    const double wd = t.decay ? 0.5 : 0.0;
    for (int64_t i = t.offset; i < t.offset + t.size; i += 7) {
      const double gi = g[i];
      const double want = 0.5 - 0.1 * (gi / (std::abs(gi) + 1e-8) + wd * 0.5);
      EXPECT_NEAR(p[i], want, 1e-7) << t.name;  // m, v stored in float: relative 6e-8
    }
  }
}

TEST(Optimizer, ClipGradNorm) {
  std::vector<double> g = {3.0, 4.0};
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 1.0), 5.0);
  EXPECT_NEAR(g[0], 0.6, 1e-15);
  EXPECT_NEAR(g[1], 0.8, 1e-15);
  std::vector<double> h = {0.3, 0.4};
  clip_grad_norm(h, 1.0);
  EXPECT_EQ(h[0], 0.3);  // below the clip: untouched
}

TEST(Model, BitwiseIdenticalAcrossThreadCounts) {
  for (auto s : {pos_scheme::rope, pos_scheme_from_name("t5"), pos_scheme_from_name("shaw")}) {
    model_config c = gradcheck_model_config(s, norm_kind::layernorm);
    c.d_model = 32;
    c.n_heads = 4;
    c.d_ff = 64;
    std::vector<float> g1, g2;
    double l1 = 0, l2 = 0;
    for (int th : {1, 2}) {
      set_num_threads(th);
      transformer<float> m(c);
      m.init(5);
      const double l = m.forward(gradcheck_batch());
      m.backward();
      (th == 1 ? g1 : g2) = m.grads();
      (th == 1 ? l1 : l2) = l;
    }
    set_num_threads(0);
    EXPECT_EQ(l1, l2) << pos_scheme_name(s);
    EXPECT_EQ(g1, g2) << pos_scheme_name(s);
  }
}

TEST(Model, LearnedTableHasNoRowPastItsLength) {
  model_config c = gradcheck_model_config(pos_scheme::learned, norm_kind::layernorm);
  c.pos.max_positions = 12;  // positions 0..11; the batch uses position 12
  transformer<float> m(c);
  m.init(1);
  const batch b = gradcheck_batch();
  EXPECT_NE(undefined_reason(c, b).find("no defined position"), std::string::npos);
  EXPECT_THROW(m.forward(b), posenc::invalid_argument);
}

TEST(Model, RejectsMalformedBatches) {
  model_config c = gradcheck_model_config(pos_scheme::rope, norm_kind::layernorm);
  transformer<float> m(c);
  batch b = gradcheck_batch();
  b.tokens[3] = 7;  // vocab is 7
  EXPECT_THROW(m.forward(b), posenc::invalid_argument);
  b = gradcheck_batch();
  b.positions[2] = 1;  // not increasing
  EXPECT_THROW(m.forward(b), posenc::invalid_argument);
  b = gradcheck_batch();
  b.targets.pop_back();
  EXPECT_THROW(m.forward(b), posenc::invalid_argument);
  c.d_model = 9;  // not divisible by 2 heads
  EXPECT_THROW(make_layout(c), posenc::invalid_argument);
}
