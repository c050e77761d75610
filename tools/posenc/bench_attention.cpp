// posenc bench cases for the attention forward (issue 5): attention_forward on float32,
// causal (bottom-right aligned), Hq = 32 query heads reading Hkv = 8 key/value heads (GQA),
// D = 128, with the position schemes none / RoPE (half layout, theta 10^4, exact angles) /
// ALiBi (Press slopes) / T5 (causal buckets, 32 buckets, max distance 128), at T = S = 2048,
// and the decode step T = 1 against S = 8192 keys.
//
// FLOPs counted: 4 D per visible (query head, query, key) triple (2 D for q.k, 2 D for p v);
// only the causal lower triangle is visible, so T = S = 2048 counts T (T + 1) / 2 pairs per
// head. Softmax, bias and RoPE work are not counted (they are the overhead the fraction shows).
//
// A memory case, memory/T=32768/S=32768/H=8/D=64/causal, measures the peak resident set of one
// call (Linux VmHWM, reset to the current RSS through /proc/self/clear_refs before the call) and
// states it in the case's note: the growth is O(S * D) (the transposed key blocks) plus per-thread
// tiles, far from the 32 GiB an (H, T, S) float score matrix would take. Its name avoids the
// word "attention" so that `--filter attention` (bench/compare_torch.py) leaves it out.
//
// Validation (before timing): a few sampled queries are recomputed by attention_reference on
// the sub-problem of that one query (T' = 1 and the S' = S - T + i + 1 keys it can see, the same
// positions, so the same biases and rotations) and compared with the bound derived in the header
// of tests/test_attention_simd.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"

