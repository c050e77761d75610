// The lab: task generators, determinism, checkpoints (round trip and every corruption), resume
// reproducing an uninterrupted run bitwise, undefined positions reported as such, and that a
// short run actually learns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/lab/lab.hpp"
#include "test_support.hpp"

using namespace posenc;
using namespace posenc::lab;
using model::pos_scheme;

namespace {

// Tiny models: one thread avoids an OpenMP barrier per op on a shared machine (the results do
// not depend on the thread count; tests/test_model_grad.cpp checks that bitwise).
const bool one_thread = (set_num_threads(1), true);

struct sample {
  std::vector<int64_t> tok, tgt;
};
sample draw(const task& t, int64_t L, uint64_t seed, bool eval = false) {
  sample s{std::vector<int64_t>(L), std::vector<int64_t>(L)};
  rng r(seed);
  task_sample(t, L, eval, r, s.tok.data(), s.tgt.data());
  return s;
}

lab_options tiny_options(const std::string& dir) {
  lab_options o;
  o.task = task_kind::passkey;
  o.schemes = {pos_scheme::rope};
  o.train_min = 9;
  o.train_max = 12;
  o.eval_lens = {16};
  o.steps = 12;
  o.seeds = 1;
  o.batch_size = 4;
  o.d_model = 16;
  o.n_layers = 1;
  o.n_heads = 2;
  o.d_ff = 32;
  o.eval_samples = 8;
  o.curve_every = 1;
  o.checkpoint_dir = dir;
  return o;
}

}  // namespace

TEST(Tasks, CopyFormat) {
  const task t = make_task(task_kind::copy);
  for (int64_t L : {5, 20, 23, 515}) {
    const auto s = draw(t, L, 3);
    const int64_t n = (L - 3) / 2;
    EXPECT_EQ(s.tok[0], 1);          // BOS
    EXPECT_EQ(s.tok[n + 1], 2);      // SEP
    EXPECT_EQ(s.tok[2 * n + 2], 3);  // EOS
    std::set<int64_t> syms(s.tok.begin() + 1, s.tok.begin() + 1 + n);
    EXPECT_EQ(static_cast<int64_t>(syms.size()), n);  // distinct
    int64_t scored = 0;
    for (int64_t i = 0; i < L; ++i) {
      if (i < n) {
        EXPECT_EQ(s.tok[1 + i], s.tok[n + 2 + i]);
      }
      if (s.tgt[i] >= 0) {
        ++scored;
        EXPECT_EQ(s.tgt[i], s.tok[i + 1]);
        EXPECT_GE(i, n + 1);
      }
    }
    EXPECT_EQ(scored, n + 1);  // the copy and EOS
    if ((L - 3) % 2) {
      EXPECT_EQ(s.tok[L - 1], 0);  // PAD
    }
  }
  EXPECT_THROW(task_validate_length(t, 516, "--eval-lens"), posenc::invalid_argument);
  EXPECT_THROW(task_validate_length(t, 4, "--train-len"), posenc::invalid_argument);
}

TEST(Tasks, PasskeyFormat) {
  const task t = make_task(task_kind::passkey);
  std::set<int64_t> depths;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const int64_t L = 40;
    const auto s = draw(t, L, seed);
    EXPECT_EQ(s.tok[0], 1);
    EXPECT_EQ(s.tok[L - 4], 3);  // QUERY
    int64_t mark = -1, marks = 0;
    for (int64_t i = 0; i < L; ++i)
      if (s.tok[i] == 2) {
        mark = i;
        ++marks;
      }
    ASSERT_EQ(marks, 1);
    depths.insert(mark);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(s.tok[mark + 1 + k], s.tok[L - 3 + k]);
      EXPECT_GE(s.tok[L - 3 + k], 4);
      EXPECT_LE(s.tok[L - 3 + k], 13);
      EXPECT_EQ(s.tgt[L - 4 + k], s.tok[L - 3 + k]);
    }
    // The key's digits are distinct (tasks.hpp says why).
    EXPECT_NE(s.tok[L - 3], s.tok[L - 2]);
    EXPECT_NE(s.tok[L - 3], s.tok[L - 1]);
    EXPECT_NE(s.tok[L - 2], s.tok[L - 1]);
    int64_t scored = 0;
    for (int64_t v : s.tgt) scored += v >= 0;
    EXPECT_EQ(scored, 3);
    for (int64_t v : s.tok) EXPECT_LT(v, t.vocab);
  }
  EXPECT_GT(depths.size(), 10u);  // the depth varies
}

