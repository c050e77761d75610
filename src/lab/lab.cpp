// The lab: training runs per scheme and seed, evaluation at several lengths, results JSON.
#include "posenc/lab/lab.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/lab/needle.hpp"

namespace posenc::lab {
namespace {

using model::pos_scheme;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// splitmix64 finaliser: decorrelated seeds for (seed, stream, step).
uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 0x2545F4914F6CDD1Dull) * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr uint64_t stream_train = 1, stream_eval = 2, stream_needle = 3;

// Sorted uniform sample of L distinct integers from [0, N) (Knuth's selection sampling,
// Algorithm S): each subset is equally likely.
void sample_positions(rng& r, int64_t L, int64_t N, int64_t* out) {
  int64_t chosen = 0;
  for (int64_t i = 0; i < N && chosen < L; ++i)
    if (static_cast<int64_t>(r.below(static_cast<uint64_t>(N - i))) < L - chosen) out[chosen++] = i;
}

// What a batch's sequences are: task samples; needle samples, each at a uniform depth with 1 or
// needle_max_keys keys (lab_options::needle_mix's training batches); or needle samples of one
// cell of the retrieval grid (evaluate_needles).
struct batch_kind {
  enum { text, needles_drawn, needle_cell } what = text;
  double depth = 0;  // needle_cell only
  int64_t keys = 1;  // needle_cell only
};

// One batch of B sequences of length L from rng r. Needle samples are scored on their answer
// alone.
model::batch make_batch(const lab_options& o, const task& t, int64_t B, int64_t L, bool eval,
                        rng& r, batch_kind kind = {}) {
  model::batch b;
  b.B = B;
  b.T = L;
  b.tokens.resize(B * L);
  b.targets.resize(B * L);
  b.positions.resize(B * L);
  for (int64_t i = 0; i < B; ++i) {
    int64_t* tok = b.tokens.data() + i * L;
    int64_t* tgt = b.targets.data() + i * L;
    if (kind.what == batch_kind::needles_drawn) {
      const double depth = r.uniform();
      int64_t keys = r.below(2) ? needle_keys[1] : needle_keys[0];
      if (L < needle_min_length(keys)) keys = needle_keys[0];
      needle_sample(t, L, depth, keys, eval, r, tok, tgt);
    } else if (kind.what == batch_kind::needle_cell) {
      needle_sample(t, L, kind.depth, kind.keys, eval, r, tok, tgt);
    } else {
      task_sample(t, L, eval, r, tok, tgt);
    }
    int64_t* pos = b.positions.data() + i * L;
    if (o.randomized_positions > 0)
      sample_positions(r, L, o.randomized_positions, pos);
    else
      for (int64_t j = 0; j < L; ++j) pos[j] = j;
    if (o.pose_target > 0 && !eval && L >= 2) pose_positions(r, L, o.pose_target, pos);
  }
  return b;
}

nlohmann::ordered_json config_json(const lab_options& o, const model::model_config& c) {
  nlohmann::ordered_json j;
  j["task"] = task_kind_name(o.task);
  j["file"] = o.file;
  if (!o.eval_file.empty()) j["eval_file"] = o.eval_file;
  if (o.embed_scale) j["embed_scale"] = true;
  j["scheme"] = model::pos_scheme_name(c.scheme);
  j["vocab"] = c.vocab;
  j["d_model"] = c.d_model;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["d_ff"] = c.d_ff;
  j["norm"] = model::norm_kind_name(c.norm);
  j["max_positions"] = c.pos.max_positions;
  j["train_min"] = o.train_min;
  j["train_max"] = o.train_max;
  j["steps"] = o.steps;
  j["batch_size"] = o.batch_size;
  j["lr"] = o.lr;
  j["warmup"] = o.warmup;
  j["weight_decay"] = o.weight_decay;
  j["clip"] = o.clip;
  j["randomized_positions"] = o.randomized_positions;
  if (o.rope) j["rope"] = rope_config_to_json(*o.rope);
  for (const named_scheme& n : o.rope_pairs) {
    nlohmann::ordered_json ps = nlohmann::ordered_json::object();
    for (const auto& [name, value] : n.params) ps[name] = value;
    j["rope_pairs"][n.name] = ps;
  }
  if (o.pose_target > 0) j["pose_target"] = o.pose_target;
  if (!o.init_params.empty()) {  // FNV-1a of the starting weights' bytes
    uint64_t h = 1469598103934665603ull;
    for (float x : o.init_params) {
      uint32_t u;
      std::memcpy(&u, &x, sizeof u);
      for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xffu)) * 1099511628211ull;
    }
    j["init_params_fnv1a"] = fmt::format("{:016x}", h);
  }
  return j;
}

