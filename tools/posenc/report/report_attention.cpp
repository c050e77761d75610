// Report section "attention": the attention pattern of one randomly chosen head under each
// position scheme, with the same q and k, and the attention check results.
//
// The probabilities are read out of the engine itself rather than recomputed: with one-hot
// values v_j = e_j (D >= S) the output row is out_i = sum_j p_ij e_j = (p_i0, ..., p_i,S-1),
// so every heatmap is exactly what attention_forward computes (Shaw's a^V is set to zero for
// the picture so that it does not add to the one-hot read-out; a^K still shapes the scores).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "cli.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/shaw.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "report.hpp"

namespace posenc::cli {
namespace {

// T5 reached by name: 32 buckets, max distance 128 (causal in the causal calls below), a table
// N(0, 1) from seed, held in `table`.
named_scheme t5_scheme(int64_t Hq, uint64_t seed, std::vector<double>& table) {
  t5_params tp;
  tp.num_buckets = 32;
  tp.max_distance = 128;
  const auto t5 = t5_init(tp, Hq, seed, 1.0);
  table.assign(t5.weights.begin(), t5.weights.end());
  return {"t5",
          {{"t5_max_distance", double(tp.max_distance)}},
          {{"t5_table", {tp.num_buckets, Hq}, {}, table}}};
}

// Shaw reached by name: K = 8, a^K ~ N(0, 0.25) from seed, a^V zero (the one-hot read-out of the
// probabilities), held in keys and values.
named_scheme shaw_scheme(int64_t D, uint64_t seed, std::vector<double>& keys,
                         std::vector<double>& values) {
  const auto shaw = shaw_init(8, D, seed, 0.5);
  keys.assign(shaw.keys.begin(), shaw.keys.end());
  values.assign(shaw.values.size(), 0.0);
  const int64_t C = 2 * shaw.clip + 1;
  return {"shaw", {}, {{"shaw_keys", {C, D}, {}, keys}, {"shaw_values", {C, D}, {}, values}}};
}

report_section attention_section(report_context& ctx) {
  const int64_t N = ctx.quick ? 24 : 48, Hq = 8, D = 64;
  const uint64_t seed = 2024;
  rng r(seed);
  const int64_t head = static_cast<int64_t>(r.below(Hq));
  // q: (N, Hq, D), k: (N, 1, D) random normal; v: (N, 1, D) one-hot rows.
  std::vector<double> q(N * Hq * D), k(N * D), v(N * D, 0.0), out(N * Hq * D);
  for (auto& x : q) x = r.normal();
  for (auto& x : k) x = r.normal();
  for (int64_t j = 0; j < N; ++j) v[j * D + j] = 1.0;

  rope_config rc;
  rc.head_dim = D;
  rc.rotary_dim = D;
  const auto freqs = rope_frequencies(rc);
  const auto slopes = alibi_slopes(Hq);
  std::vector<double> t5_table;
  std::vector<double> shaw_keys, shaw_values;

  struct entry {
    std::string id, label;
    attention_position<double> pos;
  };
  std::vector<entry> entries(5);
  entries[0] = {"none", "no position (NoPE)", {}};
  entries[1] = {"rope", "RoPE (theta 1e4, half layout)", {}};
  entries[1].pos.named = {rope_scheme(freqs)};
  entries[2] = {"alibi", fmt::format("ALiBi (slope of head {}: {})", head, num(slopes[head])), {}};
  entries[2].pos.named = {{"alibi"}};
  entries[3] = {"t5", "T5 bias (causal, 32 buckets, max distance 128, N(0,1) table)", {}};
  entries[3].pos.named = {t5_scheme(Hq, seed + 1, t5_table)};
  entries[4] = {"shaw", "Shaw relative keys (K = 8, a^K ~ N(0, 0.25))", {}};
  entries[4].pos.named = {shaw_scheme(D, seed + 2, shaw_keys, shaw_values)};

  doc::document figs;
  for (const auto& e : entries) {
    attention_params<double> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
    p.T = N, p.S = N, p.Hq = Hq, p.Hkv = 1, p.D = D, p.causal = true, p.pos = e.pos;
    attention_forward(p);
    vl::heatmap h;
    h.title = fmt::format("Attention probabilities, head {} of {}: {}", head, Hq, e.label);
    h.x_label = "key j";
    h.y_label = "query i";
    h.value_label = "p(i, j)";
    h.rows = N;
    h.cols = N;
    h.values.resize(N * N);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j)
        h.values[i * N + j] =
            j > i ? std::numeric_limits<double>::quiet_NaN() : out[(i * Hq + head) * D + j];
    h.vmin = 0.0;
    h.masked_label = "masked (causal)";
    figs.fig(doc::save_chart(ctx.out_dir, "attention_" + e.id + ".vl.json",
                             "attention pattern, " + e.label, vl::spec(h)),
             doc::lit(e.label));
  }

  report_section sec;
  sec.id = "attention";
  sec.title = "Attention: where each scheme puts position";
  sec.body.para(fmt::format(
      "One engine, four injection points: RoPE rotates q and k at their position ids, ALiBi "
      "and T5 add a bias to the scaled score, Shaw adds learned relative vectors to keys (and "
      "values). The heatmaps show causal attention probabilities of head {} (drawn at random "
      "from {} with seed {}) for {} tokens, with the same random q and k (D = {}) under each "
      "scheme. Without position the pattern is content-only; ALiBi's recency penalty shows as "
      "mass near the diagonal; the T5 and Shaw patterns follow their (random, untrained) "
      "tables by relative distance. The probabilities are the engine's own output (one-hot "
      "values). The attention checks below verify the seeds' argument: permutation "
      "equivariance without position and its failure with each scheme, translation "
      "invariance of the relative schemes, packing, padding and the KV cache.",
      head, Hq, seed, N, D));
  sec.body.append(figs);
  int n = 0, failed = 0;
  doc::table table;
  table.head = {"result", "check", "max error", "tolerance"};
  for (const auto& c : ctx.checks) {
    if (c.group != "attention") continue;
    ++n;
    failed += !c.passed;
    table.rows.push_back({c.passed ? "PASS" : "FAIL", c.name, num(c.max_error), num(c.tolerance)});
    table.row_class.push_back(c.passed ? "pass" : "fail");
  }
  sec.body.para(fmt::format(
      "Attention checks: {} run, {} failed (`posenc check --group attention`). For the *breaks* "
      "checks the error column is the deviation, which must exceed 1000 times the rounding "
      "bound.",
      n, failed));
  sec.body.add(std::move(table));
  return sec;
}

const bool registered_report_attention =
    register_report_section(50, "attention", attention_section);

}  // namespace
}  // namespace posenc::cli
