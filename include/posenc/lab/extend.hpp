// posenc/lab/extend.hpp: extending a trained RoPE model's context, the way long-context models
// were made (docs/lab.md, "Extending the context"; `posenc lab --preset extend`).
//
// A model trained at length L is run at L' = s L after changing only its RoPE frequencies (and
// the magnitude a that multiplies cos and sin), zero-shot or after a short fine-tune. Each method
// is a rope_config, the same struct `posenc rope freqs` reads from a config.json, so the lab's
// table is also the evidence of what each config does to a model:
//   none      the trained frequencies (raw extrapolation);
//   linear    position interpolation, omega_i / s (Chen et al. 2023, eq. 2);
//   dynamic   dynamic NTK: base theta (L' / L)^(R / (R - 2)) at each sequence length L' > L
//             (Peng et al. 2023, sec. 3.3; transformers' "dynamic" with factor 1);
//   yarn      NTK-by-parts ramp between beta_fast = 32 and beta_slow = 1 rotations and
//             a = 0.1 ln s + 1 (Peng et al. 2023, sec. 3.2 and eq. 22);
//   llama3    wavelengths 2 pi / omega_i below L / 4 kept, above L divided by s, smoothly
//             interpolated in between (Llama 3.1's rope_scaling with low_freq_factor 1 and
//             high_freq_factor 4, the original length L);
//   longrope  per-pair divisors lambda_i found by an evolutionary search on held-out text at
//             s L (Ding et al. 2024, sec. 3.2; longrope_search below), a = sqrt(1 + ln s / ln L);
//   pose      linear interpolation fine-tuned at length L with skip-wise positions spanning
//             [0, s L) (Zhu et al. 2024; lab_options::pose_target).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/lab/lab.hpp"