TEST(Tasks, RepeatCountFormat) {
  const task t = make_task(task_kind::repeat_count);
  const auto s = draw(t, 21, 9);  // n = 9
  EXPECT_EQ(s.tok[10], 2);
  EXPECT_EQ(s.tok[20], 3);
  for (int64_t i = 1; i <= 9; ++i) EXPECT_EQ(s.tok[i], s.tok[1]);
  EXPECT_EQ(s.tgt[19], 3);  // the count: EOS after exactly n copies
  EXPECT_EQ(s.tgt[9], -1);
}

// Entropy rates computed by hand: every row uniform over 16 symbols -> ln 16 =
// 2.772588722239781; 2 symbols with every row (0.9, 0.1) -> H(0.9) = 0.3250829733914482.
TEST(Tasks, MarkovEntropyRate) {
  std::vector<double> uniform(16 * 16 * 16, 1.0 / 16);
  EXPECT_NEAR(markov_entropy_rate(uniform, 16), 2.772588722239781, 1e-12);
  std::vector<double> two(2 * 2 * 2);
  for (int s = 0; s < 4; ++s) {
    two[s * 2] = 0.9;
    two[s * 2 + 1] = 0.1;
  }
  EXPECT_NEAR(markov_entropy_rate(two, 2), 0.3250829733914482, 1e-12);
  const task t = make_task(task_kind::markov);
  EXPECT_GT(t.entropy_rate, 0.5);
  EXPECT_LT(t.entropy_rate, std::log(16.0));
  for (int64_t s = 0; s < 256; ++s) {
    double z = 0;
    for (int c = 0; c < 16; ++c) z += t.markov[s * 16 + c];
    EXPECT_NEAR(z, 1.0, 1e-12);
  }
  const auto x = draw(t, 100, 1);
  for (int64_t i = 0; i + 1 < 100; ++i) EXPECT_EQ(x.tgt[i], x.tok[i + 1]);
}

TEST(Tasks, TextWindowsComeFromTheirSplit) {
  test::temp_dir d;
  std::string text;
  for (int i = 0; i < 200; ++i) text += (i < 180 ? "ab" : "cd");  // last 10% is only c/d
  write_file_atomic(d.file("t.txt"), text);
  const task t = make_task(task_kind::text, d.file("t.txt"));
  EXPECT_EQ(t.vocab, 4);
  EXPECT_NO_THROW(task_validate_length(t, 16, "--eval-lens"));
  EXPECT_THROW(task_validate_length(t, 40, "--eval-lens"), posenc::invalid_argument);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto e = draw(t, 16, seed, true);
    for (int64_t v : e.tok) EXPECT_GE(v, 2);  // 'c' or 'd'
  }
  EXPECT_THROW(make_task(task_kind::text, d.file("missing.txt")), posenc::io_error);
}

TEST(Tasks, DeterministicPerSeed) {
  for (auto k : {task_kind::copy, task_kind::passkey, task_kind::repeat_count, task_kind::markov}) {
    const task t = make_task(k);
    EXPECT_EQ(draw(t, 31, 5).tok, draw(t, 31, 5).tok);
    EXPECT_NE(draw(t, 31, 5).tok, draw(t, 31, 6).tok);
  }
}

