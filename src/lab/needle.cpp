// Needles in real text (posenc/lab/needle.hpp): the samples of the retrieval grid and the
// effective context length.
#include "posenc/lab/needle.hpp"

#include <algorithm>
#include <cmath>

#include "posenc/core/error.hpp"

namespace posenc::lab {
namespace {

// The token of byte c in a task made with needles (its alphabet holds every needle byte).
int64_t token_of(const task& t, unsigned char c) {
  const auto it = std::lower_bound(t.alphabet.begin(), t.alphabet.end(), c);
  if (it == t.alphabet.end() || *it != c)
    fail("needle_sample: byte '{}' is not in the task's alphabet", static_cast<char>(c));
  return it - t.alphabet.begin();
}

// The first k of a partial Fisher-Yates shuffle of 0..n-1.
std::vector<int64_t> distinct(rng& r, int64_t n, int64_t k) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  for (int64_t i = 0; i < k; ++i) std::swap(v[i], v[i + static_cast<int64_t>(r.below(n - i))]);
  v.resize(static_cast<size_t>(k));
  return v;
}

// How many times the n tokens of pat occur in seq[0..L).
int64_t occurrences(const int64_t* seq, int64_t L, const int64_t* pat, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i + n <= L; ++i) c += std::equal(pat, pat + n, seq + i);
  return c;
}

// One needle's tokens: its key symbol, then its digits.
struct needle {
  int64_t tok[needle_len];
};

// The sample's pieces before assembly: a text window, the needles (0 is the asked one) and
// where each goes (text bytes before it).
struct needle_plan {
  std::vector<int64_t> text;
  std::vector<needle> needles;
  std::vector<int64_t> offset;  // per needle
  int64_t before = 0;           // distractors before the asked needle (needles 1..before)
};

needle_plan plan_needles(const task& t, int64_t L, double depth, int64_t keys, bool eval, rng& r) {
  const int64_t C = L - needle_len, H = C - needle_len * keys;
  needle_plan p;
  // The text window, from the same parts of the files as the text task's samples.
  const bool held_out = !t.eval_text.empty();
  const std::vector<int64_t>& src = held_out && eval ? t.eval_text : t.text;
  const int64_t n = static_cast<int64_t>(src.size());
  const int64_t split = held_out ? n : n * 9 / 10;
  const int64_t lo = eval && !held_out ? split : 0, hi = eval || held_out ? n : split;
  if (hi - lo < H) fail("needle_sample: the text has {} bytes, a sample needs {}", hi - lo, H);
  const int64_t start = lo + static_cast<int64_t>(r.below(hi - lo - H + 1));
  p.text.assign(src.begin() + start, src.begin() + start + H);
  // The asked needle starts at context byte round(depth (C - n)); `before` distractors precede
  // it, drawn from the counts that leave text both sides in range.
  const int64_t at = std::llround(depth * static_cast<double>(C - needle_len));
  const int64_t b_lo = std::max<int64_t>(0, (at - H + needle_len - 1) / needle_len);
  const int64_t b_hi = std::min<int64_t>(keys - 1, at / needle_len);
  p.before = b_lo + static_cast<int64_t>(r.below(b_hi - b_lo + 1));
  const int64_t text_before = at - needle_len * p.before;
  p.offset.assign(static_cast<size_t>(keys), text_before);
  for (int64_t i = 1; i < keys; ++i)
    p.offset[i] = i <= p.before ? static_cast<int64_t>(r.below(text_before + 1))
                                : text_before + static_cast<int64_t>(r.below(H - text_before + 1));
  std::sort(p.offset.begin() + 1, p.offset.begin() + 1 + p.before);
  std::sort(p.offset.begin() + 1 + p.before, p.offset.end());
  // Keys: distinct key symbols of the task.
  const std::vector<int64_t> k = distinct(r, static_cast<int64_t>(t.key_symbols.size()), keys);
  p.needles.resize(static_cast<size_t>(keys));
  for (int64_t i = 0; i < keys; ++i) p.needles[i].tok[0] = token_of(t, t.key_symbols[k[i]]);
  return p;
}

