// Context extension (posenc/lab/extend.hpp): each method's config gives the frequencies of its
// paper's formula, reads back from its config.json form bit for bit, and leaves the trained
// model exactly as it was where the method changes nothing; PoSE's positions cover the target
// window; LongRoPE's search scores exactly its budget and keeps its best; bad input is an
// error naming the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <set>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/lab/extend.hpp"
#include "test_support.hpp"

using namespace posenc;
using namespace posenc::lab;
using model::pos_scheme;

namespace {

const bool ext_one_thread = (set_num_threads(1), true);

constexpr int64_t kD = 16, kL = 64, kS = 8;
constexpr double kTheta = 10000;

double omega(int64_t i) {
  return std::pow(kTheta, -2.0 * static_cast<double>(i) / static_cast<double>(kD));
}

// A tiny byte-level model trained on a generated text, with its held-out file.
struct ext_fixture {
  test::temp_dir d;
  lab_options o;
  task t;
  run_result trained;
  ext_fixture() {
    std::string train, held;
    rng r(11);
    for (int i = 0; i < 4000; ++i) train += static_cast<char>('a' + r.below(5) + (i % 7 == 0));
    for (int i = 0; i < 1200; ++i) held += static_cast<char>('a' + r.below(5) + (i % 7 == 0));
    write_file_atomic(d.file("train.txt"), train);
    write_file_atomic(d.file("held.txt"), held);
    o.task = task_kind::text;
    o.file = d.file("train.txt");
    o.eval_file = d.file("held.txt");
    o.eval_chars = 400;
    o.schemes = {pos_scheme::rope};
    o.train_min = o.train_max = 8;
    o.eval_lens = {8, 16, 64};
    o.steps = 6;
    o.batch_size = 4;
    o.d_model = 16;
    o.n_layers = 1;
    o.n_heads = 2;  // head dim 8
    o.d_ff = 32;
    o.sliding_eval = false;
    t = make_task(o.task, o.file, o.eval_file);
    validate(o, t);
    trained = train_and_evaluate(o, t, pos_scheme::rope, 0);
  }
  // The trained weights under `e`'s config for 8x, fine-tuned `steps` steps (0: zero-shot).
  lab_options extended(extension e, std::span<const double> lf = {}) const {
    lab_options x = o;
    x.rope = extension_config(e, 8, kTheta, 8, kS, lf);
    x.init_params = trained.final_params;
    x.steps = 0;
    return x;
  }
};

}  // namespace