TEST(Checkpoint, RoundTripAndCorruption) {
  test::temp_dir d;
  model::checkpoint c;
  c.meta = R"({"config":{"a":1}})";
  c.params = {1.5f, -2.0f, 3.25f};
  c.opt.m = {0.1f, 0.2f, 0.3f};
  c.opt.v = {0.01f, 0.02f, 0.03f};
  c.opt.step = 42;
  const std::string p = d.file("c.ckpt");
  model::save_checkpoint(p, c);
  const auto back = model::load_checkpoint(p);
  EXPECT_EQ(back.meta, c.meta);
  EXPECT_EQ(back.params, c.params);
  EXPECT_EQ(back.opt.m, c.opt.m);
  EXPECT_EQ(back.opt.v, c.opt.v);
  EXPECT_EQ(back.opt.step, 42);
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));

  const auto bytes = read_file(p);
  auto expect_error = [&](std::vector<std::byte> b, const std::string& what) {
    write_file_atomic(d.file("bad.ckpt"), b);
    try {
      model::load_checkpoint(d.file("bad.ckpt"));
      ADD_FAILURE() << "no error for " << what;
    } catch (const posenc::io_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.ckpt"), std::string::npos) << e.what();
    }
  };
  auto flipped = bytes;
  flipped[40] ^= std::byte{0x10};  // one bit in the parameters
  expect_error(flipped, "CRC-32");
  expect_error(std::vector<std::byte>(bytes.begin(), bytes.end() - 5), "truncated");
  auto trailing = bytes;
  trailing.push_back(std::byte{0});
  expect_error(trailing, "trailing");
  auto magic = bytes;
  magic[0] = std::byte{'X'};
  expect_error(magic, "magic");
  auto version = bytes;
  version[8] = std::byte{9};
  expect_error(version, "version");
  expect_error(std::vector<std::byte>(bytes.begin(), bytes.begin() + 10), "truncated");
  EXPECT_THROW(model::load_checkpoint(d.file("none.ckpt")), posenc::io_error);
}

TEST(Lab, ResumeReproducesAnUninterruptedRun) {
  test::temp_dir a, b;
  const lab_options full = tiny_options(a.path);
  const task t = make_task(full.task);
  const run_result ref = train_and_evaluate(full, t, pos_scheme::rope, 0);
  ASSERT_TRUE(ref.completed);

  lab_options part = tiny_options(b.path);
  part.checkpoint_every = 2;
  part.stop_after = 5;  // "killed" after step 5; the last checkpoint is written at stop
  const run_result first = train_and_evaluate(part, t, pos_scheme::rope, 0);
  EXPECT_FALSE(first.completed);
  EXPECT_EQ(first.steps_done, 5);
  part.stop_after = -1;
  part.resume = true;
  const run_result second = train_and_evaluate(part, t, pos_scheme::rope, 0);
  EXPECT_TRUE(second.resumed);
  ASSERT_TRUE(second.completed);
  EXPECT_EQ(second.final_params, ref.final_params);  // bitwise
  ASSERT_EQ(second.curve.size(), ref.curve.size());
  for (size_t i = 0; i < ref.curve.size(); ++i) {
    EXPECT_EQ(second.curve[i].step, ref.curve[i].step);
    EXPECT_EQ(second.curve[i].loss, ref.curve[i].loss);
  }
  EXPECT_EQ(second.evals[0].loss, ref.evals[0].loss);
  EXPECT_EQ(second.in_distribution.token_accuracy, ref.in_distribution.token_accuracy);

  // Resuming with a different configuration is a clear error naming the field.
  lab_options other = part;
  other.lr = 1e-3;
  try {
    train_and_evaluate(other, t, pos_scheme::rope, 0);
    ADD_FAILURE() << "mismatched checkpoint accepted";
  } catch (const posenc::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lr"), std::string::npos) << e.what();
  }
  // A corrupted checkpoint is an io_error, not a silent restart.
  const std::string ck = b.file("passkey-rope-seed0.ckpt");
  auto bytes = read_file(ck);
  bytes[bytes.size() / 2] ^= std::byte{1};
  write_file_atomic(ck, bytes);
  EXPECT_THROW(train_and_evaluate(part, t, pos_scheme::rope, 0), posenc::io_error);
}

