// posenc/lab/lab.hpp: train small transformers with each position scheme on a generated task,
// then measure them in distribution and at longer evaluation lengths.
//
// Protocol (docs/lab.md):
//   - every scheme and seed sees the same training batches: the batch of step s is drawn from
//     posenc::rng(mix(seed, s)); its length is uniform in [train_min, train_max];
//   - positions are 0..L-1, or with randomized_positions = N a sorted uniform sample of L
//     distinct integers from [0, N) (Ruoss et al. 2023, sec. 3), in training and evaluation;
//   - the model is initialised from posenc::rng(seed) (schemes differ only in their position
//     parameters); AdamW, warm-up + cosine decay, gradient clipping (model/transformer.hpp);
//   - evaluation: eval_samples fresh sequences per length from an evaluation stream (disjoint
//     from training); in-distribution means length train_max;
//   - a learned table has rows for positions 0..train_max-1 (0..N-1 when randomized); a length
//     that needs a position past its last row is reported as "no defined position" (all metrics
//     null), never clamped. With randomized positions a length above N is undefined for every
//     scheme (L distinct positions cannot be drawn from [0, N)).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "posenc/core/rng.hpp"
#include "posenc/lab/tasks.hpp"
#include "posenc/model/transformer.hpp"

namespace posenc::lab {

// Data parallelism of a training step: the batch is split into shards of this many sequences,
// each run forward and backward on its own model replica (concurrently with several threads),
// and the shard gradients are combined in shard order. Fixed, so that the numbers of a run do
// not depend on the thread count.
inline constexpr int64_t sequences_per_shard = 4;

// A run spread over processes (MPI ranks in the CLI, tools/posenc/commands/lab_mpi.cpp; the
// library itself has no MPI). Rank r of n computes the shards thread_range(S, r, n) of each
// step's S shards, and the evaluation batches likewise; `gather` gives every rank all ranks'
// pieces in rank order, and each rank then combines them in shard (batch) order exactly as one
// process does, so the numbers are bitwise those of a single process for any n. gather must be
// called by every rank in the same order (a collective); `mine` has counts[rank] elements,
// `all` receives sum(counts), rank 0's block first.
struct distribution {
  int rank = 0, size = 1;
  std::function<void(const float* mine, float* all, const std::vector<int64_t>& counts)> gather;
  std::function<void(const double* mine, double* all, const std::vector<int64_t>& counts)>
      gather_doubles;
};

struct lab_options {
  task_kind task = task_kind::passkey;
  std::string file;          // text task
  std::string eval_file;     // text task: a held-out document; evaluation by windows (below)
  int64_t eval_chars = 0;    // with eval_file: score the first this many bytes (0 = the whole file)
  bool embed_scale = false;  // model_config::embed_scale (Vaswani et al.'s sqrt(d_model))
  std::vector<model::pos_scheme> schemes;
  int64_t train_min = 16, train_max = 64;  // training lengths, inclusive
  std::vector<int64_t> eval_lens;          // evaluation lengths
  int64_t steps = 1000;
  int64_t seeds = 1;        // seeds 0 .. seeds-1
  int64_t batch_size = 16;  // sequences per step
  int64_t d_model = 64, n_layers = 2, n_heads = 4, d_ff = 256;
  model::norm_kind norm = model::norm_kind::layernorm;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0;
  int64_t warmup = 0;                // 0 = steps / 10
  int64_t randomized_positions = 0;  // N, 0 = off
  // The parameters of the schemes reached by name (`--sandwich-dim 64`), by declared name;
  // unset ones take their declared defaults (position_options::named_params).
  std::vector<std::pair<std::string, double>> named_params;
  int64_t eval_samples = 64;     // sequences per evaluation length
  int64_t curve_every = 10;      // record the training loss every this many steps
  std::string checkpoint_dir;    // empty = no checkpoints
  int64_t checkpoint_every = 0;  // 0 = only at the end of each run
  bool resume = false;           // continue from checkpoints found in checkpoint_dir
  int64_t stop_after = -1;       // testing: stop each run after this many steps (>= 0)
  // Set: this process is one rank of a distributed run (only rank 0 writes checkpoints).
  std::shared_ptr<const distribution> dist;
  // Context extension (--preset extend; extend.hpp):
  //   rope: the rope (and irope) scheme's full config in place of the default one (theta
  //     10000, no scaling); the model trains with rope_seq_len = the training length (PoSE:
  //     pose_target) and is evaluated at length L with rope_seq_len = L (dynamic NTK and
  //     LongRoPE depend on it);
  //   init_params: start from these weights (a fine-tune) instead of the seed's initialisation;
  //     steps = 0 evaluates them as they are (zero-shot);
  //   pose_target: PoSE (Zhu et al. 2024, sec. 3): each training sequence of length L is cut
  //     into two chunks at a uniform point in [1, L - 1]; the first keeps positions 0.., the
  //     second is moved by a skip u uniform in [0, pose_target - L], so that the positions of a
  //     short window cover [0, pose_target) over training; 0 = off;
  //   sliding_eval: false skips the sliding-window evaluation (its figures are NaN).
  std::optional<rope_config> rope;
  // rope_pairs: schemes that place RoPE per pair (Self-Extend, DCA, StreamingLLM) on every
  // layer of a rope model (position_options::rope_pairs), for zero-shot evaluation of trained
  // weights (steps 0 with init_params) or to train under them.
  std::vector<named_scheme> rope_pairs;
  std::vector<float> init_params;
  int64_t pose_target = 0;
  bool sliding_eval = true;
  // Needles (lab/needle.hpp; a text task made with needles):
  //   needle_mix: the fraction of training steps whose batch is needles rather than text, each
  //     sequence with its depth uniform in [0, 1] and 1 or needle_max_keys keys (probability 1/2
  //     each), scored on its answer alone; 0 = plain text, the batches exactly as without. (Whole
  //     batches, not sequences among text: with the answers a few tokens among the text's in
  //     one mean loss the models never learned the lookup; docs/lab.md);
  //   needle_samples: sequences per cell of the retrieval grid, every evaluation length x
  //     needle_depths x needle_keys (run_result::needles); 0 = no grid.
  double needle_mix = 0;
  int64_t needle_samples = 0;
};

// PoSE's training positions (Zhu et al. 2024, sec. 3.2) for one sequence of length L that
// stands for a window of N >= L, two chunks: the sequence is cut at c uniform in [1, L - 1];
// pos[j] = j before the cut and j + u after it, with the skip u uniform in [0, N - L], so
// that over training every position in [0, N) and every distance below N occurs. Throws
// invalid_argument unless 2 <= L <= N.
void pose_positions(rng& r, int64_t L, int64_t N, int64_t* pos);

// Throws invalid_argument naming the option for anything out of range (and checks every
// length against the task).
void validate(const lab_options& o, const task& t);

// The model configuration a run of `scheme` uses.
model::model_config lab_model_config(const lab_options& o, const task& t, model::pos_scheme s);

struct eval_metrics {
  int64_t length = 0;
  bool defined = true;        // false: no defined position at this length (metrics are NaN)
  std::string note;           // why not defined
  double loss = 0;            // mean cross-entropy over scored tokens, nats
  double token_accuracy = 0;  // argmax == target over scored tokens
  double exact_match = 0;     // fraction of sequences with every scored token right; NaN for
                              // language-modelling tasks (markov, text)
  double loss_last64 = 0;     // LM tasks: loss over the last 64 positions; NaN otherwise
  int64_t sequences = 0, scored_tokens = 0;
  // Text with a held-out file (Press et al. 2022, sec. 2 and appendix): loss and token_accuracy
  // above are over non-overlapping windows of `length` tiling the first eval_chars bytes; the
  // sliding_ figures over windows of `length` advanced by `stride` = train_max, each scoring
  // only its last `stride` tokens (the first window scores all), so every scored token but
  // those of the first window sees length - stride tokens of context. NaN otherwise.
  double sliding_loss = 0, sliding_token_accuracy = 0;
  int64_t stride = 0, sliding_windows = 0, sliding_scored_tokens = 0;
  // Non-overlapping windows: mean loss of the tokens at window positions [from, to), in buckets
  // [0, train_max), [train_max, 2 train_max), [2 train_max, 4 train_max), ... up to length.
  struct position_bucket {
    int64_t from = 0, to = 0;
    double loss = 0;
  };
  std::vector<position_bucket> position_loss;
};

// One cell of the retrieval grid: greedy exact match of the asked value over `samples`
// sequences of length `length` with the asked needle at `depth` among `keys` needles.
struct needle_metrics {
  int64_t length = 0;
  double depth = 0;
  int64_t keys = 1;
  int64_t samples = 0, hits = 0;
  double accuracy = 0;  // hits / samples; NaN where the length has no defined position
};

struct curve_point {
  int64_t step = 0;  // updates applied
  double loss = 0;   // training loss of that step's batch
  double lr = 0;
};

struct run_result {
  model::pos_scheme scheme = model::pos_scheme::nope;
  int64_t seed = 0;
  int64_t steps_done = 0;
  bool completed = false;          // reached `steps` (false when stop_after cut it short)
  bool resumed = false;            // started from a checkpoint
  double train_seconds = 0;        // wall time of the training steps run in this process
  double tokens_per_second = 0;    // training tokens (B*L summed) per second in this process
  double comm_bytes_per_step = 0;  // distributed: bytes each rank received per step (mean)
  int64_t parameters = 0;
  std::vector<curve_point> curve;
  eval_metrics in_distribution;         // at length train_max
  std::vector<eval_metrics> evals;      // one per eval_lens entry
  std::vector<needle_metrics> needles;  // with needle_samples: eval_lens x depths x keys
  std::vector<float> final_params;      // the trained weights (tests compare runs bitwise)
};

struct progress {
  int64_t run = 0, runs = 0;  // 0-based index of this run, number of runs
  model::pos_scheme scheme = model::pos_scheme::nope;
  int64_t seed = 0;
  int64_t step = 0, steps = 0;
  double loss = 0;
  double elapsed = 0;  // seconds since this run started
  bool evaluating = false;
};
using progress_fn = std::function<void(const progress&)>;

// One training step's forward and backward, data-parallel: shard s holds sequences
// [s P, (s + 1) P) of b (P = sequences_per_shard) and runs on replica reps[s] (which needs
// ceil(b.B / P) replicas of m's configuration) with m's parameters, concurrently when
// num_threads() > 1. Writes the gradient of the batch's mean loss into m.grads(), combined in
// shard order, and returns that mean loss (NaN when nothing is scored, with zero gradients).
// With dist (size > 1) this rank computes only its shards and gathers the others' gradients,
// losses and counts; *comm_bytes (if given) gets the bytes this rank received.
double sharded_forward_backward(model::transformer<float>& m,
                                std::vector<model::transformer<float>>& reps, const model::batch& b,
                                const distribution* dist = nullptr, double* comm_bytes = nullptr);

// Trains one scheme with one seed and evaluates it. Writes/reads checkpoints when
// o.checkpoint_dir is set. Throws invalid_argument / io_error (bad or mismatched checkpoint).
run_result train_and_evaluate(const lab_options& o, const task& t, model::pos_scheme s,
                              int64_t seed, int64_t run_index = 0, int64_t runs = 1,
                              const progress_fn& cb = {});

// Evaluates a trained model at length L with eval_samples sequences from the evaluation
// stream of `seed`. The chunks run concurrently on replicas of m (num_threads()); the result
// does not depend on the thread count.
eval_metrics evaluate(const model::transformer<float>& m, const lab_options& o, const task& t,
                      int64_t length, int64_t seed);

// Mean loss (nats per byte) of the model over non-overlapping windows of length L tiling the
// bytes [begin, end) of the held-out text (t.eval_text), positions 0..L-1; the windows run
// as evaluate's do (concurrently, distributed with o.dist) and the result does not depend on
// the thread count. The model's RoPE config is evaluated at rope_seq_len = L. Throws
// invalid_argument when the task has no held-out text or the range holds no window.
// The retrieval grid's cells at length L (needle_depths x needle_keys, depth outermost), each
// with o.needle_samples held-out sequences from a stream of (seed, L, cell); concurrent and
// distributed as evaluate, and independent of the thread count.
std::vector<needle_metrics> evaluate_needles(const model::transformer<float>& m,
                                             const lab_options& o, const task& t, int64_t length,
                                             int64_t seed);

double held_out_loss(const model::transformer<float>& m, const lab_options& o, const task& t,
                     int64_t length, int64_t begin, int64_t end);

// Runs every scheme x seed.
struct lab_results {
  lab_options options;
  task task_info;
  std::vector<run_result> runs;
};
lab_results run_lab(const lab_options& o, const progress_fn& cb = {});

// One run of a sweep: its options (o.schemes is not used), scheme and seed. A sweep of runs
// with different options (a preset's table) shares one task.
struct run_spec {
  lab_options options;
  model::pos_scheme scheme = model::pos_scheme::nope;
  int64_t seed = 0;
};
// Runs every spec (validated by the caller), concurrently with several threads as run_lab does;
// result i belongs to spec i.
std::vector<run_result> run_specs(const std::vector<run_spec>& specs, const task& t,
                                  const progress_fn& cb = {});

// The results document (cmd_lab prints it with --format json and writes it to
// DIR/results.json):
//   {"task": "passkey", "results": [{"scheme", "seed", "eval_len", "loss",
//    "token_accuracy", "exact_match", "loss_last64", "defined", "note", "in_distribution",
//    "in_dist_loss", "in_dist_token_accuracy", "in_dist_exact_match"}, ...],
//   with a held-out text file also "bpc", "ppl", "sliding_loss", "sliding_bpc", "sliding_ppl",
//   "sliding_token_accuracy", "in_dist_bpc" (bits per byte = loss / ln 2, perplexity = e^loss),
//   "bpc_by_position": [[from, to, bpc], ...] (eval_metrics::position_loss),
//    "summary": [{"scheme", "eval_len", "seeds", "<metric>_mean", "<metric>_std", ...}],
//    "config": {...}, "runs": [{"scheme", "seed", "steps", "train_seconds", "tokens_per_second",
//    "curve": [[step, loss, lr], ...]}]}
// With needle_samples also "needles": [{"scheme", "seed", "eval_len", "depth", "keys",
// "samples", "hits", "accuracy"}, ...] (run_result::needles).
// Undefined values are null. std is the sample standard deviation over seeds (null for 1).
nlohmann::ordered_json lab_results_json(const lab_results& r);

}  // namespace posenc::lab