model::adamw_config adamw_for(const lab_options& o) {
  model::adamw_config a;
  a.lr = o.lr;
  a.weight_decay = o.weight_decay;
  a.clip_norm = o.clip;
  a.total = o.steps;
  a.warmup = o.warmup > 0 ? o.warmup : std::max<int64_t>(1, o.steps / 10);
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::ordered_json num_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

// Sequences [s0, s1) of b.
model::batch sub_batch(const model::batch& b, int64_t s0, int64_t s1) {
  model::batch r;
  r.B = s1 - s0;
  r.T = b.T;
  const auto cut = [&](const std::vector<int64_t>& v) {
    return std::vector<int64_t>(v.begin() + s0 * b.T, v.begin() + s1 * b.T);
  };
  r.tokens = cut(b.tokens);
  r.positions = cut(b.positions);
  r.targets = cut(b.targets);
  return r;
}

// Sums of the scored targets of a set of batches.
struct score_sums {
  double loss = 0, last = 0;
  int64_t scored = 0, correct = 0, exact = 0, last_n = 0;
  std::vector<double> by_pos;  // (T) nll summed over the scored tokens at window position j
};

// Scores batch b, just run forward on rm, into q: nll, argmax hits and (tasks scored by exact
// match, !lm) whole-sequence hits of the scored targets (V: vocabulary; lm: also the nll of the
// last 64 positions).
void score_batch_into(const model::transformer<float>& rm, const model::batch& b, int64_t V,
                      bool lm, score_sums& q) {
  const int64_t L = b.T;
  const auto& probs = rm.probs();
  const auto& nll = rm.nll();
  for (int64_t s = 0; s < b.B; ++s) {
    const argmax_hits h =
        count_argmax_hits(b.targets.data() + s * L, probs.data() + s * L * V, L, V);
    q.scored += h.scored;
    q.correct += h.correct;
    if (!lm) q.exact += h.correct == h.scored;
    for (int64_t j = 0; j < L; ++j) {
      const int64_t i = s * L + j;
      if (b.targets[i] < 0) continue;
      q.loss += nll[i];
      if (lm && j >= L - 64) {
        q.last += nll[i];
        ++q.last_n;
      }
      if (q.by_pos.empty()) q.by_pos.assign(L, 0.0);
      q.by_pos[j] += nll[i];
    }
  }
}

// Distributed: gives every rank the sums of all batches; this rank holds those of [b0, b1).
void gather_score_sums(const std::vector<model::batch>& batches, int64_t b0, int64_t b1,
                       const distribution& dist, std::vector<score_sums>& part) {
  const int64_t nb = static_cast<int64_t>(batches.size());
  // The fields of score_sums as doubles (counts are exact below 2^53), then by_pos.
  const int64_t T = nb > 0 ? batches[0].T : 0;
  const int64_t k = 6 + T;
  std::vector<int64_t> counts(dist.size);
  for (int r = 0; r < dist.size; ++r) {
    const auto [r0, r1] = thread_range(nb, r, dist.size);
    counts[r] = (r1 - r0) * k;
  }
  std::vector<double> mine((b1 - b0) * k), all(nb * k);
  for (int64_t c = b0; c < b1; ++c) {
    const score_sums& q = part[c];
    double* d = mine.data() + (c - b0) * k;
    d[0] = q.loss;
    d[1] = q.last;
    d[2] = static_cast<double>(q.scored);
    d[3] = static_cast<double>(q.correct);
    d[4] = static_cast<double>(q.exact);
    d[5] = static_cast<double>(q.last_n);
    for (int64_t j = 0; j < static_cast<int64_t>(q.by_pos.size()); ++j) d[6 + j] = q.by_pos[j];
  }
  dist.gather_doubles(mine.data(), all.data(), counts);
  for (int64_t c = 0; c < nb; ++c) {
    const double* d = all.data() + c * k;
    part[c] = {d[0],
               d[1],
               static_cast<int64_t>(d[2]),
               static_cast<int64_t>(d[3]),
               static_cast<int64_t>(d[4]),
               static_cast<int64_t>(d[5]),
               std::vector<double>(d + 6, d + k)};
  }
}

// The per-batch sums added in batch order.
score_sums add_score_sums(const std::vector<score_sums>& part) {
  score_sums total;
  for (const score_sums& q : part) {
    if (total.by_pos.size() < q.by_pos.size()) total.by_pos.resize(q.by_pos.size(), 0.0);
    for (size_t j = 0; j < q.by_pos.size(); ++j) total.by_pos[j] += q.by_pos[j];
    total.loss += q.loss;
    total.last += q.last;
    total.scored += q.scored;
    total.correct += q.correct;
    total.exact += q.exact;
    total.last_n += q.last_n;
  }
  return total;
}

// Runs the batches forward and sums nll, argmax hits, whole-sequence hits and (LM tasks) the
// nll of the last 64 positions. The batches run concurrently on replicas of m and the sums are
// added in batch order: the numbers do not depend on the thread count.
// Distributed: rank r scores batches thread_range(nb, r, size), and the per-batch sums are
// gathered and added in batch order as in one process.
score_sums score_batches(const model::transformer<float>& m,
                         const std::vector<model::batch>& batches, int64_t V, bool lm,
                         const distribution* dist) {
  const int64_t nb = static_cast<int64_t>(batches.size());
  const bool spread = dist != nullptr && dist->size > 1;
  // Plain variables, not a structured binding: clang (14) rejects a binding captured by the
  // lambda below.
  const auto batch_range =
      spread ? thread_range(nb, dist->rank, dist->size) : std::pair<int64_t, int64_t>{0, nb};
  const int64_t b0 = batch_range.first, b1 = batch_range.second;
  std::vector<score_sums> part(batches.size());
  std::vector<std::exception_ptr> error(batches.size());  // none may leave the OpenMP region
  const int64_t nrep = std::max<int64_t>(1, std::min<int64_t>(num_threads(), b1 - b0));
  std::vector<model::transformer<float>> reps(nrep, model::transformer<float>(m.config()));
  parallel_for(nrep, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      model::transformer<float>& rm = reps[w];
      rm.params() = m.params();
      auto [c0, c1] = thread_range(b1 - b0, static_cast<int>(w), static_cast<int>(nrep));
      for (int64_t c = b0 + c0; c < b0 + c1; ++c) {
        const model::batch& b = batches[c];
        score_sums& q = part[c];
        try {
          rm.forward(b);
        } catch (...) {
          error[c] = std::current_exception();
          continue;
        }
        score_batch_into(rm, b, V, lm, q);
      }
    }
  });
  for (const auto& x : error)
    if (x) std::rethrow_exception(x);
  if (spread) gather_score_sums(batches, b0, b1, *dist, part);
  return add_score_sums(part);
}

// Windows of length L over the first E bytes of the held-out text, in batches of `chunk`.
// Window w starts at starts[w]; targets before score_from[w] within it are not scored.
// Positions 0..L-1, or with randomized positions a sorted sample per window drawn from r.
std::vector<model::batch> text_windows(const lab_options& o, const task& t, int64_t L,
                                       const std::vector<int64_t>& starts,
                                       const std::vector<int64_t>& score_from, int64_t chunk,
                                       rng& r) {
  std::vector<model::batch> out;
  const int64_t n = static_cast<int64_t>(starts.size());
  for (int64_t w0 = 0; w0 < n; w0 += chunk) {
    model::batch b;
    b.B = std::min(chunk, n - w0);
    b.T = L;
    b.tokens.resize(b.B * L);
    b.targets.resize(b.B * L);
    b.positions.resize(b.B * L);
    for (int64_t i = 0; i < b.B; ++i) {
      const int64_t s = starts[w0 + i];
      for (int64_t j = 0; j < L; ++j) {
        b.tokens[i * L + j] = t.eval_text[s + j];
        b.targets[i * L + j] = j >= score_from[w0 + i] ? t.eval_text[s + j + 1] : -1;
      }
      int64_t* pos = b.positions.data() + i * L;
      if (o.randomized_positions > 0)
        sample_positions(r, L, o.randomized_positions, pos);
      else
        for (int64_t j = 0; j < L; ++j) pos[j] = j;
    }
    out.push_back(std::move(b));
  }
  return out;
}

