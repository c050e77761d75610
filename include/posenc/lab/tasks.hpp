// posenc/lab/tasks.hpp: generated sequence tasks for the lab (no downloads).
//
// Every sample is a function of (task, length, rng): the lab seeds the rng from (run seed,
// step) so training batches, and therefore a resumed run, are reproducible exactly.
//
// A sample of length L fills tokens[0..L) and targets[0..L): targets[t] is the token the model
// must predict after reading tokens[0..t], or -1 where nothing is scored. Shorter structured
// sequences are right-padded with PAD (token 0, never scored), which a causal model cannot see
// from the scored positions.
//
//   copy          BOS x1..xn SEP x1..xn EOS, x drawn without replacement from 256 symbols
//                 (so n <= 256, L <= 515); scored: the copied x1..xn and EOS.
//   passkey       BOS filler.. MARK k1 k2 k3 filler.. QUERY k1 k2 k3; the key is 3 distinct
//                 random digits at a uniformly random depth, filler from 16 symbols; scored:
//                 the 3 key digits after QUERY. L >= 9. Distinct, because with a repeated digit
//                 (28% of keys) the answer is not determined by content retrieval ("the digit
//                 after the last one said") and a model must also count offsets from MARK; a
//                 NoPE model stalls at exactly the 0.72 exact match of the distinct keys then
//                 (docs/lab.md).
//   repeat-count  BOS s^n SEP s^n EOS, one symbol s of 16 repeated n times; scored: the n
//                 reproduced symbols and EOS (the count). L >= 5.
//   markov        x_0..x_L from an order-2 Markov chain over 16 symbols (fixed transition
//                 table from task seed 0x5eed); scored: every next token. Its entropy rate is
//                 the loss floor (markov_entropy_rate).
//   text          character-level language modelling on a file: windows of L+1 bytes from
//                 the first 90% (training) or the last 10% (evaluation); scored: every next
//                 byte. Vocabulary: the distinct bytes of the file. With an evaluation file
//                 (a held-out document, lab_options::eval_file) training windows come from the
//                 whole training file and evaluation from the other file; the vocabulary is
//                 the distinct bytes of both (byte level: a UTF-8 character of 2 bytes is 2
//                 tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/core/rng.hpp"

namespace posenc::lab {

enum class task_kind { copy, passkey, repeat_count, markov, text };
const char* task_kind_name(task_kind k);  // "copy", "passkey", "repeat-count", "markov", "text"
task_kind task_kind_from_name(const std::string& name, const std::string& arg = "task");

// The fewest key symbols a text made with needles may leave (make_task).
inline constexpr int64_t needle_key_symbols_min = 8;

struct task {
  task_kind kind = task_kind::passkey;
  int64_t vocab = 0;        // V
  int64_t min_length = 1;   // shortest valid L
  int64_t max_length = 0;   // longest valid L (0 = unbounded)
  bool exact_match = true;  // a sequence-level exact match is meaningful (not for LM tasks)
  // markov: transition probabilities (16*16 contexts, 16), row (a*16 + b) = P(. | a, b).
  std::vector<double> markov;
  double entropy_rate = 0;  // markov: nats per token, the best achievable loss
  // text: the file's bytes mapped to [0, V), and the byte of each class.
  std::vector<int64_t> text;
  std::vector<unsigned char> alphabet;
  std::vector<int64_t> eval_text;  // the held-out file mapped to [0, V); empty = 90/10 split
  // text made with needles (lab/needle.hpp): the needles' key symbols, the punctuation bytes
  // that neither file contains, in byte order; the alphabet holds them and the digits.
  std::vector<unsigned char> key_symbols;
};

// Builds a task. `file` (and `eval_file` if not empty) is read for text (io_error if
// unreadable; invalid_argument if it has fewer than 2 distinct bytes or is too short for the
// longest requested length, which the lab checks with task_validate_length). With `needles`
// (text only) the alphabet also holds the needles' bytes: the digits and, as keys, every ASCII
// punctuation byte neither file contains (task::key_symbols; invalid_argument naming the files
// when fewer than needle_key_symbols_min are left).
task make_task(task_kind kind, const std::string& file = "", const std::string& eval_file = "",
               bool needles = false);

// Throws invalid_argument naming `arg` when L is outside [min_length, max_length], or a text
// file is too short to cut a window of L+1 bytes from its evaluation part.
void task_validate_length(const task& t, int64_t length, const std::string& arg);

// One sample of length L (validated). tokens, targets: (L).
void task_sample(const task& t, int64_t length, bool eval, rng& r, int64_t* tokens,
                 int64_t* targets);

// Entropy rate of an order-2 chain in nats: sum over contexts of pi(ctx) H(P(. | ctx)), pi the
// stationary distribution over symbol pairs (power iteration to 1e-13).
double markov_entropy_rate(const std::vector<double>& transition, int64_t symbols);

}  // namespace posenc::lab