// The sharded step computes the gradient of the whole batch's mean loss: shards of 4, 4 and 2
// sequences against one forward/backward over all 10. The two differ only in the order of the
// float32 sums over the batch's N = 10 x 20 tokens and one rounding of each shard weight
// n_s / n, which moves an entry by at most about (N + 2) eps_f32 = 2.4e-5 times the sum of the
// magnitudes of its terms; 1e-4 of the largest entry leaves room for the terms' spread. A wrong
// weight or a dropped shard changes entries by tens of percent.
TEST(Lab, ShardedStepIsTheWholeBatchGradient) {
  const task t = make_task(task_kind::passkey);
  lab_options o = tiny_options("");
  const model::model_config mc = lab_model_config(o, t, pos_scheme_from_name("alibi"));
  model::transformer<float> whole(mc), m(mc);
  whole.init(7);
  m.params() = whole.params();
  model::batch b;
  b.B = 10;
  b.T = 20;
  rng r(3);
  b.tokens.resize(200);
  b.targets.resize(200);
  b.positions.resize(200);
  for (int64_t s = 0; s < b.B; ++s) {
    task_sample(t, b.T, false, r, b.tokens.data() + s * b.T, b.targets.data() + s * b.T);
    for (int64_t j = 0; j < b.T; ++j) b.positions[s * b.T + j] = j;
  }
  const double loss_ref = whole.forward(b);
  whole.backward();
  std::vector<model::transformer<float>> reps(3, model::transformer<float>(mc));
  const double loss = sharded_forward_backward(m, reps, b);
  EXPECT_NEAR(loss, loss_ref, 1e-5 * std::abs(loss_ref));
  float gmax = 0;
  for (float g : whole.grads()) gmax = std::max(gmax, std::abs(g));
  ASSERT_GT(gmax, 0.0f);
  for (size_t i = 0; i < whole.grads().size(); ++i)
    ASSERT_NEAR(m.grads()[i], whole.grads()[i], 1e-4 * gmax) << "entry " << i;
  // The wrong number of replicas is an error, not a partial gradient.
  std::vector<model::transformer<float>> two(2, model::transformer<float>(mc));
  EXPECT_THROW(sharded_forward_backward(m, two, b), posenc::invalid_argument);
}

// Two threads run the shards concurrently and give bitwise the numbers of one.
TEST(Lab, ThreadCountDoesNotChangeTheNumbers) {
  lab_options o = tiny_options("");
  o.batch_size = 10;  // shards of 4, 4, 2
  const task t = make_task(o.task);
  set_num_threads(1);
  const run_result one = train_and_evaluate(o, t, pos_scheme_from_name("t5"), 0);
  set_num_threads(2);
  const run_result two = train_and_evaluate(o, t, pos_scheme_from_name("t5"), 0);
  set_num_threads(1);
  ASSERT_TRUE(one.completed && two.completed);
  EXPECT_EQ(one.final_params, two.final_params);
  EXPECT_EQ(one.evals[0].loss, two.evals[0].loss);
  EXPECT_EQ(one.in_distribution.token_accuracy, two.in_distribution.token_accuracy);
}

TEST(Lab, UndefinedPositionsAreReportedNotClamped) {
  lab_options o = tiny_options("");
  o.schemes = {pos_scheme::learned, pos_scheme_from_name("alibi")};
  o.steps = 2;
  o.eval_lens = {12, 20};
  const lab_results r = run_lab(o);
  ASSERT_EQ(r.runs.size(), 2u);
  const auto& learned = r.runs[0];
  EXPECT_TRUE(learned.evals[0].defined);  // 12 <= 12 rows
  EXPECT_FALSE(learned.evals[1].defined);
  EXPECT_TRUE(std::isnan(learned.evals[1].exact_match));
  EXPECT_NE(learned.evals[1].note.find("no defined position"), std::string::npos);
  EXPECT_TRUE(r.runs[1].evals[1].defined);  // ALiBi is defined everywhere
  const auto j = lab_results_json(r);
  int nulls = 0;
  for (const auto& row : j["results"])
    if (row["scheme"] == "learned" && row["eval_len"] == 20) {
      EXPECT_TRUE(row["exact_match"].is_null());
      EXPECT_TRUE(row["loss"].is_null());
      EXPECT_FALSE(row["defined"].get<bool>());
      ++nulls;
    }
  EXPECT_EQ(nulls, 1);
  for (const auto& row : j["summary"])
    if (row["scheme"] == "learned" && row["eval_len"] == 20) {
      EXPECT_TRUE(row["exact_match_mean"].is_null());
    }
}