// Press et al. 2022's two evaluations of a language model at length L on a held-out text
// (sec. 2, appendix B): non-overlapping windows, and sliding windows that score only their last
// tokens (see eval_metrics).
eval_metrics evaluate_held_out(const model::transformer<float>& m, const lab_options& o,
                               const task& t, int64_t L, int64_t seed, eval_metrics e) {
  const int64_t ne = static_cast<int64_t>(t.eval_text.size());
  const int64_t E = o.eval_chars > 0 ? std::min(o.eval_chars, ne) : ne;
  // Targets are x[j + 1] for inputs x[j], j in [0, E - 1).
  std::vector<int64_t> starts, from;
  for (int64_t s = 0; s + L + 1 <= E; s += L) {
    starts.push_back(s);
    from.push_back(0);
  }
  const int64_t stride = std::min(L, o.train_max);
  std::vector<int64_t> sl_starts, sl_from;
  for (int64_t end = L; end + 1 <= E; end += stride) {  // window [end - L, end)
    sl_starts.push_back(end - L);
    sl_from.push_back(end == L ? 0 : L - stride);
  }
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 22) / (o.n_heads * L * L), 1, 256);
  rng r(mix(static_cast<uint64_t>(seed), stream_eval, static_cast<uint64_t>(L)));
  const score_sums a =
      score_batches(m, text_windows(o, t, L, starts, from, chunk, r), t.vocab, true, o.dist.get());
  if (!o.sliding_eval) {
    sl_starts.clear();
    sl_from.clear();
  }
  const score_sums b = o.sliding_eval
                           ? score_batches(m, text_windows(o, t, L, sl_starts, sl_from, chunk, r),
                                           t.vocab, true, o.dist.get())
                           : score_sums{};
  e.sequences = static_cast<int64_t>(starts.size());
  e.scored_tokens = a.scored;
  e.loss = a.scored ? a.loss / static_cast<double>(a.scored) : nan;
  e.token_accuracy =
      a.scored ? static_cast<double>(a.correct) / static_cast<double>(a.scored) : nan;
  e.exact_match = nan;
  e.loss_last64 = a.last_n ? a.last / static_cast<double>(a.last_n) : nan;
  // Where in the window the loss is: non-overlapping windows score every position, so bucket
  // [p0, p1) holds windows * (p1 - p0) tokens. Buckets [0, T0), [T0, 2 T0), [2 T0, 4 T0), ...
  // with T0 = train_max: the first is in distribution, the others are positions never trained.
  if (!a.by_pos.empty() && !starts.empty()) {
    const int64_t T0 = o.train_max;
    for (int64_t p0 = 0, p1 = std::min(T0, L); p0 < L; p0 = p1, p1 = std::min(2 * p1, L)) {
      double sum = 0;
      for (int64_t j = p0; j < p1; ++j) sum += a.by_pos[j];
      e.position_loss.push_back(
          {p0, p1, sum / static_cast<double>((p1 - p0) * static_cast<int64_t>(starts.size()))});
    }
  }
  e.stride = stride;
  e.sliding_windows = static_cast<int64_t>(sl_starts.size());
  e.sliding_scored_tokens = b.scored;
  e.sliding_loss = b.scored ? b.loss / static_cast<double>(b.scored) : nan;
  e.sliding_token_accuracy =
      b.scored ? static_cast<double>(b.correct) / static_cast<double>(b.scored) : nan;
  return e;
}

}  // namespace

void pose_positions(rng& r, int64_t L, int64_t N, int64_t* pos) {
  if (L < 2 || N < L) fail("pose_positions: needs 2 <= L <= N, got L = {}, N = {}", L, N);
  const int64_t c = 1 + static_cast<int64_t>(r.below(static_cast<uint64_t>(L - 1)));
  const int64_t u = static_cast<int64_t>(r.below(static_cast<uint64_t>(N - L + 1)));
  for (int64_t j = 0; j < L; ++j) pos[j] = j < c ? j : j + u;
}

