// Needles in real text (posenc/lab/needle.hpp): each sample holds its needle at the stated
// depth, the answer nowhere else and distractors that differ; the exact-match computation gives
// 1 for a written-out attention that copies from the cue and what the position of the asked
// needle allows for one that ignores the key; the effective context length follows its definition;
// the lab's retrieval grid is deterministic and does not depend on the thread count; bad input is a
// clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/lab/lab.hpp"
#include "posenc/lab/needle.hpp"
#include "test_support.hpp"

using namespace posenc;
using namespace posenc::lab;

namespace {

// A text of words with digits in it (so a value could occur in the text and must be avoided),
// training and held-out parts from different draws.
std::string needle_words(uint64_t seed, int n) {
  rng r(seed);
  std::string s;
  const char* w[] = {"the ", "of ", "and ", "1812 ", "to ", "was ", "in 30", ". ", "her ", "\n"};
  while (static_cast<int>(s.size()) < n) s += w[r.below(10)];
  return s;
}

struct needle_fixture {
  test::temp_dir d;
  task t;
  needle_fixture() {
    write_file_atomic(d.file("train.txt"), needle_words(1, 6000));
    write_file_atomic(d.file("held.txt"), needle_words(2, 3000));
    t = make_task(task_kind::text, d.file("train.txt"), d.file("held.txt"), true);
  }
  bool is_key(int64_t token) const {
    const unsigned char c = t.alphabet[token];
    return std::find(t.key_symbols.begin(), t.key_symbols.end(), c) != t.key_symbols.end();
  }
  bool is_digit(int64_t token) const {
    return t.alphabet[token] >= '0' && t.alphabet[token] <= '9';
  }
};

struct needle_case {
  std::vector<int64_t> tok, tgt;
  needle_layout lay;
};

needle_case draw_needle(const task& t, int64_t L, double depth, int64_t keys, uint64_t seed,
                        bool eval = true) {
  needle_case s;
  s.tok.resize(L);
  s.tgt.resize(L);
  rng r(seed);
  needle_sample(t, L, depth, keys, eval, r, s.tok.data(), s.tgt.data(), &s.lay);
  return s;
}

// Written-out attention over a sample: at position i, c = i - h with h the last key symbol at
// or before i; key j scores beta when tok[j - c - 1], before h, is the same key symbol as tok[h]
// (`by_key`; else any key symbol, and later ones score more), and the output is the
// softmax-weighted one-hot of tok[j]. At the query's key and digits (c = 0..2) the matching j
// is the asked needle's next digit, so with by_key this copies the value.
std::vector<float> needle_copier(const needle_fixture& f, const std::vector<int64_t>& tok,
                                 bool by_key) {
  const int64_t L = static_cast<int64_t>(tok.size()), V = f.t.vocab;
  std::vector<float> probs(static_cast<size_t>(L * V), 1.0f / static_cast<float>(V));
  int64_t h = -1;
  for (int64_t i = 0; i < L; ++i) {
    if (f.is_key(tok[i])) h = i;
    if (h < 0) continue;
    const int64_t c = i - h;
    std::vector<double> s(static_cast<size_t>(i), 0.0);
    double mx = 0;
    for (int64_t j = c + 1; j < i; ++j) {
      const int64_t k = j - c - 1;
      const bool match = k < h && f.is_key(tok[k]) && (!by_key || tok[k] == tok[h]);
      s[j] = match ? 30.0 + (by_key ? 0.0 : static_cast<double>(j)) : 0.0;
      mx = std::max(mx, s[j]);
    }
    double z = 0;
    for (int64_t j = 0; j < i; ++j) z += std::exp(s[j] - mx);
    float* p = probs.data() + i * V;
    std::fill(p, p + V, 0.0f);
    for (int64_t j = 0; j < i; ++j) p[tok[j]] += static_cast<float>(std::exp(s[j] - mx) / z);
  }
  return probs;
}

}  // namespace