namespace posenc::cli {
namespace {

struct attn_data {
  int64_t T, S, Hq, Hkv, D;
  std::string scheme;
  std::vector<float> q, k, v, out;
  rope_freqs freqs;
  std::vector<double> slopes;
  t5_bias_table t5;
  attention_params<float> params() const {
    attention_params<float> p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.out = const_cast<float*>(out.data());
    p.T = T;
    p.S = S;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.D = D;
    p.causal = true;
    if (scheme == "rope") p.pos.rope.freqs = &freqs;
    if (scheme == "alibi") p.pos.alibi = slopes;
    if (scheme == "t5") p.pos.t5 = attention_t5_view(t5);
    return p;
  }
};

double max_row_norm(const std::vector<float>& x, int64_t D) {
  double best = 0;
  for (size_t r = 0; r + static_cast<size_t>(D) <= x.size(); r += static_cast<size_t>(D)) {
    double n = 0;
    for (int64_t e = 0; e < D; ++e) n += double(x[r + e]) * x[r + e];
    best = std::max(best, n);
  }
  return std::sqrt(best);
}

// Runs the fast path once and compares sampled queries with the reference on their
// one-query sub-problems. Bound (tests/test_attention_simd.cpp, u = 2^-24):
//   A = scale max|q_i| max|k_j|, B = max |bias|, V = max |v| <= 1
//   ds = (D + 10) u A + 2u (A + B);  e_p = 2 ds + 4u (A + B) + 2u;
//   |out - ref| <= (2 e_p + (2S + 8) u) V
std::string validate_attention(attn_data& d) {
  auto p = d.params();
  attention_forward(p);
  const double u = 0x1p-24;
  const double A = (1 / std::sqrt(double(d.D))) * max_row_norm(d.q, d.D) * max_row_norm(d.k, d.D);
  double B = 0;
  if (d.scheme == "alibi")
    for (double m : d.slopes) B = std::max(B, m * double(d.S));
  if (d.scheme == "t5")
    for (double w : d.t5.weights) B = std::max(B, std::fabs(w));
  const double ds = (double(d.D) + 10) * u * A + 2 * u * (A + B);
  const double ep = 2 * ds + 4 * u * (A + B) + 2 * u;
  const double bound = 2 * ep + (2 * double(d.S) + 8) * u;
  std::vector<int64_t> sample = {0, d.T / 3, d.T - 1};
  std::sort(sample.begin(), sample.end());
  sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
  double worst = 0;
  std::vector<float> ref(static_cast<size_t>(d.Hq * d.D));
  for (int64_t i : sample) {
    attention_params<float> s = p;
    s.q = d.q.data() + i * d.Hq * d.D;
    s.out = ref.data();
    s.T = 1;
    s.S = d.S - d.T + i + 1;  // the keys query i sees (a prefix of the (S, Hkv, D) arrays)
    attention_reference(s);
    for (int64_t e = 0; e < d.Hq * d.D; ++e)
      worst = std::max(worst, std::fabs(double(d.out[i * d.Hq * d.D + e]) - ref[e]) / bound);
  }
  if (!(worst <= 1))
    return "attention_forward differs from attention_reference by " + std::to_string(worst) +
           " x the derived float32 bound " + std::to_string(bound);
  return "";
}

std::shared_ptr<attn_data> make_data(int64_t T, int64_t S, int64_t Hq, int64_t Hkv, int64_t D,
                                     const std::string& scheme) {
  auto d = std::make_shared<attn_data>();
  d->T = T;
  d->S = S;
  d->Hq = Hq;
  d->Hkv = Hkv;
  d->D = D;
  d->scheme = scheme;
  d->q.resize(static_cast<size_t>(T * Hq * D));
  d->k.resize(static_cast<size_t>(S * Hkv * D));
  d->v.resize(static_cast<size_t>(S * Hkv * D));
  d->out.resize(static_cast<size_t>(T * Hq * D));
  bench_fill(d->q, 11);
  bench_fill(d->k, 12);
  bench_fill(d->v, 13);
  rope_config c;
  c.head_dim = c.rotary_dim = D;
  c.theta = 10000;
  d->freqs = rope_frequencies(c);
  d->slopes = alibi_slopes(Hq);
  t5_params tp;
  tp.bidirectional = false;
  d->t5 = t5_init(tp, Hq, 5, 1.0);
  return d;
}

bench_case make_attention(const bench_options& o, const std::string& name, int64_t T, int64_t S,
                          const std::string& scheme) {
  if (o.quick) {
    T = std::min<int64_t>(T, 128);
    S = T == 1 ? std::min<int64_t>(S, 256) : T;
  }
  const int64_t Hq = 32, Hkv = 8, D = 128;
  auto d = make_data(T, S, Hq, Hkv, D, scheme);
  bench_case bc;
  bc.name = name;
  // Visible (query, key) pairs per head: query i sees keys j <= S - T + i.
  const double pairs = double(T) * double(S - T) + double(T) * double(T + 1) / 2;
  bc.flops = 4.0 * double(D) * double(Hq) * pairs;
  // A decode step reads every key and value once and does 4 D FLOPs per 8 D bytes of them per
  // query head sharing the kv head (G = 4): memory-bound, so its limit is the bandwidth.
  if (T == 1) bc.bytes = 4.0 * double(2 * S * Hkv * D + 2 * T * Hq * D);
  bc.limit = T == 1 ? "bandwidth" : "peak";
  bc.validate = [d] { return validate_attention(*d); };
  bc.run = [d] { attention_forward(d->params()); };
  bc.note = "attention_forward float32 causal, T=" + std::to_string(T) + " S=" + std::to_string(S) +
            " Hq=32 Hkv=8 D=128, scheme " + scheme +
            "; flops = 4 D Hq x visible pairs (causal lower triangle only, " +
            std::to_string(static_cast<int64_t>(pairs)) + " pairs per head)";
  return bc;
}

// ---- backward -------------------------------------------------------------------------------
// attention_backward on the same inputs, given the forward's out and lse and a dO filled like
// the inputs. FLOPs: 2.5 x the forward's causal count (the FlashAttention convention: the
// backward's five block products against the forward's two).
//
// Validation: the tiled backward on the prefix sub-problem of the first Tv = min(T, 192) queries
// and keys (the same data, positions and biases) against attention_backward_reference, per
// gradient tensor, with the bound of tests/test_attention_backward.cpp (u = 2^-24):
//   W = max|dO_i|_2 max|v_j|_2;  e_s = (D + 10) u A + 2u (A + B);  e_P = 2 e_s + e_lse + 4u
//   E_S = 2 W e_P + (2D + 10) u W + |dO|_1 tol_out
//   dq <= scale Kinf (E_S + 2W (S + 12) u);  dk <= scale Qinf N (E_S + 2W (N + 12) u);
//   dv <= N Oinf (e_P + (N + 4) u),  N = G T (rows reading a key)
struct bwd_data {
  std::shared_ptr<attn_data> d;
  std::vector<float> lse, dout, dq, dk, dv;
  attention_grads<float> grads() {
    attention_grads<float> g;
    g.out = d->out.data(), g.lse = lse.data(), g.dout = dout.data();
    g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    return g;
  }
};

std::shared_ptr<bwd_data> make_bwd(std::shared_ptr<attn_data> d) {
  auto b = std::make_shared<bwd_data>();
  b->d = d;
  b->lse.resize(static_cast<size_t>(d->T * d->Hq));
  b->dout.resize(d->out.size());
  b->dq.resize(d->q.size());
  b->dk.resize(d->k.size());
  b->dv.resize(d->v.size());
  bench_fill(b->dout, 14);
  auto p = d->params();
  p.lse = b->lse.data();
  attention_forward(p);
  return b;
}

std::string validate_backward(bwd_data& b) {
  const attn_data& d = *b.d;
  const int64_t Tv = std::min<int64_t>(d.T, 192), Hq = d.Hq, Hkv = d.Hkv, D = d.D;
  auto p = d.params();
  std::vector<float> out(Tv * Hq * D), lse(Tv * Hq);
  p.T = p.S = Tv;
  p.out = out.data();
  p.lse = lse.data();
  attention_forward(p);
  std::vector<float> dq(Tv * Hq * D), dk(Tv * Hkv * D), dv(Tv * Hkv * D);
  std::vector<float> rq(dq.size()), rk(dk.size()), rv(dv.size());
  attention_grads<float> g;
  g.out = out.data(), g.lse = lse.data(), g.dout = b.dout.data();
  g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
  attention_backward(p, g);
  attention_grads<float> r = g;
  r.dq = rq.data(), r.dk = rk.data(), r.dv = rv.data();
  attention_backward_reference(p, r);

  const double u = 0x1p-24, scale = 1 / std::sqrt(double(D));
  auto maxabs = [](const float* x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(x[i])));
    return m;
  };
  std::vector<float> qv(d.q.begin(), d.q.begin() + Tv * Hq * D),
      kv(d.k.begin(), d.k.begin() + Tv * Hkv * D), vv(d.v.begin(), d.v.begin() + Tv * Hkv * D),
      dov(b.dout.begin(), b.dout.begin() + Tv * Hq * D);
  const double A = scale * max_row_norm(qv, D) * max_row_norm(kv, D);
  double B = 0;
  if (d.scheme == "alibi")
    for (double m : d.slopes) B = std::max(B, m * double(Tv));
  if (d.scheme == "t5")
    for (double w : d.t5.weights) B = std::max(B, std::fabs(w));
  double lmax = 0, do1 = 0;
  for (float x : lse) lmax = std::max(lmax, std::fabs(double(x)));
  for (int64_t r0 = 0; r0 < Tv * Hq; ++r0) {
    double n = 0;
    for (int64_t e = 0; e < D; ++e) n += std::fabs(double(dov[r0 * D + e]));
    do1 = std::max(do1, n);
  }
  const double e_s = (D + 10) * u * A + 2 * u * (A + B);
  const double ep = 2 * e_s + 4 * u * (A + B) + 2 * u;
  const double tol_out = (2 * ep + (2 * Tv + 8) * u) * maxabs(vv.data(), vv.size());
  const double e_lse = ep + (2 * Tv + 4) * u + u * lmax;
  const double W = max_row_norm(dov, D) * max_row_norm(vv, D);
  const double e_P = 2 * e_s + e_lse + 4 * u;
  const double E_S = 2 * W * e_P + (2 * D + 10) * u * W + do1 * tol_out;
  const double amp = std::sqrt(2.0);  // |q'| <= sqrt(2) max|q| after a rotation (RoPE)
  const double Qinf = amp * maxabs(qv.data(), qv.size()), Kinf = amp * maxabs(kv.data(), kv.size());
  const double N = double(Hq / Hkv) * double(Tv);
  const double tq = scale * Kinf * (E_S + 2 * W * (Tv + 12) * u);
  const double tk = scale * Qinf * N * (E_S + 2 * W * (N + 12) * u);
  const double tv = N * maxabs(dov.data(), dov.size()) * (e_P + (N + 4) * u);
  auto worst = [](const std::vector<float>& a, const std::vector<float>& ref, double tol) {
    double w = 0;
    for (size_t i = 0; i < a.size(); ++i)
      w = std::max(w,
                   std::fabs(double(a[i]) - ref[i]) / (tol + 0x1p-24 * std::fabs(double(ref[i]))));
    return w;
  };
  const double wq = worst(dq, rq, tq), wk = worst(dk, rk, tk), wv = worst(dv, rv, tv);
  if (!(wq <= 1 && wk <= 1 && wv <= 1))
    return "attention_backward differs from attention_backward_reference on the T = S = " +
           std::to_string(Tv) + " prefix: dq " + std::to_string(wq) + ", dk " + std::to_string(wk) +
           ", dv " + std::to_string(wv) + " x the derived float32 bounds";
  return "";
}