void validate(const lab_options& o, const task& t) {
  if (o.schemes.empty()) fail("--schemes must name at least one scheme");
  if (o.train_min < 1 || o.train_max < o.train_min)
    fail("--train-len must be A:B with 1 <= A <= B, got {}:{}", o.train_min, o.train_max);
  task_validate_length(t, o.train_min, "--train-len");
  task_validate_length(t, o.train_max, "--train-len");
  if (o.train_max > 4096) fail("--train-len upper end must be <= 4096, got {}", o.train_max);
  for (int64_t L : o.eval_lens) {
    if (L < 1 || L > 8192) fail("--eval-lens entries must be in [1, 8192], got {}", L);
    task_validate_length(t, L, "--eval-lens");
  }
  if (o.init_params.empty() ? o.steps < 1 || o.steps > 10000000 : o.steps < 0 || o.steps > 10000000)
    fail("--steps must be in [{}, 10^7], got {}", o.init_params.empty() ? 1 : 0, o.steps);
  if (o.rope)
    for (auto s : o.schemes)
      if (s != pos_scheme::rope && s != pos_scheme::irope)
        fail("a RoPE config is given but scheme {} does not read one (rope and irope do)",
             model::pos_scheme_name(s));
  if (!o.rope_pairs.empty())
    for (auto s : o.schemes)
      if (s != pos_scheme::rope)
        fail("rope_pairs ({}) place RoPE per pair over a rope model; scheme {} is not rope",
             o.rope_pairs[0].name, model::pos_scheme_name(s));
  if (o.pose_target != 0) {
    if (o.pose_target < o.train_max || o.pose_target > (int64_t{1} << 24))
      fail("pose_target must be 0 (off) or in [{}, 2^24] (at least the training length), got {}",
           o.train_max, o.pose_target);
    if (o.randomized_positions > 0)
      fail("pose_target and --randomized-positions both choose the training positions; give one");
  }
  if (o.seeds < 1 || o.seeds > 1000) fail("--seeds must be in [1, 1000], got {}", o.seeds);
  if (o.batch_size < 1 || o.batch_size > 4096)
    fail("--batch must be in [1, 4096], got {}", o.batch_size);
  if (o.eval_samples < 1 || o.eval_samples > 100000)
    fail("--eval-samples must be in [1, 100000], got {}", o.eval_samples);
  if (!(o.lr > 0) || !std::isfinite(o.lr)) fail("--lr must be finite and > 0, got {}", o.lr);
  if (!(o.weight_decay >= 0)) fail("--weight-decay must be >= 0, got {}", o.weight_decay);
  if (!(o.clip >= 0)) fail("--clip must be >= 0 (0 = off), got {}", o.clip);
  if (o.warmup < 0) fail("--warmup must be >= 0, got {}", o.warmup);
  if (o.curve_every < 1) fail("curve_every must be >= 1, got {}", o.curve_every);
  if (o.randomized_positions < 0 || o.randomized_positions > (int64_t{1} << 24))
    fail("--randomized-positions must be in [0, 2^24], got {}", o.randomized_positions);
  if (o.randomized_positions > 0 && o.randomized_positions < o.train_max)
    fail("--randomized-positions N must be >= the longest training length {}, got {}", o.train_max,
         o.randomized_positions);
  if (!o.eval_file.empty() && o.task != task_kind::text)
    fail("--eval-file is for --task text, got --task {}", task_kind_name(o.task));
  if (o.eval_chars < 0)
    fail("--eval-chars must be >= 0 (0 = the whole file), got {}", o.eval_chars);
  if (!t.eval_text.empty()) {
    const int64_t E =
        o.eval_chars > 0 ? std::min<int64_t>(o.eval_chars, static_cast<int64_t>(t.eval_text.size()))
                         : static_cast<int64_t>(t.eval_text.size());
    std::vector<int64_t> lens = o.eval_lens;
    lens.push_back(o.train_max);
    for (int64_t L : lens)
      if (E < L + 1)
        fail("--eval-chars {} is too few for --eval-lens entry {}: a window needs {} bytes", E, L,
             L + 1);
  }
  if (o.checkpoint_every < 0) fail("--checkpoint-every must be >= 0, got {}", o.checkpoint_every);
  if (!(o.needle_mix >= 0 && o.needle_mix <= 1))
    fail("needle_mix must be in [0, 1], got {}", o.needle_mix);
  if (o.needle_samples < 0 || o.needle_samples > 100000)
    fail("needle_samples must be in [0, 100000], got {}", o.needle_samples);
  if ((o.needle_mix > 0 || o.needle_samples > 0) && t.key_symbols.empty())
    fail("needles need a text task made with needles (make_task's needles)");
  // Grid cells too short for their keys are undefined (NaN); a needle batch needs one needle.
  if (o.needle_mix > 0 && o.train_min < needle_min_length(1))
    fail("--train-len must be >= {} for needle batches (--needle-mix), got {}",
         needle_min_length(1), o.train_min);
  if (o.resume && o.checkpoint_dir.empty())
    fail("--resume needs --out DIR (checkpoints are read from DIR/checkpoints)");
  for (auto s : o.schemes) model::validate(lab_model_config(o, t, s));
}

model::model_config lab_model_config(const lab_options& o, const task& t, pos_scheme s) {
  model::model_config c;
  c.vocab = t.vocab;
  c.d_model = o.d_model;
  c.n_layers = o.n_layers;
  c.n_heads = o.n_heads;
  c.d_ff = o.d_ff;
  c.scheme = s;
  c.norm = o.norm;
  c.embed_scale = o.embed_scale;
  c.pos.max_positions = o.randomized_positions > 0 ? o.randomized_positions : o.train_max;
  c.pos.named_params = o.named_params;
  c.pos.rope = o.rope;
  c.pos.rope_seq_len = o.pose_target > 0 ? o.pose_target : o.train_max;
  c.pos.rope_pairs = o.rope_pairs;
  return c;
}

// The batch's mean loss over its n scored targets is sum_s (n_s / n) loss_s, so its gradient is
// sum_s (n_s / n) grad_s.
double sharded_forward_backward(model::transformer<float>& m,
                                std::vector<model::transformer<float>>& reps, const model::batch& b,
                                const distribution* dist, double* comm_bytes) {
  const int64_t n = static_cast<int64_t>(reps.size());
  if (n != (b.B + sequences_per_shard - 1) / sequences_per_shard)
    fail("sharded_forward_backward: a batch of {} sequences needs {} replicas, got {}", b.B,
         (b.B + sequences_per_shard - 1) / sequences_per_shard, n);
  const bool spread = dist != nullptr && dist->size > 1;
  // Plain variables, not a structured binding: clang (14) rejects a binding captured by the
  // lambda below.
  const auto shards =
      spread ? thread_range(n, dist->rank, dist->size) : std::pair<int64_t, int64_t>{0, n};
  const int64_t mine0 = shards.first, mine1 = shards.second;
  std::vector<double> loss(n);
  // An exception must not leave an OpenMP region: each shard's is kept and the first rethrown.
  std::vector<std::exception_ptr> error(n);
  parallel_for(mine1 - mine0, [&](int64_t s0, int64_t s1) {
    for (int64_t s = mine0 + s0; s < mine0 + s1; ++s) {
      try {
        const int64_t a = s * sequences_per_shard, e = std::min(b.B, a + sequences_per_shard);
        reps[s].params() = m.params();
        loss[s] = reps[s].forward(sub_batch(b, a, e));
        reps[s].backward();
      } catch (...) {
        error[s] = std::current_exception();
      }
    }
  });
  for (const auto& e : error)
    if (e) std::rethrow_exception(e);
  const int64_t P = static_cast<int64_t>(m.grads().size());
  std::vector<const float*> grad(n);
  std::vector<int64_t> count(n);
  std::vector<float> gathered;
  if (spread) {
    // Every rank gets every shard's gradient, loss and scored count, in shard order.
    std::vector<int64_t> fcounts(dist->size), dcounts(dist->size);
    for (int r = 0; r < dist->size; ++r) {
      const auto [r0, r1] = thread_range(n, r, dist->size);
      fcounts[r] = (r1 - r0) * P;
      dcounts[r] = (r1 - r0) * 2;
    }
    std::vector<float> mine((mine1 - mine0) * P);
    std::vector<double> mine_d((mine1 - mine0) * 2), all_d(n * 2);
    for (int64_t s = mine0; s < mine1; ++s) {
      std::copy(reps[s].grads().begin(), reps[s].grads().end(), mine.begin() + (s - mine0) * P);
      mine_d[(s - mine0) * 2] = loss[s];
      mine_d[(s - mine0) * 2 + 1] = static_cast<double>(reps[s].scored());
    }
    gathered.resize(n * P);
    dist->gather(mine.data(), gathered.data(), fcounts);
    dist->gather_doubles(mine_d.data(), all_d.data(), dcounts);
    for (int64_t s = 0; s < n; ++s) {
      grad[s] = gathered.data() + s * P;
      loss[s] = all_d[s * 2];
      count[s] = static_cast<int64_t>(all_d[s * 2 + 1]);
    }
    if (comm_bytes) *comm_bytes = static_cast<double>((n - (mine1 - mine0)) * (P * 4 + 16));
  } else {
    for (int64_t s = 0; s < n; ++s) {
      grad[s] = reps[s].grads().data();
      count[s] = reps[s].scored();
    }
    if (comm_bytes) *comm_bytes = 0;
  }
  int64_t scored = 0;
  for (int64_t c : count) scored += c;
  std::vector<float>& g = m.grads();
  std::fill(g.begin(), g.end(), 0.0f);
  if (scored == 0) return nan;
  double total = 0;
  std::vector<float> w(n);
  for (int64_t s = 0; s < n; ++s) {
    w[s] = static_cast<float>(static_cast<double>(count[s]) / static_cast<double>(scored));
    total += loss[s] * static_cast<double>(count[s]);
  }
  parallel_for(
      P,
      [&](int64_t i0, int64_t i1) {
        for (int64_t s = 0; s < n; ++s) {
          if (count[s] == 0) continue;
          const float* gs = grad[s];
          for (int64_t i = i0; i < i1; ++i) g[i] += w[s] * gs[i];
        }
      },
      int64_t{1} << 14);
  return total / static_cast<double>(scored);
}