TEST(Needle, SampleHoldsItsNeedleAtItsDepthAndTheAnswerNowhereElse) {
  needle_fixture f;
  EXPECT_GE(static_cast<int64_t>(f.t.key_symbols.size()), needle_key_symbols_min);
  const std::vector<int64_t> held = f.t.eval_text, train = f.t.text;
  for (int64_t L : {20, 33, 64, 100, 257})
    for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0, 0.37})
      for (int64_t keys = 1; keys <= needle_max_keys; ++keys)
        for (uint64_t seed = 0; seed < 12; ++seed) {
          if (L < needle_min_length(keys)) continue;
          const bool eval = seed % 3 != 0;
          const needle_case s = draw_needle(f.t, L, depth, keys, seed * 7919 + L, eval);
          const int64_t C = L - needle_len;
          SCOPED_TRACE(testing::Message() << "L " << L << " depth " << depth << " keys " << keys);
          // At the stated depth, and the query at the end asks its key.
          EXPECT_EQ(s.lay.needle, std::llround(depth * static_cast<double>(C - needle_len)));
          EXPECT_EQ(s.lay.query, C);
          EXPECT_TRUE(f.is_key(s.tok[C]));
          EXPECT_EQ(s.tok[s.lay.needle], s.tok[C]);
          std::set<int64_t> digits;
          for (int64_t j = 0; j < needle_digits; ++j) {
            EXPECT_EQ(s.tok[s.lay.needle + 1 + j], s.lay.value[j]);
            EXPECT_EQ(s.tok[C + 1 + j], s.lay.value[j]);
            EXPECT_TRUE(f.is_digit(s.lay.value[j]));
            digits.insert(s.lay.value[j]);
          }
          // The value's digits occur as a run exactly in the needle and the answer.
          int64_t seen = 0;
          for (int64_t i = 0; i + needle_digits <= L; ++i)
            seen += std::equal(s.lay.value.begin(), s.lay.value.end(), s.tok.begin() + i);
          EXPECT_EQ(seen, 2);
          // Distractors: keys differ from each other and the asked one; every needle's digits
          // differ from every other's.
          ASSERT_EQ(static_cast<int64_t>(s.lay.distractors.size()), keys - 1);
          std::set<int64_t> key_set = {s.tok[s.lay.needle]};
          for (int64_t dpos : s.lay.distractors) {
            EXPECT_TRUE(f.is_key(s.tok[dpos]));
            key_set.insert(s.tok[dpos]);
            for (int64_t j = 0; j < needle_digits; ++j) digits.insert(s.tok[dpos + 1 + j]);
          }
          EXPECT_EQ(static_cast<int64_t>(key_set.size()), keys);
          EXPECT_EQ(static_cast<int64_t>(digits.size()), keys * needle_digits);
          // Key symbols only where the needles and the query start; the rest is one window of
          // the held-out (eval) or training text.
          std::vector<bool> in_needle(L, false);
          for (int64_t p : s.lay.distractors) std::fill_n(in_needle.begin() + p, needle_len, true);
          std::fill_n(in_needle.begin() + s.lay.needle, needle_len, true);
          std::fill_n(in_needle.begin() + C, needle_len, true);
          std::vector<int64_t> text;
          for (int64_t i = 0; i < L; ++i) {
            if (in_needle[i]) continue;
            text.push_back(s.tok[i]);
            EXPECT_FALSE(f.is_key(s.tok[i]));
          }
          ASSERT_EQ(static_cast<int64_t>(text.size()), C - needle_len * keys);
          const std::vector<int64_t>& src = eval ? held : train;
          EXPECT_NE(std::search(src.begin(), src.end(), text.begin(), text.end()), src.end());
          // Scored: the digits after the query's key, nothing else.
          for (int64_t i = 0; i < L; ++i)
            EXPECT_EQ(s.tgt[i], i >= C && i < C + needle_digits ? s.tok[i + 1] : -1);
        }
}

TEST(Needle, ExactMatchOfAnAttentionThatCopiesFromTheCue) {
  needle_fixture f;
  const int64_t V = f.t.vocab;
  for (int64_t keys : needle_keys)
    for (double depth : needle_depths) {
      int64_t by_key = 0, blind = 0;
      const int64_t n = 40;
      for (uint64_t seed = 0; seed < n; ++seed) {
        const needle_case s = draw_needle(f.t, 96, depth, keys, 100 + seed);
        by_key += exact_match_row(s.tgt.data(), needle_copier(f, s.tok, true).data(), 96, V);
        blind += exact_match_row(s.tgt.data(), needle_copier(f, s.tok, false).data(), 96, V);
      }
      SCOPED_TRACE(testing::Message() << "keys " << keys << " depth " << depth);
      EXPECT_EQ(by_key, n);  // retrieval by the key always answers
      // Copying the last needle seen answers only where the asked one is last: always with
      // one key or at depth 1, never at depth 0 (the other needles follow it).
      if (keys == 1 || depth == 1.0)
        EXPECT_EQ(blind, n);
      else if (depth == 0.0)
        EXPECT_EQ(blind, 0);
      else
        EXPECT_LT(blind, n);
    }
  // One wrong digit's argmax is a miss.
  const needle_case s = draw_needle(f.t, 64, 0.5, 1, 1);
  std::vector<float> p = needle_copier(f, s.tok, true);
  const int64_t i = s.lay.query + 1;
  EXPECT_TRUE(exact_match_row(s.tgt.data(), p.data(), 64, V));
  p[i * V + (s.tgt[i] + 1) % V] = 2.0f;
  EXPECT_FALSE(exact_match_row(s.tgt.data(), p.data(), 64, V));
}