namespace posenc::lab {

enum class extension { none, linear, dynamic, yarn, llama3, longrope, pose };
std::span<const extension> extensions();  // in the order above
const char* extension_name(extension e);  // "none", "linear", ...
// Throws invalid_argument naming `arg` and the allowed names.
extension extension_from_name(const std::string& name, const std::string& arg = "extension");

// The RoPE config of method e for a model of head dim D and base theta trained at train_len,
// extended by the integer factor s >= 1 to s * train_len (rotary_dim = D, half layout as the
// lab's models). longrope needs long_factor (D / 2 divisors, each >= 1); the others ignore it.
// The config's max_position_embeddings is s * train_len (dynamic: train_len, where its scaling
// starts) and original_max_position_embeddings train_len where the type reads it.
rope_config extension_config(extension e, int64_t head_dim, double theta, int64_t train_len,
                             int64_t factor, std::span<const double> long_factor = {});

// LongRoPE's search (Ding et al. 2024, sec. 3.2, Algorithm 1), small: the population starts
// from the divisors of linear interpolation (lambda_i = s), NTK-aware scaling
// (lambda_i = s^(2i / (R - 2))) and YaRN's ramp; each generation keeps the best `parents`
// candidates and adds children by crossover (each lambda_i from one of two parents) and
// mutation (lambda_i times e^(sigma z), z ~ N(0, 1), with probability 1/2), each made
// non-decreasing in i (the paper's monotonicity constraint: lower frequencies are stretched at
// least as much) and clamped to [1, 2s]. A candidate's score is held_out_loss of the model
// with that long_factor at s * train_len on bytes [begin, end) of the held-out text, which the
// lab keeps disjoint from the bytes it reports. Deterministic for a seed; exactly `budget`
// candidates are scored (the three seeds of the population included).
struct longrope_search_options {
  int64_t train_len = 0, factor = 1;
  int64_t budget = 24;   // candidates scored, >= 3
  int64_t parents = 4;   // kept per generation
  int64_t children = 6;  // per generation
  double sigma = 0.25;
  int64_t begin = 0, end = 0;  // bytes of t.eval_text
  uint64_t seed = 0;
};
struct longrope_search_result {
  std::vector<double> long_factor;  // the best candidate
  double loss = 0;                  // its score (nats per byte)
  double linear_loss = 0;           // the linear-interpolation seed's score
  int64_t evaluated = 0;
  std::vector<double> scores;  // every candidate's score, in the order scored
};
// m must be a rope model (model_config::scheme rope); o gives the model size, threads and
// distribution. Throws invalid_argument for a bad option.
longrope_search_result longrope_search(const model::transformer<float>& m, const lab_options& o,
                                       const task& t, const longrope_search_options& so);

// ---- `posenc lab --preset extend`: the protocol ---------------------------------------------
// Models trained at L on a text task (RoPE and the schemes that need no extension,
// extend_trained_schemes), then the RoPE models run at L..16L with each extension method's config
// for 8L (extend_factor), zero-shot and after a short fine-tune. Phases, each a set of runs
// (concurrent, or over MPI ranks, as every lab run):
//   1. train each of extend_trained_schemes at L (the rope runs are the `none` rows);
//   2. per rope seed, LongRoPE's search on held-out bytes after the scored ones;
//   3. zero-shot: the trained weights under each method's config, 0 steps;
//   4. fine-tune: each method from the trained weights for finetune_steps steps of
//      extend_tokens tokens at 8L (batch extend_tokens / 8L), PoSE at L (batch extend_tokens /
//      L) with positions skipped over [0, 8L); peak learning rate lr / 3, warm-up F / 10; text
//      alone (no needle batches, as the papers fine-tuned before their passkey tests).
// Evaluation: bits per byte over non-overlapping windows of the first base.eval_chars held-out
// bytes; with needle_samples, the retrieval grid at every length (results rows of task
// "needle", and "retrieval": the cells over seeds and each method's effective context
// length). The per-pair RoPE schemes (Self-Extend, DCA, StreamingLLM) run zero-shot on the
// trained RoPE weights (extend_pair_schemes).
constexpr int64_t extend_factor = 8;
constexpr int64_t extend_tokens = 1024;  // per fine-tuning step, every method
constexpr int64_t extend_search_chars = 8192;

struct extend_preset_options {
  lab_options base;        // model, training and evaluation options; train length, eval lengths,
                           // schemes and sliding evaluation are set by the protocol
  int64_t train_len = 64;  // L >= 2, dividing extend_tokens / extend_factor
  int64_t seeds = 3;       // >= 1
  int64_t finetune_steps = 100;  // [1, 10^6]
  int64_t search_budget = 48;    // LongRoPE candidates, [3, 10^5]
  std::string checkpoint_root;   // "" = none; else <root>/checkpoints/<scheme>-L<L>
  // The retrieval grid (lab/needle.hpp): sequences per cell; > 0 also mixes needles into every
  // training and fine-tuning run (extend_needle_mix) and needs a task made with needles; 0 =
  // bits per byte alone.
  int64_t needle_samples = 0;
};

// The fraction of training steps whose batch is needles when the grid is on: three of four, so
// that 3,200 steps are 800 of text (the preset without needles trained 500) and 2,400 of
// needles, past where a RoPE model at L = 64 learns the single-needle lookup (docs/lab.md).
constexpr double extend_needle_mix = 0.75;

// The models trained at L: RoPE (the base of every method), then every scheme whose declaration
// says it needs no extension (scheme_decl::lab_extend_trained), in declaration order.
std::vector<model::pos_scheme> extend_trained_schemes();

// What the protocol reports of its progress: a phase starting (with its run count, or -1 for a
// LongRoPE search) and each run's progress.
struct extend_progress {
  std::function<void(const std::string& what, int64_t runs)> phase;
  std::function<progress_fn()> runs;  // a fresh callback per phase (null = none)
};

// The retrieval summary of an extend results document's rows (results.json "retrieval"):
// "cells", the accuracy of each (method, length, depth, keys) cell over seeds (mean, std), and
// "effective_context", per method and key count the accuracy by length (mean over depths and
// seeds) and the effective context length per seed (effective_context_length, needle.hpp) with
// its mean, std, min and max. The reference accuracy of a method run on the trained RoPE model
// is that model's at L (same seed and keys), of a model trained with another scheme its own.
nlohmann::ordered_json extend_retrieval_summary(const nlohmann::ordered_json& results);

// The per-pair schemes, in declaration order, with the parameters their hook files give for a
// model trained at L, target 8L (rope_pairs_lab_params, schemes.hpp; each hook file cites its
// paper's rule).
std::vector<named_scheme> extend_pair_schemes(int64_t L);

// Runs the protocol on t (a text task with at least base.eval_chars + 8L + 1 held-out bytes)
// and returns the results document (results.json): "preset", "task", "config", "results" (one
// row per scheme, extension, fine-tune, seed and eval length), "summary" (mean and std over
// seeds) and "runs" (training time per run). Every rank returns it; with dist (size > 1) every
// rank takes part in every run. Throws invalid_argument for a bad option.
nlohmann::ordered_json run_extend_preset(const extend_preset_options& o, const task& t,
                                         std::shared_ptr<const distribution> dist,
                                         const extend_progress& progress = {});

}  // namespace posenc::lab