namespace {

// A RoPE config whose frequencies depend on the sequence length (dynamic NTK; LongRoPE's
// short / long factor) is evaluated at length L as the engines do: with seq_len = L.
bool rope_depends_on_length(const model::model_config& c, int64_t L) {
  return c.pos.rope && c.pos.rope_seq_len != L &&
         (c.pos.rope->type == rope_type::dynamic || c.pos.rope->type == rope_type::longrope);
}

model::transformer<float> at_length(const model::transformer<float>& m, int64_t L) {
  model::model_config c = m.config();
  c.pos.rope_seq_len = L;
  model::transformer<float> r(c);
  r.params() = m.params();
  return r;
}

}  // namespace

double held_out_loss(const model::transformer<float>& m, const lab_options& o, const task& t,
                     int64_t L, int64_t begin, int64_t end) {
  if (t.eval_text.empty()) fail("held_out_loss: the task has no held-out text");
  const int64_t ne = static_cast<int64_t>(t.eval_text.size());
  if (L < 1 || begin < 0 || end > ne || begin + L + 1 > end)
    fail("held_out_loss: bytes [{}, {}) of the {}-byte held-out text hold no window of {}", begin,
         end, ne, L);
  if (rope_depends_on_length(m.config(), L))
    return held_out_loss(at_length(m, L), o, t, L, begin, end);
  std::vector<int64_t> starts, from;
  for (int64_t s = begin; s + L + 1 <= end; s += L) {
    starts.push_back(s);
    from.push_back(0);
  }
  lab_options plain = o;
  plain.randomized_positions = 0;
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 22) / (o.n_heads * L * L), 1, 256);
  rng r(0);  // unused: positions are 0..L-1
  const score_sums a = score_batches(m, text_windows(plain, t, L, starts, from, chunk, r), t.vocab,
                                     true, o.dist.get());
  return a.scored ? a.loss / static_cast<double>(a.scored) : nan;
}

eval_metrics evaluate(const model::transformer<float>& m, const lab_options& o, const task& t,
                      int64_t L, int64_t seed) {
  if (rope_depends_on_length(m.config(), L)) return evaluate(at_length(m, L), o, t, L, seed);
  eval_metrics e;
  e.length = L;
  const bool lm = !t.exact_match;
  if (o.randomized_positions > 0 && L > o.randomized_positions) {
    e.defined = false;
    e.note = fmt::format(
        "no defined position: {} distinct positions cannot be drawn from [0, {}) "
        "(--randomized-positions)",
        L, o.randomized_positions);
  } else if (m.config().scheme == pos_scheme::learned && L > m.config().pos.max_positions) {
    e.defined = false;
    e.note = fmt::format(
        "no defined position: the learned table has {} rows (positions 0..{}); length {} needs "
        "position {}",
        m.config().pos.max_positions, m.config().pos.max_positions - 1, L, L - 1);
  }
  if (!e.defined) {
    e.loss = e.token_accuracy = e.exact_match = e.loss_last64 = nan;
    e.sliding_loss = e.sliding_token_accuracy = nan;
    return e;
  }
  if (!t.eval_text.empty()) return evaluate_held_out(m, o, t, L, seed, e);
  // Chunks of about 4M / (H L^2) sequences (sized when attention kept (B, H, T, T) probabilities;
  // kept so the evaluation batches, and hence the numbers, stay as they were).
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{1} << 22) / (o.n_heads * L * L), 1, o.eval_samples);
  rng r(mix(static_cast<uint64_t>(seed), stream_eval, static_cast<uint64_t>(L)));
  std::vector<model::batch> batches;
  for (int64_t done = 0; done < o.eval_samples; done += chunk)
    batches.push_back(make_batch(o, t, std::min(chunk, o.eval_samples - done), L, true, r));
  const score_sums q = score_batches(m, batches, t.vocab, lm, o.dist.get());
  e.sequences = o.eval_samples;
  e.scored_tokens = q.scored;
  e.loss = q.scored ? q.loss / static_cast<double>(q.scored) : nan;
  e.token_accuracy =
      q.scored ? static_cast<double>(q.correct) / static_cast<double>(q.scored) : nan;
  e.exact_match = lm ? nan : static_cast<double>(q.exact) / static_cast<double>(o.eval_samples);
  e.loss_last64 = lm && q.last_n ? q.last / static_cast<double>(q.last_n) : nan;
  e.sliding_loss = e.sliding_token_accuracy = nan;
  return e;
}