// Each config against the formula of its source, at head dim 16, trained at 64, extended 8x.
TEST(Extension, ConfigsGiveTheirPapersFrequencies) {
  const int64_t half = kD / 2;
  auto freqs = [](extension e, int64_t seq_len, std::span<const double> lf = {}) {
    return rope_frequencies(extension_config(e, kD, kTheta, kL, kS, lf), seq_len);
  };
  for (int64_t n : {0, 64, 512, 1024}) {
    const rope_freqs none = freqs(extension::none, n), lin = freqs(extension::linear, n),
                     pose = freqs(extension::pose, n);
    for (int64_t i = 0; i < half; ++i) {
      EXPECT_NEAR(none.inv_freq[i], omega(i), 1e-15 * omega(i));
      EXPECT_NEAR(lin.inv_freq[i], omega(i) / kS, 1e-15 * omega(i));  // Chen et al., eq. 2
      EXPECT_EQ(pose.inv_freq[i], lin.inv_freq[i]);
    }
  }
  // Dynamic NTK (Peng et al., sec. 3.3): unscaled up to L, base theta (n / L)^(D / (D - 2)).
  for (int64_t n : {0, 32, 64, 128, 512}) {
    const rope_freqs f = freqs(extension::dynamic, n);
    const double base =
        kTheta * std::pow(std::max<double>(1.0, static_cast<double>(n) / kL), kD / (kD - 2.0));
    for (int64_t i = 0; i < half; ++i) {
      const double want = std::pow(base, -2.0 * static_cast<double>(i) / kD);
      EXPECT_NEAR(f.inv_freq[i], want, 1e-14 * want) << "n " << n << " pair " << i;
    }
    EXPECT_EQ(f.attention_factor, 1.0);
  }
  // Llama 3.1's smoothing: wavelengths below L / 4 kept, above L divided by s, in between
  // (1 - g) omega / s + g omega with g = (L / wavelength - 1) / (4 - 1).
  const rope_freqs l3 = freqs(extension::llama3, 512);
  int kept = 0, divided = 0, mixed = 0;
  for (int64_t i = 0; i < half; ++i) {
    const double w = omega(i), wl = 2 * std::numbers::pi / w;
    double want;
    if (wl < kL / 4.0) {
      want = w;
      ++kept;
    } else if (wl > kL) {
      want = w / kS;
      ++divided;
    } else {
      const double g = (kL / wl - 1) / 3;
      want = (1 - g) * w / kS + g * w;
      ++mixed;
    }
    EXPECT_NEAR(l3.inv_freq[i], want, 1e-14 * want) << "pair " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(mixed, 0);
  // YaRN: the highest frequency kept, the lowest divided by s, a = 0.1 ln s + 1 (eq. 22).
  const rope_freqs y = freqs(extension::yarn, 512);
  EXPECT_EQ(y.inv_freq[0], omega(0));
  EXPECT_NEAR(y.inv_freq[half - 1], omega(half - 1) / kS, 1e-15);
  EXPECT_NEAR(y.attention_factor, 0.1 * std::log(8.0) + 1, 1e-15);
  // LongRoPE: omega_i / lambda_i beyond the original length, unscaled within it, and
  // a = sqrt(1 + ln s / ln L) at every length.
  const std::vector<double> lf = {1, 1.5, 2, 3, 5, 8, 8, 9};
  for (int64_t n : {32, 64, 65, 512}) {
    const rope_freqs f = freqs(extension::longrope, n, lf);
    for (int64_t i = 0; i < half; ++i) {
      const double want = n > kL ? omega(i) / lf[i] : omega(i);
      EXPECT_NEAR(f.inv_freq[i], want, 1e-15 * want) << "n " << n << " pair " << i;
    }
    EXPECT_NEAR(f.attention_factor, std::sqrt(1 + std::log(8.0) / std::log(64.0)), 1e-15);
  }
  // Every config reads back from its config.json form with the same frequencies, bit for bit.
  for (extension e : extensions())
    for (int64_t n : {0, 64, 512, 1024}) {
      const rope_config c = extension_config(e, kD, kTheta, kL, kS, lf);
      const rope_config back =
          rope_config_from_json(nlohmann::json(rope_config_to_json(c)), nullptr);
      const rope_freqs a = rope_frequencies(c, n), b = rope_frequencies(back, n);
      EXPECT_EQ(a.inv_freq, b.inv_freq) << extension_name(e) << " at " << n;
      EXPECT_EQ(a.attention_factor, b.attention_factor) << extension_name(e) << " at " << n;
    }
}

// Zero steps under the config that changes nothing is the trained model, bit for bit; so is
// dynamic NTK at lengths up to the training length, where it does not scale.
TEST(Extension, ZeroShotWithoutAChangeIsTheTrainedModel) {
  const ext_fixture f;
  ASSERT_TRUE(f.trained.completed);
  const run_result none = train_and_evaluate(f.extended(extension::none), f.t, pos_scheme::rope, 0);
  const run_result dyn =
      train_and_evaluate(f.extended(extension::dynamic), f.t, pos_scheme::rope, 0);
  const run_result lin =
      train_and_evaluate(f.extended(extension::linear), f.t, pos_scheme::rope, 0);
  ASSERT_TRUE(none.completed);
  EXPECT_EQ(none.steps_done, 0);
  EXPECT_EQ(none.final_params, f.trained.final_params);
  for (size_t k = 0; k < f.o.eval_lens.size(); ++k) {
    EXPECT_EQ(none.evals[k].loss, f.trained.evals[k].loss) << f.o.eval_lens[k];
    if (f.o.eval_lens[k] <= f.o.train_max)
      EXPECT_EQ(dyn.evals[k].loss, f.trained.evals[k].loss) << f.o.eval_lens[k];
    else
      EXPECT_NE(dyn.evals[k].loss, f.trained.evals[k].loss) << f.o.eval_lens[k];
    EXPECT_NE(lin.evals[k].loss, f.trained.evals[k].loss) << f.o.eval_lens[k];
  }
  // A fine-tune moves the weights; PoSE trains at 8 with positions over [0, 64).
  lab_options ft = f.extended(extension::pose);
  ft.steps = 2;
  ft.pose_target = 64;
  validate(ft, f.t);
  const run_result p = train_and_evaluate(ft, f.t, pos_scheme::rope, 0);
  EXPECT_EQ(p.steps_done, 2);
  EXPECT_NE(p.final_params, f.trained.final_params);
}

// PoSE's positions: start at 0, increase, one skip u in [0, N - L] at a cut in [1, L - 1];
// over many draws every position of [0, N) and both extreme skips occur.
TEST(Extension, PosePositionsCoverTheTargetWindow) {
  rng r(3);
  const int64_t L = 8, N = 40;
  std::set<int64_t> seen, skips, cuts;
  std::vector<int64_t> pos(L);
  for (int k = 0; k < 4000; ++k) {
    pose_positions(r, L, N, pos.data());
    EXPECT_EQ(pos[0], 0);
    int64_t cut = -1;
    for (int64_t j = 1; j < L; ++j) {
      ASSERT_GT(pos[j], pos[j - 1]);
      if (pos[j] - pos[j - 1] != 1) {  // the cut (invisible when the skip is 0)
        ASSERT_EQ(cut, -1) << "two skips";
        cut = j;
      }
    }
    ASSERT_LE(pos[L - 1], N - 1);
    skips.insert(pos[L - 1] - (L - 1));
    if (cut > 0) cuts.insert(cut);
    seen.insert(pos.begin(), pos.end());
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), N);
  EXPECT_EQ(*skips.begin(), 0);
  EXPECT_EQ(*skips.rbegin(), N - L);
  EXPECT_EQ(*cuts.begin(), 1);
  EXPECT_EQ(*cuts.rbegin(), L - 1);
  EXPECT_THROW(pose_positions(r, 1, N, pos.data()), invalid_argument);
  EXPECT_THROW(pose_positions(r, L, L - 1, pos.data()), invalid_argument);
}

