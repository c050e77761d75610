// Generated lab tasks. See tasks.hpp for the formats.
#include "posenc/lab/tasks.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"

namespace posenc::lab {
namespace {

constexpr const char* k_names[] = {"copy", "passkey", "repeat-count", "markov", "text"};
constexpr int64_t k_markov_symbols = 16;
constexpr uint64_t k_markov_seed = 0x5eed;

// Token ids of the structured tasks.
constexpr int64_t PAD = 0, BOS = 1, SEP = 2, EOS = 3;  // copy, repeat-count
constexpr int64_t MARK = 2, QUERY = 3;                 // passkey
constexpr int64_t copy_symbols = 256, repeat_symbols = 16, filler_symbols = 16;
constexpr int64_t passkey_digits0 = 4, passkey_filler0 = 14;

}  // namespace

const char* task_kind_name(task_kind k) {
  return k_names[static_cast<int>(k)];
}

task_kind task_kind_from_name(const std::string& name, const std::string& arg) {
  for (int i = 0; i < 5; ++i)
    if (name == k_names[i]) return static_cast<task_kind>(i);
  fail("{} must be one of copy, passkey, repeat-count, markov, text; got '{}'", arg, name);
}

double markov_entropy_rate(const std::vector<double>& tr, int64_t k) {
  // States are pairs (a, b); (a, b) -> (b, c) with probability P(c | a, b).
  const int64_t n = k * k;
  std::vector<double> pi(n, 1.0 / static_cast<double>(n)), next(n);
  for (int it = 0; it < 100000; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < k; ++c) next[(s % k) * k + c] += pi[s] * tr[s * k + c];
    double diff = 0;
    for (int64_t s = 0; s < n; ++s) diff += std::abs(next[s] - pi[s]);
    pi.swap(next);
    if (diff < 1e-13) break;
  }
  double h = 0;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t c = 0; c < k; ++c) {
      const double p = tr[s * k + c];
      if (p > 0) h -= pi[s] * p * std::log(p);
    }
  return h;
}

