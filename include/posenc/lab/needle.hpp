// posenc/lab/needle.hpp: needles in real text, the retrieval test of context extension
// (docs/lab.md, "Retrieval: needles in the text").
//
// The passkey test (Mohtashami and Jaggi 2023) and RULER's needle-in-a-haystack variants
// (Hsieh et al. 2024, sec. 3.1) hide a key and a value in filler and ask for the value at the
// end. Here the filler is the corpus itself, byte for byte, and a needle is 4 bytes:
//
//   K d1 d2 d3      K a key symbol (an ASCII punctuation byte the corpus never uses,
//                   task::key_symbols), d1..d3 three digits
//
// A sample of length L' is L' - 4 bytes of context (corpus text with the needles in it), then
// the query: K again, and the value. Exact match: greedy decoding after the query's K writes
// d1..d3 (with teacher forcing, argmax at each of the three positions: the two agree exactly,
// since greedy decoding follows the target for as long as every argmax is right).
//   - depth d in [0, 1]: the asked needle starts at context byte round(d (C - 4)), C = L' - 4,
//     so depth 0 is the first byte and depth 1 ends right before the query;
//   - keys n: n needles with distinct keys, one of them asked (RULER's multi-key form), so the
//     last value seen is the answer only by chance; the others sit at random places;
//   - every digit of every needle is distinct (so n <= 3), and the asked value's three digits
//     occur nowhere else in the sample as a run (values are redrawn until so).
// Why a key symbol and not a word, and three digits: a byte-level model of this size learns a
// lookup by one token (the key, then each digit: every digit names one place) within the lab's
// budget; a key spelled in letters that also fill the text needs a match on two tokens, which
// the same model had not picked up after 5,000 steps of nothing else (docs/lab.md).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "posenc/core/rng.hpp"
#include "posenc/lab/tasks.hpp"

namespace posenc::lab {

inline constexpr int64_t needle_digits = 3;
inline constexpr int64_t needle_len = 1 + needle_digits;        // K d1 d2 d3
inline constexpr int64_t needle_max_keys = 10 / needle_digits;  // every digit distinct
// The evaluation grid's depths and key counts (issue: the depth x length grid of each method).
inline constexpr std::array<double, 5> needle_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
inline constexpr std::array<int64_t, 2> needle_keys = {1, needle_max_keys};

// The shortest sample with n keys: the n needles, needle_len bytes of text and the query.
constexpr int64_t needle_min_length(int64_t keys) {
  return needle_len * (keys + 2);
}

// Where a sample's parts are (token positions), for tests and for reading a sample.
struct needle_layout {
  int64_t needle = 0;                          // start of the asked needle
  std::vector<int64_t> distractors;            // starts of the other needles, in order
  int64_t query = 0;                           // start of the query, L' - 7
  std::array<int64_t, needle_digits> value{};  // its digits' tokens
};

// One sample of length L with the asked needle at `depth` among `keys` needles, the text from
// the held-out file (eval) or the training file. t: a text task made with needles (make_task's
// `needles`). Targets: the value's digits after the query's key, nothing else (the evaluation,
// and the needle batches of training, lab_options::needle_mix). Throws invalid_argument for a
// depth outside [0, 1], keys outside [1, needle_max_keys] or L below needle_min_length(keys).
void needle_sample(const task& t, int64_t L, double depth, int64_t keys, bool eval, rng& r,
                   int64_t* tokens, int64_t* targets, needle_layout* layout = nullptr);

// The scored targets (>= 0) of targets[0..L) and how many of them are the argmax of their row
// of probs (L rows of V; the first largest wins).
struct argmax_hits {
  int64_t scored = 0, correct = 0;
};
argmax_hits count_argmax_hits(const int64_t* targets, const float* probs, int64_t L, int64_t V);

// Greedy exact match of one sequence: every scored target is its row's argmax. The lab's
// exact-match figure counts sequences with this.
inline bool exact_match_row(const int64_t* targets, const float* probs, int64_t L, int64_t V) {
  const argmax_hits h = count_argmax_hits(targets, probs, L, V);
  return h.correct == h.scored;
}

// The effective context length (RULER, Hsieh et al. 2024, sec. 4: the longest length at which a
// model still retrieves): lens ascending with lens[0] the training length and acc[i] the mean
// accuracy over depths at lens[i]; the longest lens[i] such that every length up to it keeps
// acc >= fraction x reference, where reference is the accuracy at L of the model before any
// extension (for a model trained at L, acc[0]). 0 when acc[0] is already below it, or the
// reference is 0.
int64_t effective_context_length(std::span<const int64_t> lens, std::span<const double> acc,
                                 double reference, double fraction = 0.8);
// The reference accuracy below which the tables show no effective context length (a model that
// does not retrieve at L has none: 0.8 of a near-zero accuracy is no test).
inline constexpr double needle_retrieves = 0.5;

}  // namespace posenc::lab