// Writes the sample: context (text with the needles at their offsets), then the query.
void assemble(const needle_plan& p, int64_t* tok, needle_layout& lay) {
  const int64_t keys = static_cast<int64_t>(p.needles.size());
  // Needle order in the context: distractors before, the asked one, distractors after.
  std::vector<int64_t> order;
  for (int64_t i = 1; i <= p.before; ++i) order.push_back(i);
  order.push_back(0);
  for (int64_t i = p.before + 1; i < keys; ++i) order.push_back(i);
  int64_t at = 0, used = 0;
  lay.distractors.clear();
  for (int64_t k : order) {
    for (; used < p.offset[k]; ++used) tok[at++] = p.text[used];
    (k == 0 ? lay.needle : lay.distractors.emplace_back()) = at;
    for (int64_t j = 0; j < needle_len; ++j) tok[at++] = p.needles[k].tok[j];
  }
  for (; used < static_cast<int64_t>(p.text.size()); ++used) tok[at++] = p.text[used];
  lay.query = at;
  for (int64_t j = 0; j < needle_len; ++j) tok[at++] = p.needles[0].tok[j];
  for (int64_t j = 0; j < needle_digits; ++j) lay.value[j] = p.needles[0].tok[1 + j];
}

}  // namespace

void needle_sample(const task& t, int64_t L, double depth, int64_t keys, bool eval, rng& r,
                   int64_t* tok, int64_t* tgt, needle_layout* layout) {
  if (t.kind != task_kind::text || t.key_symbols.empty())
    fail("needle_sample needs a text task made with needles (make_task's needles)");
  if (!(depth >= 0 && depth <= 1)) fail("needle depth must be in [0, 1], got {}", depth);
  if (keys < 1 || keys > needle_max_keys)
    fail("needle keys must be in [1, {}], got {}", needle_max_keys, keys);
  if (L < needle_min_length(keys))
    fail("a sample with {} needle key(s) needs length >= {}, got {}", keys, needle_min_length(keys),
         L);
  needle_plan p = plan_needles(t, L, depth, keys, eval, r);
  needle_layout lay;
  // Values: redrawn until the asked one occurs only in its needle and its answer (text digits
  // or a needle's neighbour could spell it).
  for (int attempt = 0;; ++attempt) {
    if (attempt == 1000) fail("needle_sample: no value found that the text does not contain");
    // Every digit of every needle distinct: a digit names one place in the context.
    const std::vector<int64_t> d = distinct(r, 10, needle_digits * keys);
    for (int64_t i = 0; i < keys; ++i)
      for (int64_t j = 0; j < needle_digits; ++j)
        p.needles[i].tok[1 + j] =
            token_of(t, static_cast<unsigned char>('0' + d[i * needle_digits + j]));
    assemble(p, tok, lay);
    if (occurrences(tok, L, lay.value.data(), needle_digits) == 2) break;
  }
  // Targets: the answer's digits.
  std::fill(tgt, tgt + L, int64_t{-1});
  for (int64_t j = 0; j < needle_digits; ++j) tgt[lay.query + j] = lay.value[j];
  if (layout) *layout = lay;
}

argmax_hits count_argmax_hits(const int64_t* tg, const float* probs, int64_t L, int64_t V) {
  argmax_hits h;
  for (int64_t j = 0; j < L; ++j) {
    if (tg[j] < 0) continue;
    const float* p = probs + j * V;
    ++h.scored;
    h.correct += std::max_element(p, p + V) - p == tg[j];
  }
  return h;
}

int64_t effective_context_length(std::span<const int64_t> lens, std::span<const double> acc,
                                 double reference, double fraction) {
  if (lens.size() != acc.size() || lens.empty())
    fail("effective_context_length: {} lengths and {} accuracies", lens.size(), acc.size());
  if (!(reference > 0)) return 0;
  int64_t best = 0;
  for (size_t i = 0; i < lens.size() && acc[i] >= fraction * reference; ++i) best = lens[i];
  return best;
}

}  // namespace posenc::lab