TEST(Lab, RandomizedPositionsBeyondTheRangeAreUndefined) {
  lab_options o = tiny_options("");
  o.schemes = {pos_scheme::learned};
  o.steps = 2;
  o.randomized_positions = 16;
  o.eval_lens = {16, 20};
  const lab_results r = run_lab(o);
  EXPECT_TRUE(r.runs[0].evals[0].defined);  // table has 16 rows: positions from [0, 16)
  EXPECT_FALSE(r.runs[0].evals[1].defined);
  o.randomized_positions = 8;  // below the training length
  EXPECT_THROW(run_lab(o), posenc::invalid_argument);
}

TEST(Lab, ShortTrainingLearns) {
  // repeat-count at length 21 (n = 9): after the first copy, "predict the current token" gets
  // the next n - 1 = 8 of the 10 scored tokens right, a mapping a model learns in a few dozen
  // steps; an untrained model scores ~1/20 (uniform over the 20-token vocabulary).
  lab_options o = tiny_options("");
  o.task = task_kind::repeat_count;
  o.schemes = {pos_scheme_from_name("alibi")};
  o.train_min = o.train_max = 21;
  o.eval_lens = {21};
  o.steps = 100;
  o.batch_size = 8;
  o.d_model = 32;
  o.lr = 1e-2;
  o.eval_samples = 16;
  const lab_results r = run_lab(o);
  const auto& e = r.runs[0].evals[0];
  EXPECT_GT(e.token_accuracy, 0.6) << "loss " << e.loss;
  EXPECT_LT(e.loss, r.runs[0].curve.front().loss);
}

// The sinusoidal input is x_0 = E[token] + a PE(pos) with a = sqrt(2) init_std (model/
// transformer.hpp, sinusoidal_amplitude). At position 0 the paper's table (Vaswani et al. 2017,
// sec. 3.5, interleaved: PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i)) is exactly
// [0, 1, 0, 1, ...], so a NoPE model whose embedding row for the token is E + a [0, 1, 0, 1, ...]
// must compute the same loss. With init_std 0.5 (so the shift is not swamped), a = sqrt(2) * 0.5 =
// 1/sqrt(2) = 0.70710678118654752 (by hand). The row is
// formed with the same float addition the forward pass does (E + float(a * 1)), so the two
// losses are bitwise equal; the tolerance 1e-7 only guards against a different but equally
// exact summation order. A second comparison without the shift must differ (the test can fail).
TEST(Model, SinusoidalInputIsScaledTable) {
  model::model_config c;
  c.vocab = 5;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 1;
  c.d_ff = 16;
  c.scheme = pos_scheme::sinusoidal;
  c.init_std = 0.5;
  EXPECT_DOUBLE_EQ(model::sinusoidal_amplitude(c), 0.70710678118654752);
  model::transformer<float> sin_model(c);
  sin_model.init(7);
  model::batch b;
  b.B = 1;
  b.T = 1;
  b.tokens = {3};
  b.positions = {0};
  b.targets = {2};
  const double loss_sin = sin_model.forward(b);

  c.scheme = pos_scheme::nope;
  model::transformer<float> nope_model(c);
  nope_model.params() = sin_model.params();  // same layout: sinusoidal adds no parameters
  const double loss_unshifted = nope_model.forward(b);
  const int64_t row = nope_model.layout().tok_emb + 3 * c.d_model;
  const float a = static_cast<float>(0.70710678118654752);
  for (int64_t j = 1; j < c.d_model; j += 2) nope_model.params()[row + j] += a;
  const double loss_shifted = nope_model.forward(b);
  EXPECT_NEAR(loss_shifted, loss_sin, 1e-7);
  EXPECT_GT(std::abs(loss_unshifted - loss_sin), 1e-4);
}