// The search scores exactly its budget, keeps the best (never worse than linear
// interpolation, one of its seeds), and its divisors satisfy the constraint; deterministic.
TEST(Extension, LongRopeSearchScoresItsBudgetAndKeepsTheBest) {
  const ext_fixture f;
  model::transformer<float> m(lab_model_config(f.o, f.t, pos_scheme::rope));
  m.params() = f.trained.final_params;
  longrope_search_options so;
  so.train_len = 8;
  so.factor = kS;
  so.budget = 7;
  so.parents = 2;
  so.children = 3;
  so.begin = 400;
  so.end = 1200;
  const longrope_search_result a = longrope_search(m, f.o, f.t, so);
  const longrope_search_result b = longrope_search(m, f.o, f.t, so);
  EXPECT_EQ(a.evaluated, 7);
  ASSERT_EQ(a.scores.size(), 7u);
  EXPECT_EQ(a.loss, *std::min_element(a.scores.begin(), a.scores.end()));
  EXPECT_EQ(a.linear_loss, a.scores[0]);
  EXPECT_LE(a.loss, a.linear_loss);
  ASSERT_EQ(a.long_factor.size(), 4u);  // head dim 8
  for (size_t i = 0; i < a.long_factor.size(); ++i) {
    EXPECT_GE(a.long_factor[i], 1.0);
    EXPECT_LE(a.long_factor[i], 2.0 * kS);
    if (i > 0) {
      EXPECT_GE(a.long_factor[i], a.long_factor[i - 1]);
    }
  }
  EXPECT_EQ(a.long_factor, b.long_factor);
  EXPECT_EQ(a.scores, b.scores);
  // The score is held_out_loss of the model under the candidate's config at s L.
  model::model_config c = m.config();
  c.pos.rope = extension_config(extension::longrope, 8, kTheta, 8, kS, a.long_factor);
  model::transformer<float> best(c);
  best.params() = m.params();
  EXPECT_EQ(held_out_loss(best, f.o, f.t, 64, 400, 1200), a.loss);
  EXPECT_THROW(held_out_loss(best, f.o, f.t, 64, 400, 450), invalid_argument);
  so.budget = 2;
  EXPECT_THROW(longrope_search(m, f.o, f.t, so), invalid_argument);
}

TEST(Extension, BadInputIsAClearError) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { extension_from_name("ntk", "--extension"); }).find("--extension"),
            std::string::npos);
  EXPECT_NE(message([] { extension_from_name("ntk"); }).find("longrope"), std::string::npos);
  EXPECT_NE(message([] {
              extension_config(extension::longrope, 16, kTheta, 64, 8, std::vector<double>(3, 2));
            }).find("long_factor"),
            std::string::npos);
  EXPECT_NE(message([] { extension_config(extension::linear, 16, kTheta, 64, 0); }).find("factor"),
            std::string::npos);
  const ext_fixture f;
  lab_options o = f.extended(extension::linear);
  o.schemes = {pos_scheme_from_name("alibi")};
  EXPECT_NE(message([&] { validate(o, f.t); }).find("alibi"), std::string::npos);
  o = f.o;
  o.pose_target = 4;
  EXPECT_NE(message([&] { validate(o, f.t); }).find("pose_target"), std::string::npos);
  o = f.o;
  o.steps = 0;  // zero steps only from given weights
  EXPECT_NE(message([&] { validate(o, f.t); }).find("--steps"), std::string::npos);
  o = f.extended(extension::none);
  o.init_params.pop_back();
  EXPECT_NE(message([&] { train_and_evaluate(o, f.t, pos_scheme::rope, 0); }).find("init_params"),
            std::string::npos);
}