std::vector<needle_metrics> evaluate_needles(const model::transformer<float>& m,
                                             const lab_options& o, const task& t, int64_t L,
                                             int64_t seed) {
  if (rope_depends_on_length(m.config(), L))
    return evaluate_needles(at_length(m, L), o, t, L, seed);
  // A length with no defined position (evaluate's notes) gets NaN cells.
  const bool undefined =
      (o.randomized_positions > 0 && L > o.randomized_positions) ||
      (m.config().scheme == pos_scheme::learned && L > m.config().pos.max_positions);
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{1} << 22) / (o.n_heads * L * L), 1, o.needle_samples);
  std::vector<needle_metrics> out;
  for (size_t di = 0; di < needle_depths.size(); ++di)
    for (size_t ki = 0; ki < needle_keys.size(); ++ki) {
      needle_metrics c{L, needle_depths[di], needle_keys[ki], o.needle_samples, 0, nan};
      if (undefined || L < needle_min_length(c.keys)) {
        out.push_back(c);
        continue;
      }
      const uint64_t cell = static_cast<uint64_t>(L) * 64 + di * needle_keys.size() + ki;
      rng r(mix(static_cast<uint64_t>(seed), stream_needle, cell));
      std::vector<model::batch> batches;
      for (int64_t done = 0; done < o.needle_samples; done += chunk)
        batches.push_back(make_batch(o, t, std::min(chunk, o.needle_samples - done), L, true, r,
                                     {batch_kind::needle_cell, c.depth, c.keys}));
      c.hits = score_batches(m, batches, t.vocab, false, o.dist.get()).exact;
      c.accuracy = static_cast<double>(c.hits) / static_cast<double>(c.samples);
      out.push_back(c);
    }
  return out;
}

namespace {

// The run's checkpoint file in o.checkpoint_dir (created if missing); empty without one.
std::string lab_checkpoint_path(const lab_options& o, pos_scheme s, int64_t seed) {
  std::string ckpt;
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) fail_io("cannot create checkpoint directory {}: {}", o.checkpoint_dir, ec.message());
    ckpt = fmt::format("{}/{}-{}-seed{}.ckpt", o.checkpoint_dir, task_kind_name(o.task),
                       model::pos_scheme_name(s), seed);
  }
  return ckpt;
}

// Loads checkpoint ckpt into m, opt and res's curve after checking that it was written by a run
// with the configuration cfg and the model's parameter count.
void lab_resume_checkpoint(const std::string& ckpt, const nlohmann::ordered_json& cfg,
                           const lab_options& o, model::transformer<float>& m,
                           model::adamw_state& opt, run_result& res) {
  model::checkpoint c = model::load_checkpoint(ckpt);
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(c.meta);
  } catch (const std::exception& e) {
    fail_io("checkpoint {} has unreadable metadata: {}", ckpt, e.what());
  }
  if (!meta.contains("config") || !meta.contains("curve"))
    fail_io("checkpoint {} has metadata without config or curve", ckpt);
  // Each value compared as a json (objects by key, not by insertion order), the conversion
  // GCC chose implicitly spelled out: json != ordered_json is ambiguous in C++20 (clang rejects
  // it).
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    if (!meta["config"].contains(it.key()) ||
        meta["config"][it.key()] != nlohmann::json(it.value()))
      fail("checkpoint {} does not match this run: {} is {} in the checkpoint but {} here", ckpt,
           it.key(), meta["config"].value(it.key(), nlohmann::json()).dump(), it.value().dump());
  }
  if (static_cast<int64_t>(c.params.size()) != m.layout().total || c.opt.step > o.steps)
    fail(
        "checkpoint {} does not match this run: {} parameters at step {}, expected {} "
        "parameters and at most {} steps",
        ckpt, c.params.size(), c.opt.step, m.layout().total, o.steps);
  std::copy(c.params.begin(), c.params.end(), m.params().begin());
  opt = std::move(c.opt);
  for (const auto& p : meta["curve"])
    res.curve.push_back({p.at(0).get<int64_t>(), p.at(1).get<double>(), p.at(2).get<double>()});
  res.resumed = true;
}

}  // namespace

run_result train_and_evaluate(const lab_options& o, const task& t, pos_scheme s, int64_t seed,
                              int64_t run_index, int64_t runs, const progress_fn& cb) {
  const model::model_config mc = lab_model_config(o, t, s);
  model::transformer<float> m(mc);
  m.init(mix(static_cast<uint64_t>(seed), 0, 0));
  if (!o.init_params.empty()) {
    if (static_cast<int64_t>(o.init_params.size()) != m.layout().total)
      fail("init_params has {} values; the {} model has {} parameters", o.init_params.size(),
           model::pos_scheme_name(s), m.layout().total);
    m.params() = o.init_params;
  }
  const model::adamw_config ac = adamw_for(o);
  model::adamw_state opt;
  run_result res;
  res.scheme = s;
  res.seed = seed;
  res.parameters = m.layout().total;
  const nlohmann::ordered_json cfg = config_json(o, mc);

  const std::string ckpt = lab_checkpoint_path(o, s, seed);
  if (o.resume && std::filesystem::exists(ckpt)) lab_resume_checkpoint(ckpt, cfg, o, m, opt, res);
  auto save = [&] {
    if (ckpt.empty() || (o.dist && o.dist->rank != 0)) return;  // only rank 0 writes
    nlohmann::ordered_json meta;
    meta["config"] = cfg;
    meta["curve"] = nlohmann::ordered_json::array();
    for (const auto& p : res.curve) meta["curve"].push_back({p.step, p.loss, p.lr});
    model::checkpoint c;
    c.meta = meta.dump();
    c.opt = opt;
    c.params = m.params();
    model::save_checkpoint(ckpt, c);
  };

  std::vector<model::transformer<float>> reps(
      (o.batch_size + sequences_per_shard - 1) / sequences_per_shard,
      model::transformer<float>(mc));
  const auto t0 = std::chrono::steady_clock::now();
  double tokens = 0, comm_bytes = 0;
  int64_t ran = 0;
  progress pr{run_index, runs, s, seed, opt.step, o.steps, 0, 0, false};
  while (opt.step < o.steps) {
    if (o.stop_after >= 0 && ran >= o.stop_after) break;
    const int64_t step = opt.step;
    rng r(mix(static_cast<uint64_t>(seed), stream_train, static_cast<uint64_t>(step)));
    const int64_t L = o.train_min + static_cast<int64_t>(r.below(o.train_max - o.train_min + 1));
    // With needle_mix this step's batch is needles with that probability (the draw happens only
    // then: without it the batches are as before).
    const bool needles = o.needle_mix > 0 && r.uniform() < o.needle_mix;
    const model::batch b = make_batch(o, t, o.batch_size, L, false, r,
                                      {needles ? batch_kind::needles_drawn : batch_kind::text});
    double bytes = 0;
    const double loss = sharded_forward_backward(m, reps, b, o.dist.get(), &bytes);
    comm_bytes += bytes;
    model::clip_grad_norm(m.grads(), ac.clip_norm);
    const double lr = model::learning_rate(ac, step);
    model::adamw_update(ac, m.layout(), m.params(), m.grads(), opt);
    tokens += static_cast<double>(o.batch_size * L);
    ++ran;
    if (opt.step % o.curve_every == 0 || opt.step == o.steps || step == 0)
      res.curve.push_back({opt.step, loss, lr});
    if (o.checkpoint_every > 0 && opt.step % o.checkpoint_every == 0 && opt.step < o.steps) save();
    if (cb) {
      pr.step = opt.step;
      pr.loss = loss;
      pr.elapsed = seconds_since(t0);
      cb(pr);
    }
  }
  res.train_seconds = seconds_since(t0);
  res.tokens_per_second = res.train_seconds > 0 ? tokens / res.train_seconds : 0;
  res.comm_bytes_per_step = ran > 0 ? comm_bytes / static_cast<double>(ran) : 0;
  res.steps_done = opt.step;
  res.completed = opt.step == o.steps;
  if (ran > 0 || !res.resumed) save();
  res.final_params = m.params();
  if (!res.completed) return res;
  if (cb) {
    pr.evaluating = true;
    pr.elapsed = seconds_since(t0);
    cb(pr);
  }
  res.in_distribution = evaluate(m, o, t, o.train_max, seed);
  for (int64_t L : o.eval_lens) res.evals.push_back(evaluate(m, o, t, L, seed));
  if (o.needle_samples > 0)
    for (int64_t L : o.eval_lens)
      for (const needle_metrics& c : evaluate_needles(m, o, t, L, seed)) res.needles.push_back(c);
  return res;
}