bench_case make_backward(const bench_options& o, const std::string& name, int64_t T,
                         const std::string& scheme) {
  if (o.quick) T = std::min<int64_t>(T, 128);
  const int64_t Hq = 32, Hkv = 8, D = 128;
  auto b = make_bwd(make_data(T, T, Hq, Hkv, D, scheme));
  bench_case bc;
  bc.name = name;
  const double pairs = double(T) * double(T + 1) / 2;
  bc.flops = 2.5 * 4.0 * double(D) * double(Hq) * pairs;
  bc.limit = "peak";
  bc.validate = [b] { return validate_backward(*b); };
  bc.run = [b] { attention_backward(b->d->params(), b->grads()); };
  bc.note = "attention_backward float32 causal, T=S=" + std::to_string(T) +
            " Hq=32 Hkv=8 D=128, scheme " + scheme +
            "; flops = 2.5 x the forward's 4 D Hq x causal pairs (FlashAttention convention)";
  return bc;
}

// Current and peak resident set, kB, from /proc/self/status (VmRSS, VmHWM); -1 if unreadable.
std::pair<long, long> rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string key;
  long rss = -1, hwm = -1;
  while (f >> key) {
    if (key == "VmRSS:") f >> rss;
    if (key == "VmHWM:") f >> hwm;
  }
  return {rss, hwm};
}

