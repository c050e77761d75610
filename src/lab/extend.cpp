// Context extension of a trained RoPE model: each method's rope_config and LongRoPE's search
// (posenc/lab/extend.hpp).
#include "posenc/lab/extend.hpp"

#include <algorithm>
#include <cmath>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"

namespace posenc::lab {

namespace {

constexpr extension kExtensions[] = {extension::none, extension::linear, extension::dynamic,
                                     extension::yarn, extension::llama3, extension::longrope,
                                     extension::pose};

// lambda_i = omega_i / omega'_i of a config against the unscaled one.
std::vector<double> divisors_of(const rope_config& c) {
  rope_config plain = c;
  plain.type = rope_type::default_;
  const rope_freqs a = rope_frequencies(plain), b = rope_frequencies(c);
  std::vector<double> d(a.inv_freq.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = a.inv_freq[i] / b.inv_freq[i];
  return d;
}

// The search's constraint: non-decreasing in i, within [1, hi].
void make_feasible(std::vector<double>& lam, double hi) {
  double run = 1;
  for (double& x : lam) {
    x = std::clamp(x, 1.0, hi);
    run = std::max(run, x);
    x = run;
  }
}

}  // namespace

std::span<const extension> extensions() {
  return kExtensions;
}

const char* extension_name(extension e) {
  switch (e) {
    case extension::none:
      return "none";
    case extension::linear:
      return "linear";
    case extension::dynamic:
      return "dynamic";
    case extension::yarn:
      return "yarn";
    case extension::llama3:
      return "llama3";
    case extension::longrope:
      return "longrope";
    case extension::pose:
      return "pose";
  }
  return "?";
}

extension extension_from_name(const std::string& name, const std::string& arg) {
  for (extension e : kExtensions)
    if (name == extension_name(e)) return e;
  fail("{} must be one of none, linear, dynamic, yarn, llama3, longrope, pose; got '{}'", arg,
       name);
}

rope_config extension_config(extension e, int64_t head_dim, double theta, int64_t train_len,
                             int64_t factor, std::span<const double> long_factor) {
  if (head_dim < 2 || head_dim % 2 != 0)
    fail("extension_config: head_dim must be even and >= 2, got {}", head_dim);
  if (train_len < 2) fail("extension_config: train_len must be >= 2, got {}", train_len);
  if (factor < 1 || factor > 4096)
    fail("extension_config: factor must be in [1, 4096], got {}", factor);
  rope_config c;
  c.head_dim = c.rotary_dim = head_dim;
  c.theta = theta;
  c.max_position_embeddings = factor * train_len;
  const double s = static_cast<double>(factor);
  switch (e) {
    case extension::none:
      break;
    case extension::linear:
    case extension::pose:
      c.type = rope_type::linear;
      c.factor = s;
      break;
    case extension::dynamic:  // s = max(1, L' / L) at each length L' (HF "dynamic", factor 1)
      c.type = rope_type::dynamic;
      c.factor = 1;
      c.max_position_embeddings = train_len;
      break;
    case extension::yarn:
      c.type = rope_type::yarn;
      c.factor = s;
      c.original_max_position_embeddings = train_len;
      break;
    case extension::llama3:
      c.type = rope_type::llama3;
      c.factor = s;
      c.original_max_position_embeddings = train_len;
      c.low_freq_factor = 1;
      c.high_freq_factor = 4;
      break;
    case extension::longrope:
      if (static_cast<int64_t>(long_factor.size()) != head_dim / 2)
        fail("extension_config: longrope needs {} long_factor divisors (head_dim / 2), got {}",
             head_dim / 2, long_factor.size());
      c.type = rope_type::longrope;
      c.factor = s;
      c.original_max_position_embeddings = train_len;
      c.short_factor.assign(static_cast<size_t>(head_dim / 2), 1.0);
      c.long_factor.assign(long_factor.begin(), long_factor.end());
      break;
  }
  rope_validate(c);
  return c;
}

longrope_search_result longrope_search(const model::transformer<float>& m, const lab_options& o,
                                       const task& t, const longrope_search_options& so) {
  const model::model_config& mc = m.config();
  if (mc.scheme != model::pos_scheme::rope)
    fail("longrope_search: the model must use scheme rope, got {}",
         model::pos_scheme_name(mc.scheme));
  if (so.budget < 3 || so.budget > 100000)
    fail("longrope_search: budget must be in [3, 10^5], got {}", so.budget);
  if (so.parents < 1 || so.children < 1)
    fail("longrope_search: parents and children must be >= 1, got {} and {}", so.parents,
         so.children);
  if (!(so.sigma > 0) || !std::isfinite(so.sigma))
    fail("longrope_search: sigma must be finite and > 0, got {}", so.sigma);
  const int64_t D = mc.d_model / mc.n_heads;
  const double theta = mc.pos.rope ? mc.pos.rope->theta : mc.pos.rope_theta;
  const int64_t target = so.factor * so.train_len;
  const double s = static_cast<double>(so.factor), hi = 2 * s;
  const int64_t half = D / 2;

  longrope_search_result res;
  std::vector<std::pair<double, std::vector<double>>> pop;  // (score, lambda), best first
  auto score = [&](std::vector<double> lam) {
    make_feasible(lam, hi);
    model::model_config c = mc;
    c.pos.rope = extension_config(extension::longrope, D, theta, so.train_len, so.factor, lam);
    c.pos.rope_seq_len = target;
    model::transformer<float> cand(c);
    cand.params() = m.params();
    const double loss = held_out_loss(cand, o, t, target, so.begin, so.end);
    res.scores.push_back(loss);
    ++res.evaluated;
    pop.emplace_back(std::isfinite(loss) ? loss : HUGE_VAL, std::move(lam));
    return loss;
  };
  // The population's seeds: linear, NTK-aware, YaRN.
  res.linear_loss = score(std::vector<double>(static_cast<size_t>(half), s));
  std::vector<double> ntk(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    ntk[i] = half > 1 ? std::pow(s, 2.0 * static_cast<double>(i) / static_cast<double>(D - 2)) : s;
  score(ntk);
  score(divisors_of(extension_config(extension::yarn, D, theta, so.train_len, so.factor)));
  rng r(so.seed ^ 0x6c6f6e67726f7065ull);  // "longrope"
  while (res.evaluated < so.budget) {
    std::stable_sort(pop.begin(), pop.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (static_cast<int64_t>(pop.size()) > so.parents) pop.resize(static_cast<size_t>(so.parents));
    const auto parents = pop;
    const int64_t np = static_cast<int64_t>(parents.size());
    for (int64_t k = 0; k < so.children && res.evaluated < so.budget; ++k) {
      const auto& a = parents[r.below(static_cast<uint64_t>(np))].second;
      const auto& b = parents[r.below(static_cast<uint64_t>(np))].second;
      std::vector<double> child(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        child[i] = (r.below(2) ? a : b)[i];
        if (r.below(2)) child[i] *= std::exp(so.sigma * r.normal());
      }
      score(std::move(child));
    }
  }
  std::stable_sort(pop.begin(), pop.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  res.long_factor = pop.front().second;
  res.loss = pop.front().first;
  return res;
}

}  // namespace posenc::lab