TEST(Needle, EffectiveContextLength) {
  const std::vector<int64_t> lens = {64, 128, 256, 512, 1024};
  auto ecl = [&](std::vector<double> a) { return effective_context_length(lens, a, a[0]); };
  EXPECT_EQ(ecl({1, 1, 1, 1, 1}), 1024);
  EXPECT_EQ(ecl({1, 0.9, 0.8, 0.79, 1}), 256);  // "stays": the first drop ends it
  EXPECT_EQ(ecl({0.5, 0.4, 0.39, 0.5, 0.5}), 128);
  EXPECT_EQ(ecl({0.5, 0.1, 1, 1, 1}), 64);
  EXPECT_EQ(ecl({0, 0, 0, 0, 0}), 0);
  // Held to the model before extension: a method that loses the lookup at L already has none.
  const std::vector<double> pi = {0.45, 0.6, 0.64, 0.58, 0.18};
  EXPECT_EQ(effective_context_length(lens, pi, 0.91), 0);
  EXPECT_EQ(effective_context_length(lens, pi, 0.55), 512);
  EXPECT_THROW(effective_context_length(lens, std::vector<double>{1, 1}, 1), invalid_argument);
}

TEST(Needle, LabGridIsDeterministicAndIndependentOfThreads) {
  needle_fixture f;
  lab_options o;
  o.task = task_kind::text;
  o.file = f.d.file("train.txt");
  o.eval_file = f.d.file("held.txt");
  o.eval_chars = 400;
  o.schemes = {pos_scheme::rope};
  o.train_min = o.train_max = 48;
  o.eval_lens = {48, 96};
  o.steps = 4;
  o.batch_size = 4;
  o.d_model = 16;
  o.n_layers = 1;
  o.n_heads = 2;
  o.d_ff = 32;
  o.sliding_eval = false;
  o.needle_mix = 0.5;
  o.needle_samples = 6;
  validate(o, f.t);
  const int saved = num_threads();
  set_num_threads(1);
  const run_result a = train_and_evaluate(o, f.t, pos_scheme::rope, 0);
  set_num_threads(2);
  const run_result b = train_and_evaluate(o, f.t, pos_scheme::rope, 0);
  set_num_threads(saved);
  ASSERT_EQ(a.needles.size(), 2 * needle_depths.size() * needle_keys.size());
  EXPECT_EQ(a.final_params, b.final_params);
  for (size_t i = 0; i < a.needles.size(); ++i) {
    EXPECT_EQ(a.needles[i].hits, b.needles[i].hits);
    EXPECT_EQ(a.needles[i].samples, 6);
    EXPECT_EQ(a.needles[i].length, i < 10 ? 48 : 96);
    EXPECT_EQ(a.needles[i].accuracy, static_cast<double>(a.needles[i].hits) / 6.0);
  }
  // The mix changes the training batches; without it they are the plain text's.
  lab_options plain = o;
  plain.needle_mix = 0;
  plain.needle_samples = 0;
  EXPECT_NE(train_and_evaluate(plain, f.t, pos_scheme::rope, 0).final_params, a.final_params);
  EXPECT_TRUE(train_and_evaluate(plain, f.t, pos_scheme::rope, 0).needles.empty());
}

TEST(Needle, BadInputIsAClearError) {
  needle_fixture f;
  std::vector<int64_t> tok(64), tgt(64);
  rng r(0);
  auto bad = [&](int64_t L, double depth, int64_t keys, const char* what) {
    try {
      needle_sample(f.t, L, depth, keys, true, r, tok.data(), tgt.data());
      ADD_FAILURE() << "no error for " << what;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  bad(64, 1.5, 1, "depth must be in [0, 1]");
  bad(64, std::nan(""), 1, "depth must be in [0, 1]");
  bad(64, 0.5, 0, "keys must be in [1, 3]");
  bad(64, 0.5, 4, "keys must be in [1, 3]");
  bad(19, 0.5, 3, "needs length >= 20");
  // A task made without needles, a corpus that leaves too few key symbols, not a text task.
  const task plain = make_task(task_kind::text, f.d.file("train.txt"), f.d.file("held.txt"));
  EXPECT_THROW(needle_sample(plain, 64, 0.5, 1, true, r, tok.data(), tgt.data()), invalid_argument);
  write_file_atomic(f.d.file("punct.txt"), needle_words(3, 500) + "!#$%&()*+,/:;<=>?@[]^_`{|}~");
  EXPECT_THROW(make_task(task_kind::text, f.d.file("punct.txt"), "", true), invalid_argument);
  EXPECT_THROW(make_task(task_kind::passkey, "", "", true), invalid_argument);
  // The lab: needles on a task without them, needle batches shorter than a needle, a mix out of
  // range.
  lab_options o;
  o.task = task_kind::text;
  o.file = f.d.file("train.txt");
  o.eval_file = f.d.file("held.txt");
  o.schemes = {pos_scheme::rope};
  o.train_min = o.train_max = 48;
  o.eval_lens = {48};
  o.needle_samples = 4;
  EXPECT_THROW(validate(o, plain), invalid_argument);
  EXPECT_NO_THROW(validate(o, f.t));
  o.needle_mix = 0.5;
  o.train_min = 7;
  EXPECT_THROW(validate(o, f.t), invalid_argument);
  o.train_min = 48;
  o.needle_mix = 1.5;
  EXPECT_THROW(validate(o, f.t), invalid_argument);
}