task make_task(task_kind kind, const std::string& file, const std::string& eval_file,
               bool needles) {
  task t;
  t.kind = kind;
  if (needles && kind != task_kind::text)
    fail("needles are inserted into text; task {} has none", task_kind_name(kind));
  switch (kind) {
    case task_kind::copy:
      t.vocab = 4 + copy_symbols;
      t.min_length = 5;
      t.max_length = 2 * copy_symbols + 3;
      break;
    case task_kind::passkey:
      t.vocab = passkey_filler0 + filler_symbols;
      t.min_length = 9;
      break;
    case task_kind::repeat_count:
      t.vocab = 4 + repeat_symbols;
      t.min_length = 5;
      break;
    case task_kind::markov: {
      t.vocab = k_markov_symbols;
      t.min_length = 1;
      t.exact_match = false;
      // Peaked rows: weights exp(1.5 z), z ~ N(0, 1), normalised. Fixed seed: every run of
      // every scheme sees the same source.
      rng r(k_markov_seed);
      const int64_t k = k_markov_symbols;
      t.markov.resize(k * k * k);
      for (int64_t s = 0; s < k * k; ++s) {
        double z = 0;
        for (int64_t c = 0; c < k; ++c) z += t.markov[s * k + c] = std::exp(1.5 * r.normal());
        for (int64_t c = 0; c < k; ++c) t.markov[s * k + c] /= z;
      }
      t.entropy_rate = markov_entropy_rate(t.markov, k);
      break;
    }
    case task_kind::text: {
      if (file.empty()) fail("--file must name a text file for task text");
      const auto bytes = read_file(file);
      bool seen[256] = {};
      for (std::byte b : bytes) seen[static_cast<unsigned char>(b)] = true;
      std::vector<std::byte> eval_bytes;
      if (!eval_file.empty()) {
        eval_bytes = read_file(eval_file);
        if (eval_bytes.size() < 2)
          fail("--eval-file {} must hold at least 2 bytes, got {}", eval_file, eval_bytes.size());
        for (std::byte b : eval_bytes) seen[static_cast<unsigned char>(b)] = true;
      }
      if (needles) {
        for (unsigned char c : std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"))
          if (!seen[c]) t.key_symbols.push_back(c);
        if (static_cast<int64_t>(t.key_symbols.size()) < needle_key_symbols_min)
          fail(
              "needles take their keys from the ASCII punctuation a text does not use; --file "
              "{}{}{} leaves {}, at least {} are needed",
              file, eval_file.empty() ? "" : " with --eval-file ", eval_file, t.key_symbols.size(),
              needle_key_symbols_min);
        for (unsigned char c : t.key_symbols) seen[c] = true;
        for (unsigned char c = '0'; c <= '9'; ++c) seen[c] = true;
      }
      int64_t map[256];
      for (int c = 0; c < 256; ++c)
        if (seen[c]) {
          map[c] = static_cast<int64_t>(t.alphabet.size());
          t.alphabet.push_back(static_cast<unsigned char>(c));
        }
      if (t.alphabet.size() < 2)
        fail("--file {} must contain at least 2 distinct bytes, got {}", file, t.alphabet.size());
      t.text.reserve(bytes.size());
      for (std::byte b : bytes) t.text.push_back(map[static_cast<unsigned char>(b)]);
      t.eval_text.reserve(eval_bytes.size());
      for (std::byte b : eval_bytes) t.eval_text.push_back(map[static_cast<unsigned char>(b)]);
      t.vocab = static_cast<int64_t>(t.alphabet.size());
      t.min_length = 1;
      t.exact_match = false;
      break;
    }
  }
  return t;
}

void task_validate_length(const task& t, int64_t length, const std::string& arg) {
  if (length < t.min_length || (t.max_length > 0 && length > t.max_length)) {
    if (t.max_length > 0)
      fail("{} must be in [{}, {}] for task {}, got {}", arg, t.min_length, t.max_length,
           task_kind_name(t.kind), length);
    fail("{} must be >= {} for task {}, got {}", arg, t.min_length, task_kind_name(t.kind), length);
  }
  if (t.kind == task_kind::text && !t.eval_text.empty()) {
    const int64_t n = static_cast<int64_t>(t.text.size());
    const int64_t ne = static_cast<int64_t>(t.eval_text.size());
    if (n < length + 1 || ne < length + 1)
      fail(
          "{} = {} needs windows of {} bytes in both the training file ({} bytes) and the "
          "evaluation file ({} bytes)",
          arg, length, length + 1, n, ne);
  } else if (t.kind == task_kind::text) {
    const int64_t n = static_cast<int64_t>(t.text.size());
    const int64_t eval_part = n - n * 9 / 10;
    if (eval_part < length + 1 || n * 9 / 10 < length + 1)
      fail(
          "{} = {} needs windows of {} bytes in both the training (first 90%) and the "
          "evaluation (last 10%) part of the text file, which has {} bytes",
          arg, length, length + 1, n);
  }
}

void task_sample(const task& t, int64_t L, bool eval, rng& r, int64_t* tok, int64_t* tgt) {
  std::fill(tok, tok + L, PAD);
  std::fill(tgt, tgt + L, int64_t{-1});
  switch (t.kind) {
    case task_kind::copy: {
      // BOS x1..xn SEP x1..xn EOS
      const int64_t n = (L - 3) / 2;
      int64_t perm[copy_symbols];
      for (int64_t i = 0; i < copy_symbols; ++i) perm[i] = i;
      for (int64_t i = 0; i < n; ++i) std::swap(perm[i], perm[i + r.below(copy_symbols - i)]);
      tok[0] = BOS;
      for (int64_t i = 0; i < n; ++i) tok[1 + i] = tok[n + 2 + i] = 4 + perm[i];
      tok[n + 1] = SEP;
      tok[2 * n + 2] = EOS;
      for (int64_t t2 = n + 1; t2 <= 2 * n + 1; ++t2) tgt[t2] = tok[t2 + 1];
      break;
    }
    case task_kind::passkey: {
      // BOS filler.. MARK k1 k2 k3 filler.. QUERY k1 k2 k3
      const int64_t fill = L - 9;
      const int64_t depth = static_cast<int64_t>(r.below(fill + 1));  // filler before MARK
      // Three distinct digits: the first three of a partial Fisher-Yates shuffle of 0..9.
      int64_t digits[10];
      for (int64_t i = 0; i < 10; ++i) digits[i] = passkey_digits0 + i;
      for (int64_t i = 0; i < 3; ++i)
        std::swap(digits[i], digits[i + static_cast<int64_t>(r.below(10 - i))]);
      const int64_t key[3] = {digits[0], digits[1], digits[2]};
      int64_t p = 0;
      tok[p++] = BOS;
      for (int64_t i = 0; i < depth; ++i)
        tok[p++] = passkey_filler0 + static_cast<int64_t>(r.below(filler_symbols));
      tok[p++] = MARK;
      for (int64_t k : key) tok[p++] = k;
      for (int64_t i = depth; i < fill; ++i)
        tok[p++] = passkey_filler0 + static_cast<int64_t>(r.below(filler_symbols));
      tok[p++] = QUERY;
      for (int64_t k : key) tok[p++] = k;
      for (int64_t i = L - 4; i < L - 1; ++i) tgt[i] = tok[i + 1];
      break;
    }
    case task_kind::repeat_count: {
      // BOS s^n SEP s^n EOS
      const int64_t n = (L - 3) / 2;
      const int64_t s = 4 + static_cast<int64_t>(r.below(repeat_symbols));
      tok[0] = BOS;
      for (int64_t i = 0; i < n; ++i) tok[1 + i] = tok[n + 2 + i] = s;
      tok[n + 1] = SEP;
      tok[2 * n + 2] = EOS;
      for (int64_t t2 = n + 1; t2 <= 2 * n + 1; ++t2) tgt[t2] = tok[t2 + 1];
      break;
    }
    case task_kind::markov: {
      const int64_t k = k_markov_symbols;
      int64_t a = static_cast<int64_t>(r.below(k)), b = static_cast<int64_t>(r.below(k));
      tok[0] = b;
      for (int64_t i = 0; i < L; ++i) {
        // next symbol c ~ P(. | a, b); the first step conditions on a uniformly drawn a
        const double* row = t.markov.data() + (a * k + b) * k;
        double u = r.uniform(), acc = 0;
        int64_t c = k - 1;
        for (int64_t j = 0; j < k; ++j) {
          acc += row[j];
          if (u < acc) {
            c = j;
            break;
          }
        }
        tgt[i] = c;
        if (i + 1 < L) tok[i + 1] = c;
        a = b;
        b = c;
      }
      break;
    }
    case task_kind::text: {
      // With a held-out file: training windows from the whole training file, evaluation
      // windows from the held-out one.
      const bool held_out = !t.eval_text.empty();
      const std::vector<int64_t>& src = held_out && eval ? t.eval_text : t.text;
      const int64_t n = static_cast<int64_t>(src.size());
      const int64_t split = held_out ? n : n * 9 / 10;
      const int64_t lo = eval && !held_out ? split : 0, hi = eval || held_out ? n : split;
      const int64_t start = lo + static_cast<int64_t>(r.below(hi - lo - L));
      for (int64_t i = 0; i < L; ++i) {
        tok[i] = src[start + i];
        tgt[i] = src[start + i + 1];
      }
      break;
    }
  }
}

}  // namespace posenc::lab