// Vaswani et al. 2017, sec. 3.4 and 3.5: x_0 = sqrt(C) E[token] + PE(pos), PE(0) = (0, 1, 0,
// 1, ...) at unit amplitude. The embed_scale model equals a NoPE model whose token row is
// scaled by sqrt(C) and shifted by 1 on the odd channels; and its token-embedding gradient
// matches central differences (in double).
TEST(Model, EmbedScaleIsVaswaniInput) {
  model::model_config c;
  c.vocab = 5;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 1;
  c.d_ff = 16;
  c.scheme = pos_scheme::sinusoidal;
  c.init_std = 0.3;
  c.embed_scale = true;
  EXPECT_EQ(model::input_amplitude(c), 1.0);
  model::transformer<double> sin_model(c);
  sin_model.init(11);
  model::batch b;
  b.B = 1;
  b.T = 1;
  b.tokens = {3};
  b.positions = {0};
  b.targets = {2};
  const double loss_sin = sin_model.forward(b);
  model::model_config n = c;
  n.scheme = pos_scheme::nope;
  n.embed_scale = false;
  model::transformer<double> nope_model(n);
  nope_model.params() = sin_model.params();
  const int64_t row = nope_model.layout().tok_emb + 3 * c.d_model;
  for (int64_t j = 0; j < c.d_model; ++j)
    nope_model.params()[row + j] = nope_model.params()[row + j] * std::sqrt(8.0) + (j % 2);
  EXPECT_NEAR(nope_model.forward(b), loss_sin, 1e-12);

  // Gradient of the token row against central differences, three tokens at positions 0..2.
  b.T = 3;
  b.tokens = {3, 1, 3};
  b.positions = {0, 1, 2};
  b.targets = {2, 4, 0};
  sin_model.forward(b);
  sin_model.backward();
  const std::vector<double> g = sin_model.grads();
  double gmax = 0;
  for (int64_t j = 0; j < c.d_model; ++j) {
    const int64_t i = row + j;
    const double h = 1e-6, x = sin_model.params()[i];
    sin_model.params()[i] = x + h;
    const double up = sin_model.forward(b);
    sin_model.params()[i] = x - h;
    const double down = sin_model.forward(b);
    sin_model.params()[i] = x;
    EXPECT_NEAR(g[i], (up - down) / (2 * h), 1e-7) << "channel " << j;
    gmax = std::max(gmax, std::abs(g[i]));
  }
  EXPECT_GT(gmax, 1e-3);  // the check compares real gradients, not zeros
}

// With a held-out file, training windows come from the training file only and evaluation
// windows from the held-out file only; the vocabulary is both files' bytes.
TEST(Tasks, HeldOutFileIsTheEvaluationSource) {
  test::temp_dir d;
  std::string train, held;
  for (int i = 0; i < 100; ++i) train += "ab";
  for (int i = 0; i < 50; ++i) held += "cd";
  write_file_atomic(d.file("train.txt"), train);
  write_file_atomic(d.file("held.txt"), held);
  const task t = make_task(task_kind::text, d.file("train.txt"), d.file("held.txt"));
  EXPECT_EQ(t.vocab, 4);
  EXPECT_EQ(t.eval_text.size(), 100u);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    for (int64_t v : draw(t, 16, seed, true).tok) EXPECT_GE(v, 2);
    for (int64_t v : draw(t, 16, seed, false).tok) EXPECT_LT(v, 2);
  }
  EXPECT_NO_THROW(task_validate_length(t, 99, "--eval-lens"));
  EXPECT_THROW(task_validate_length(t, 100, "--eval-lens"), posenc::invalid_argument);
  EXPECT_THROW(make_task(task_kind::text, d.file("train.txt"), d.file("none.txt")),
               posenc::io_error);
}