bench_case make_memory(const bench_options& o, const std::string& name) {
  const int64_t T = o.quick ? 1024 : 32768, H = 8, D = 64;
  auto d = make_data(T, T, H, H, D, "none");
  bench_case bc;
  bc.name = name;
  const double pairs = double(T) * double(T + 1) / 2;
  bc.flops = 4.0 * double(D) * double(H) * pairs;
  bc.limit = "peak";
  // Peak-RSS growth of one call: reset the high-water mark to the current RSS ("5" in
  // /proc/self/clear_refs, Linux >= 4.0), call, read VmHWM.
  bool reset = false;
  {
    std::ofstream cr("/proc/self/clear_refs");
    cr << "5";
    cr.flush();
    reset = static_cast<bool>(cr);
  }
  const auto before = rss_kb();
  attention_forward(d->params());
  const auto after = rss_kb();
  const double inputs_mib = 4.0 * double(T * H * D) * 4 / (1 << 20);
  const double grow_mib = double(after.second - before.first) / 1024;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "peak memory of one call: q, k, v, out = %.0f MiB; resident before %.1f MiB, peak "
                "during the call %.1f MiB, growth %.1f MiB (%s); an (H, T, S) float score "
                "matrix would be %.0f MiB, the transposed K copy S H D x 4 B = %.0f MiB",
                inputs_mib, double(before.first) / 1024, double(after.second) / 1024, grow_mib,
                reset ? "high-water mark reset before the call" : "VmHWM not reset: upper bound",
                double(H) * double(T) * double(T) * 4 / (1 << 20),
                double(T * H * D) * 4 / (1 << 20));
  bc.note = std::string("attention_forward float32 causal T=S=") + std::to_string(T) +
            " H=8 D=64, flops = 4 D H x causal pairs; " + buf;
  bc.validate = [d] { return validate_attention(*d); };
  bc.run = [d] { attention_forward(d->params()); };
  return bc;
}