lab_results run_lab(const lab_options& o, const progress_fn& cb) {
  lab_results r;
  r.options = o;
  r.task_info = make_task(o.task, o.file, o.eval_file);
  validate(o, r.task_info);
  std::vector<run_spec> specs;
  for (auto s : o.schemes)
    for (int64_t k = 0; k < o.seeds; ++k) specs.push_back({o, s, k});
  r.runs = run_specs(specs, r.task_info, cb);
  return r;
}

std::vector<run_result> run_specs(const std::vector<run_spec>& specs, const task& t,
                                  const progress_fn& cb) {
  const int64_t runs = static_cast<int64_t>(specs.size());
  std::vector<run_result> out(runs);
  const auto one = [&](int64_t i, const progress_fn& f) {
    out[i] = train_and_evaluate(specs[i].options, t, specs[i].scheme, specs[i].seed, i, runs, f);
  };
  // Runs are independent, so with several threads they run concurrently, each on its share of
  // the threads (no barrier between runs); a run with several threads splits each step's batch
  // into shards (sharded_forward_backward). The shards are fixed by the batch size, so the results
  // do not depend on the thread count.
  // Distributed runs call collectives, so one run at a time, in the same order on every rank.
  const int threads = num_threads();
  const bool spread = runs > 0 && specs[0].options.dist && specs[0].options.dist->size > 1;
  const int workers = spread ? 1 : static_cast<int>(std::min<int64_t>(threads, runs));
  if (workers <= 1) {
    for (int64_t i = 0; i < runs; ++i) one(i, cb);
    return out;
  }
  const int per_run = std::max(1, threads / workers);
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  progress_fn locked;
  if (cb)
    locked = [&](const progress& p) {
      std::lock_guard<std::mutex> lock(mu);
      cb(p);
    };
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      set_num_threads(per_run);  // this worker thread's count
      for (;;) {
        const int64_t i = next.fetch_add(1);
        if (i >= runs) return;
        try {
          one(i, locked);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!error) error = std::current_exception();
          next.store(runs);
        }
      }
    });
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  return out;
}