// Press et al.'s evaluation on a held-out text: non-overlapping windows tile the first
// eval_chars bytes, sliding windows (stride = training length) score only their last stride
// tokens. The counts follow from the definitions; the non-overlapping loss is recomputed here
// from the trained parameters with windows cut by this test; at L = train_max the two modes
// coincide.
TEST(Lab, HeldOutWindowsFollowPressEtAl) {
  test::temp_dir d;
  std::string train, held;
  rng r(5);
  for (int i = 0; i < 3000; ++i) train += static_cast<char>('a' + r.below(6));
  for (int i = 0; i < 700; ++i) held += static_cast<char>('a' + r.below(6));
  write_file_atomic(d.file("train.txt"), train);
  write_file_atomic(d.file("held.txt"), held);
  lab_options o = tiny_options("");
  o.task = task_kind::text;
  o.file = d.file("train.txt");
  o.eval_file = d.file("held.txt");
  o.eval_chars = 301;
  o.schemes = {pos_scheme_from_name("alibi")};
  o.train_min = o.train_max = 12;
  o.eval_lens = {12, 48};
  o.steps = 5;
  const task t = make_task(o.task, o.file, o.eval_file);
  validate(o, t);
  const run_result res = train_and_evaluate(o, t, pos_scheme_from_name("alibi"), 0);
  ASSERT_TRUE(res.completed);
  const eval_metrics& e12 = res.evals[0];
  const eval_metrics& e48 = res.evals[1];
  // 300 targets: 25 windows of 12; 6 windows of 48 (288 targets)
  EXPECT_EQ(e12.scored_tokens, 300);
  EXPECT_EQ(e12.sequences, 25);
  EXPECT_EQ(e48.scored_tokens, 288);
  // sliding at 48, stride 12: windows end at 48, 60, ..., 300 (22 windows), 48 + 21 * 12 scored
  EXPECT_EQ(e48.stride, 12);
  EXPECT_EQ(e48.sliding_windows, 22);
  EXPECT_EQ(e48.sliding_scored_tokens, 48 + 21 * 12);
  EXPECT_EQ(e12.loss, e12.sliding_loss);
  EXPECT_NE(e48.loss, e48.sliding_loss);

  model::transformer<float> m(lab_model_config(o, t, pos_scheme_from_name("alibi")));
  m.params() = res.final_params;
  double sum = 0;
  int64_t n = 0;
  std::vector<double> at(48, 0.0);  // nll summed per window position
  for (int64_t s = 0; s + 48 + 1 <= 301; s += 48) {
    model::batch b;
    b.B = 1;
    b.T = 48;
    for (int64_t j = 0; j < 48; ++j) {
      b.tokens.push_back(held[s + j] - 'a');
      b.targets.push_back(held[s + j + 1] - 'a');
      b.positions.push_back(j);
    }
    sum += m.forward(b) * 48;
    n += 48;
    for (int64_t j = 0; j < 48; ++j) at[j] += m.nll()[j];
  }
  EXPECT_NEAR(e48.loss, sum / n, 1e-9);
  // Loss by window position: [0, 12) in distribution, then [12, 24), [24, 48).
  ASSERT_EQ(e48.position_loss.size(), 3u);
  const int64_t edges[4] = {0, 12, 24, 48};
  for (int b = 0; b < 3; ++b) {
    double want = 0;
    for (int64_t j = edges[b]; j < edges[b + 1]; ++j) want += at[j];
    want /= static_cast<double>((edges[b + 1] - edges[b]) * 6);  // 6 windows
    EXPECT_EQ(e48.position_loss[b].from, edges[b]);
    EXPECT_EQ(e48.position_loss[b].to, edges[b + 1]);
    EXPECT_NEAR(e48.position_loss[b].loss, want, 1e-9) << "bucket " << b;
  }
  // A learned table has no row past 11: undefined, both modes.
  o.schemes = {pos_scheme::learned};
  const run_result learned = train_and_evaluate(o, t, pos_scheme::learned, 0);
  EXPECT_FALSE(learned.evals[1].defined);
  EXPECT_TRUE(std::isnan(learned.evals[1].sliding_loss));
  // Too few evaluation bytes for a window is an error naming the option.
  o.eval_chars = 40;
  EXPECT_THROW(validate(o, t), posenc::invalid_argument);
}