// Peak-RSS growth of one backward call at T = S = 16384, H = 8, D = 64 (like make_memory).
bench_case make_memory_backward(const bench_options& o, const std::string& name) {
  const int64_t T = o.quick ? 1024 : 16384, H = 8, D = 64;
  auto b = make_bwd(make_data(T, T, H, H, D, "none"));
  bench_case bc;
  bc.name = name;
  const double pairs = double(T) * double(T + 1) / 2;
  bc.flops = 2.5 * 4.0 * double(D) * double(H) * pairs;
  bc.limit = "peak";
  bool reset = false;
  {
    std::ofstream cr("/proc/self/clear_refs");
    cr << "5";
    cr.flush();
    reset = static_cast<bool>(cr);
  }
  const auto before = rss_kb();
  attention_backward(b->d->params(), b->grads());
  const auto after = rss_kb();
  const double arrays_mib = 8.0 * double(T * H * D) * 4 / (1 << 20);
  const double grow_mib = double(after.second - before.first) / 1024;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "peak memory of one backward call: q, k, v, out, dO, dq, dk, dv = %.0f MiB; "
                "resident before %.1f MiB, peak during the call %.1f MiB, growth %.1f MiB (%s); "
                "an (H, T, S) float probability matrix would be %.0f MiB, one (S, D) float "
                "buffer per thread %.1f MiB",
                arrays_mib, double(before.first) / 1024, double(after.second) / 1024, grow_mib,
                reset ? "high-water mark reset before the call" : "VmHWM not reset: upper bound",
                double(H) * double(T) * double(T) * 4 / (1 << 20), double(T * D) * 4 / (1 << 20));
  bc.note = std::string("attention_backward float32 causal T=S=") + std::to_string(T) +
            " H=8 D=64, flops = 2.5 x 4 D H x causal pairs; " + buf;
  bc.validate = [b] { return validate_backward(*b); };
  bc.run = [b] { attention_backward(b->d->params(), b->grads()); };
  return bc;
}

bool add(int order, int64_t T, int64_t S, const std::string& scheme) {
  const std::string name = "attention/T=" + std::to_string(T) + "/S=" + std::to_string(S) +
                           "/Hq=32/Hkv=8/D=128/scheme=" + scheme;
  return register_bench_case({order, name, [name, T, S, scheme](const bench_options& o) {
                                return make_attention(o, name, T, S, scheme);
                              }});
}

bool add_backward(int order, int64_t T, const std::string& scheme) {
  const std::string name = "attention_backward/T=" + std::to_string(T) + "/S=" + std::to_string(T) +
                           "/Hq=32/Hkv=8/D=128/scheme=" + scheme;
  return register_bench_case({order, name, [name, T, scheme](const bench_options& o) {
                                return make_backward(o, name, T, scheme);
                              }});
}

const bool registered =
    add(40, 2048, 2048, "none") && add(41, 2048, 2048, "rope") && add(42, 2048, 2048, "alibi") &&
    add(43, 2048, 2048, "t5") && add(44, 1, 8192, "none") &&
    register_bench_case({49, "memory/T=32768/S=32768/H=8/D=64/causal",
                         [](const bench_options& o) {
                           return make_memory(o, "memory/T=32768/S=32768/H=8/D=64/causal");
                         }}) &&
    add_backward(45, 2048, "none") && add_backward(46, 2048, "alibi") &&
    register_bench_case(
        {50, "memory_backward/T=16384/S=16384/H=8/D=64/causal", [](const bench_options& o) {
           return make_memory_backward(o, "memory_backward/T=16384/S=16384/H=8/D=64/causal");
         }});

}  // namespace
}  // namespace posenc::cli