namespace {

using J = nlohmann::ordered_json;

// "config" of results.json: the options and the task's facts.
J results_config_json(const lab_results& r, bool held_out) {
  const auto& o = r.options;
  J cfg;
  cfg["schemes"] = J::array();
  for (auto s : o.schemes) cfg["schemes"].push_back(model::pos_scheme_name(s));
  cfg["train_len"] = {o.train_min, o.train_max};
  cfg["eval_lens"] = o.eval_lens;
  cfg["steps"] = o.steps;
  cfg["seeds"] = o.seeds;
  cfg["batch_size"] = o.batch_size;
  cfg["d_model"] = o.d_model;
  cfg["n_layers"] = o.n_layers;
  cfg["n_heads"] = o.n_heads;
  cfg["d_ff"] = o.d_ff;
  cfg["norm"] = model::norm_kind_name(o.norm);
  cfg["lr"] = o.lr;
  cfg["warmup"] = adamw_for(o).warmup;
  cfg["weight_decay"] = o.weight_decay;
  cfg["clip"] = o.clip;
  cfg["randomized_positions"] = o.randomized_positions;
  cfg["eval_samples"] = o.eval_samples;
  cfg["vocab"] = r.task_info.vocab;
  if (o.task == task_kind::markov) cfg["entropy_rate"] = r.task_info.entropy_rate;
  if (o.task == task_kind::text) cfg["file"] = o.file;
  if (held_out) {
    cfg["eval_file"] = o.eval_file;
    cfg["eval_chars"] = o.eval_chars;
    cfg["sliding_stride"] = o.train_max;
  }
  cfg["embed_scale"] = o.embed_scale;
  return cfg;
}

void put_metrics(J& row, const eval_metrics& e, const std::string& prefix) {
  row[prefix + "loss"] = num_or_null(e.loss);
  row[prefix + "token_accuracy"] = num_or_null(e.token_accuracy);
  row[prefix + "exact_match"] = num_or_null(e.exact_match);
}

// "results": one row per completed run and evaluation length (bits per byte, perplexity and
// the sliding windows' numbers too when a held-out text was scored).
J results_rows_json(const lab_results& r, bool held_out) {
  J rows = J::array();
  for (const auto& run : r.runs) {
    if (!run.completed) continue;
    for (const auto& e : run.evals) {
      J row;
      row["scheme"] = model::pos_scheme_name(run.scheme);
      row["seed"] = run.seed;
      row["eval_len"] = e.length;
      put_metrics(row, e, "");
      row["loss_last64"] = num_or_null(e.loss_last64);
      if (held_out) {
        row["bpc"] = num_or_null(e.loss / std::log(2.0));
        row["ppl"] = num_or_null(std::exp(e.loss));
        row["sliding_loss"] = num_or_null(e.sliding_loss);
        row["sliding_bpc"] = num_or_null(e.sliding_loss / std::log(2.0));
        row["sliding_ppl"] = num_or_null(std::exp(e.sliding_loss));
        row["sliding_token_accuracy"] = num_or_null(e.sliding_token_accuracy);
        row["windows"] = e.sequences;
        row["scored_tokens"] = e.scored_tokens;
        row["sliding_windows"] = e.sliding_windows;
        row["sliding_scored_tokens"] = e.sliding_scored_tokens;
        row["in_dist_bpc"] = num_or_null(run.in_distribution.loss / std::log(2.0));
        row["bpc_by_position"] = J::array();
        for (const auto& b : e.position_loss)
          row["bpc_by_position"].push_back({b.from, b.to, num_or_null(b.loss / std::log(2.0))});
      }
      row["defined"] = e.defined;
      row["note"] = e.defined ? J(nullptr) : J(e.note);
      row["in_distribution"] = e.length <= r.options.train_max;
      row["in_dist_len"] = run.in_distribution.length;
      put_metrics(row, run.in_distribution, "in_dist_");
      rows.push_back(row);
    }
  }
  return rows;
}

// One summary measure of one evaluation, by its name in the summary rows.
double summary_value(const eval_metrics& e, const std::string& n) {
  const double ln2 = std::log(2.0);
  return n == "loss"             ? e.loss
         : n == "token_accuracy" ? e.token_accuracy
         : n == "exact_match"    ? e.exact_match
         : n == "loss_last64"    ? e.loss_last64
         : n == "bpc"            ? e.loss / ln2
         : n == "ppl"            ? std::exp(e.loss)
         : n == "sliding_loss"   ? e.sliding_loss
         : n == "sliding_bpc"    ? e.sliding_loss / ln2
                                 : std::exp(e.sliding_loss);
}

// One summary row: scheme s at evaluation length index li (li = eval_lens.size(): the
// in-distribution evaluation), over the completed runs' seeds.
J summary_row_json(const lab_results& r, model::pos_scheme s, size_t li, bool held_out) {
  const auto& o = r.options;
  const std::vector<int64_t>& lens = o.eval_lens;
  const bool in_dist = li == lens.size();
  J row;
  row["scheme"] = model::pos_scheme_name(s);
  row["eval_len"] = in_dist ? o.train_max : lens[li];
  row["in_distribution"] = in_dist || lens[li] <= o.train_max;
  row["measure"] = in_dist ? "in_distribution" : "eval";
  std::vector<const eval_metrics*> es;
  for (const auto& run : r.runs)
    if (run.scheme == s && run.completed)
      es.push_back(in_dist ? &run.in_distribution : &run.evals[li]);
  row["seeds"] = es.size();
  bool defined = !es.empty();
  for (auto* e : es) defined &= e->defined;
  row["defined"] = defined;
  std::vector<std::string> names = {"loss", "token_accuracy", "exact_match", "loss_last64"};
  if (held_out)
    for (const char* x : {"bpc", "ppl", "sliding_loss", "sliding_bpc", "sliding_ppl"})
      names.push_back(x);
  for (const std::string& n : names) {
    std::vector<double> v;
    for (auto* e : es) v.push_back(summary_value(*e, n));
    bool finite = defined;
    for (double x : v) finite &= std::isfinite(x);
    if (!finite) {
      row[n + "_mean"] = nullptr;
      row[n + "_std"] = nullptr;
      continue;
    }
    double mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    row[n + "_mean"] = mean;
    row[n + "_std"] =
        v.size() > 1 ? J(std::sqrt(var / static_cast<double>(v.size() - 1))) : J(nullptr);
  }
  if (held_out && defined && !es[0]->position_loss.empty()) {
    row["bpc_by_position_mean"] = J::array();
    for (size_t b = 0; b < es[0]->position_loss.size(); ++b) {
      double mean = 0;
      for (auto* e : es) mean += e->position_loss[b].loss / std::log(2.0);
      const auto& pb = es[0]->position_loss[b];
      row["bpc_by_position_mean"].push_back(
          {pb.from, pb.to, num_or_null(mean / static_cast<double>(es.size()))});
    }
  }
  return row;
}

// "runs": one row per run, with its training curve.
J runs_json(const lab_results& r) {
  J rows = J::array();
  for (const auto& run : r.runs) {
    J row;
    row["scheme"] = model::pos_scheme_name(run.scheme);
    row["seed"] = run.seed;
    row["steps"] = run.steps_done;
    row["completed"] = run.completed;
    row["resumed"] = run.resumed;
    row["parameters"] = run.parameters;
    row["train_seconds"] = run.train_seconds;
    row["tokens_per_second"] = run.tokens_per_second;
    if (run.comm_bytes_per_step > 0) row["comm_bytes_per_step"] = run.comm_bytes_per_step;
    row["curve"] = J::array();
    for (const auto& p : run.curve) row["curve"].push_back({p.step, p.loss, p.lr});
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

nlohmann::ordered_json lab_results_json(const lab_results& r) {
  const auto& o = r.options;
  const bool held_out = !r.task_info.eval_text.empty();
  J j;
  j["task"] = task_kind_name(o.task);
  j["results"] = results_rows_json(r, held_out);
  // Summary over seeds: mean and sample standard deviation; null if any seed is undefined.
  j["summary"] = J::array();
  for (auto s : o.schemes)
    for (size_t li = 0; li <= o.eval_lens.size(); ++li)
      j["summary"].push_back(summary_row_json(r, s, li, held_out));
  j["config"] = results_config_json(r, held_out);
  j["runs"] = runs_json(r);
  if (o.needle_samples > 0) {
    J rows = J::array();
    for (const run_result& run : r.runs)
      for (const needle_metrics& c : run.needles)
        rows.push_back({{"scheme", model::pos_scheme_name(run.scheme)},
                        {"seed", run.seed},
                        {"eval_len", c.length},
                        {"depth", c.depth},
                        {"keys", c.keys},
                        {"samples", c.samples},
                        {"hits", c.hits},
                        {"accuracy", std::isfinite(c.accuracy) ? J(c.accuracy) : J(nullptr)}});
    j["needles"] = rows;
    j["config"]["needle_mix"] = o.needle_mix;
    j["config"]["needle_samples"] = o.needle_samples;
  }
  return j;
}

}  // namespace posenc::lab
