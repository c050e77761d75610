// posenc bench cases for the attention forward (issue 5): attention_forward on float32,
// causal (bottom-right aligned), Hq = 32 query heads reading Hkv = 8 key/value heads (GQA),
// D = 128, with the position schemes none / RoPE (half layout, theta 10^4, exact angles) /
// ALiBi (Press slopes) / T5 (causal buckets, 32 buckets, max distance 128), at T = S = 2048;
// head dims 64, 80, 96, 256; decode steps (T = 1 and 4) against S = 8192 keys with GQA, MHA and
// MQA; and, with --extended, T = S = 8192 and 16384 prefill and S = 65536 decode.
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
// The shapes are the perf list of the attention case table (perf_cases() of
// include/posenc/verify/attention_cases.hpp), whose names are these cases' names; the inputs
// are that table's fixture. Validation (before timing): the table's check mode on the reduced
// problem perf_validation_case() gives (the same scheme and seed; the last 16 queries against
// all S keys for the forward, the T = S = 192 prefix for the backward, since the reference at
// T = S = 2048 would take minutes), with the tolerances derived in that header. A decode case's
// reduced problem is the case itself: it is checked on the inputs it is timed on, drawn once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bench.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/core/half.hpp"
#include "posenc/core/page_buffer.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/verify/attention_cases.hpp"

namespace posenc::cli {
namespace {

namespace ac = posenc::attention_cases;

// One case's inputs: the case table's fixture (float32); out and lse point into it.
struct attn_data {
  ac::spec c;
  ac::fixture<float> f;
  page_buffer<float> k, v;         // decode cases: K and V in 2 MiB pages
  page_buffer<uint16_t> k16, v16;  // (the same, half precision)
  attention_params<float> params() const {
    attention_params<float> p = f.p;
    p.out = const_cast<float*>(f.out_fast.data());
    return p;
  }
};

// Decode cases (T <= 8) read K and V from 2 MiB pages, as kv_cache allocates them
// (page_buffer.hpp). Token-major, each head's rows lie Hkv * D elements apart (a 4 KiB page
// per row otherwise); head-major (layout=head, the cache's own layout) they are one run.
std::shared_ptr<attn_data> make_data(const ac::spec& c) {
  auto d = std::make_shared<attn_data>();
  d->c = c;
  ac::build(d->f, c);
  if (c.T <= 8) {
    auto& f = d->f;
    auto move_to_pages = [](auto& buf, const auto& src) {
      using T = std::decay_t<decltype(src[0])>;
      buf = page_buffer<T>(src.size());
      std::copy(src.begin(), src.end(), buf.data());
      return static_cast<const T*>(buf.data());
    };
    // The arrays the params point at: token-major, or head-major (spec::head_major).
    if (c.kv == kv_storage::f32) {
      f.p.k = move_to_pages(d->k, c.head_major ? f.k_hm : f.k);
      f.p.v = move_to_pages(d->v, c.head_major ? f.v_hm : f.v);
    } else {
      f.p.k16 = move_to_pages(d->k16, c.head_major ? f.k16_hm : f.k16);
      f.p.v16 = move_to_pages(d->v16, c.head_major ? f.v16_hm : f.v16);
    }
  }
  return d;
}

// The table's check mode on the case's reduced problem; "" when it passes. When that problem is
// the case itself (a forward with T <= 16: decode), on the case's own inputs d, as timed.
std::string validate(const ac::spec& c, attn_data* d = nullptr) {
  const ac::spec vc = ac::perf_validation_case(c);
  const bool same =
      d && vc.T == c.T && vc.S == c.S && c.passes == ac::forward && c.dtypes == ac::f32;
  const auto r = same ? ac::check_case(vc, d->f) : ac::check_case(vc);
  if (r.passed) return "";
  return r.name + ": max_error " + std::to_string(r.max_error) + " > tolerance " +
         std::to_string(r.tolerance) + " (" + r.detail + ")";
}

bench_case make_attention(const bench_options& o, ac::spec c) {
  if (o.quick) {
    c.T = std::min<int64_t>(c.T, 128);  // decode shapes (T <= 8) keep their T
    c.S = c.T <= 8 ? std::min<int64_t>(c.S, 256) : c.T;
  }
  const int64_t T = c.T, S = c.S, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  auto d = make_data(c);
  bench_case bc;
  bc.name = c.name;
  // Visible (query, key) pairs per head: query i sees keys j <= S - T + i.
  const double pairs = double(T) * double(S - T) + double(T) * double(T + 1) / 2;
  bc.flops = 4.0 * double(D) * double(Hq) * pairs;
  // A decode step (T <= 8: one token, or a few of speculative decoding) reads every key and
  // value once and does 4 D FLOPs per 8 D bytes of them per query (T) and query head sharing
  // the kv head (G): memory-bound for small T G (0.5 T G FLOP/byte: GQA T = 1), compute-bound
  // for large (MQA: 16 FLOP/byte, above this machine kind's ~5 FLOP/byte ridge), so its limit
  // is the roofline's binding one.
  const bool decode = T <= 8;
  const double kv_bytes = c.kv == kv_storage::f32 ? 4.0 : 2.0;
  if (decode) bc.bytes = kv_bytes * double(2 * S * Hkv * D) + 4.0 * double(2 * T * Hq * D);
  // bfloat16 products on a vdpbf16ps CPU: that instruction's rate is the limit (prefill shapes;
  // decode shapes run float32 products).
  bc.limit = decode                                                              ? "roofline"
             : c.products == attention_products::bf16 && attention_bf16_native() ? "bf16 peak"
                                                                                 : "peak";
  bc.reads_only = decode;  // K and V read once; the writes are T Hq D floats
  if (!decode) bc.gemm = {T, S, D, false};
  bc.validate = [c, d] { return validate(c, d.get()); };
  bc.run = [d] { attention_forward(d->params()); };
  bc.note = "attention_forward float32 causal, T=" + std::to_string(T) + " S=" + std::to_string(S) +
            " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
            " D=" + std::to_string(D) + ", scheme " + ac::name(c.sch) +
            (c.q_half                  ? ", queries, keys and values stored as " + name(c.kv)
             : c.kv == kv_storage::f32 ? ""
                                       : ", keys and values stored as " + name(c.kv)) +
            (c.products == attention_products::bf16
                 ? std::string(", bfloat16 products (") +
                       (attention_bf16_native() ? "vdpbf16ps: 2 multiply-adds per float32 lane, "
                                                  "twice the FMA peak's rate"
                                                : "this CPU has no vdpbf16ps: float32 products") +
                       ")"
                 : std::string()) +
            (c.head_major ? (c.k_blocked ? ", keys head-major in 8-key blocks (k_blocked), values "
                                           "head-major rows"
                                         : ", keys and values head-major")
                          : "") +
            "; flops = 4 D Hq x visible pairs (causal lower triangle only, " +
            std::to_string(static_cast<int64_t>(pairs)) + " pairs per head)";
  return bc;
}

// ---- backward -------------------------------------------------------------------------------
// attention_backward on the same inputs, given the forward's out and lse and a dO filled with
// bench_fill. FLOPs: 2.5 x the forward's causal count (the FlashAttention convention: the
// backward's five block products against the forward's two).
struct bwd_data {
  std::shared_ptr<attn_data> d;
  std::vector<float> lse, dout, dq, dk, dv;
  attention_grads<float> grads() {
    attention_grads<float> g;
    g.out = d->f.out_fast.data(), g.lse = lse.data(), g.dout = dout.data();
    g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    return g;
  }
};

std::shared_ptr<bwd_data> make_bwd(const std::shared_ptr<attn_data>& d) {
  auto b = std::make_shared<bwd_data>();
  b->d = d;
  b->lse.resize(d->f.lse_fast.size());
  b->dout.resize(d->f.out_fast.size());
  b->dq.resize(d->f.q.size());
  b->dk.resize(d->f.k.size());
  b->dv.resize(d->f.v.size());
  bench_fill(b->dout, 14);
  auto p = d->params();
  p.lse = b->lse.data();
  attention_forward(p);
  return b;
}

bench_case make_backward(const bench_options& o, ac::spec c) {
  if (o.quick) c.T = c.S = std::min<int64_t>(c.T, 128);
  const int64_t T = c.T, Hq = c.Hq, D = c.D;
  auto b = make_bwd(make_data(c));
  bench_case bc;
  bc.name = c.name;
  const double pairs = double(T) * double(T + 1) / 2;
  bc.flops = 2.5 * 4.0 * double(D) * double(Hq) * pairs;
  bc.limit = "peak";
  bc.gemm = {T, T, D, true};
  bc.validate = [c] { return validate(c); };
  bc.run = [b] { attention_backward(b->d->params(), b->grads()); };
  bc.note = "attention_backward float32 causal, T=S=" + std::to_string(T) +
            " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(c.Hkv) +
            " D=" + std::to_string(D) + ", scheme " + ac::name(c.sch) +
            "; flops = 2.5 x the forward's 4 D Hq x causal pairs (FlashAttention convention)";
  return bc;
}

// The memory cases' problem: causal, no position scheme, H query and key/value heads.
ac::spec memory_spec(int64_t T, int64_t H, int64_t D, unsigned passes, const std::string& name) {
  ac::spec c{T, T, D, H, H, ac::scheme::none, ac::mask::causal, 11};
  c.passes = passes;
  c.dtypes = ac::f32;
  c.group = "memory";
  c.name = name;
  return c;
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

// One call under a reset high-water mark: the resident set before it and the peak during it.
struct hwm_reading {
  bool reset = false;
  std::pair<long, long> before{-1, -1}, after{-1, -1};
};
template <typename F>
void run_under_hwm(hwm_reading& h, F&& call) {
  // Reset the high-water mark to the current RSS ("5" in /proc/self/clear_refs, Linux >= 4.0).
  {
    std::ofstream cr("/proc/self/clear_refs");
    cr << "5";
    cr.flush();
    h.reset = static_cast<bool>(cr);
  }
  h.before = rss_kb();
  call();
  h.after = rss_kb();
}

// Peak-RSS growth of one forward call at T = S = 32768, H = 8, D = 64: run once (the call is the
// measurement; `once` skips the warm-up and the repetitions, which would take minutes).
bench_case make_memory(const bench_options& o, const std::string& name) {
  const int64_t T = o.quick ? 1024 : 32768, H = 8, D = 64;
  const auto c = memory_spec(T, H, D, ac::forward, name);
  auto d = make_data(c);
  auto h = std::make_shared<hwm_reading>();
  bench_case bc;
  bc.name = name;
  const double pairs = double(T) * double(T + 1) / 2;
  bc.flops = 4.0 * double(D) * double(H) * pairs;
  bc.limit = "peak";
  bc.once = true;
  bc.note = std::string("attention_forward float32 causal T=S=") + std::to_string(T) +
            " H=8 D=64, flops = 4 D H x causal pairs, one run; ";
  bc.validate = [c] { return validate(c); };
  bc.run = [d, h] { run_under_hwm(*h, [&] { attention_forward(d->params()); }); };
  bc.after = [h, T, H, D] {
    char buf[512];
    std::snprintf(
        buf, sizeof buf,
        "peak memory of one call: q, k, v, out = %.0f MiB; resident before %.1f MiB, "
        "peak during the call %.1f MiB, growth %.1f MiB (%s); an (H, T, S) float score "
        "matrix would be %.0f MiB, the packed K and V copies S H (2 D + 16) x 4 B = %.0f MiB",
        4.0 * double(T * H * D) * 4 / (1 << 20), double(h->before.first) / 1024,
        double(h->after.second) / 1024, double(h->after.second - h->before.first) / 1024,
        h->reset ? "high-water mark reset before the call" : "VmHWM not reset: upper bound",
        double(H) * double(T) * double(T) * 4 / (1 << 20),
        double(T * H * (2 * D + 16)) * 4 / (1 << 20));
    return std::string(buf);
  };
  return bc;
}

// Peak-RSS growth of one backward call at T = S = 16384, H = 8, D = 64 (like make_memory; the
// forward that gives the backward its out and lse runs before, outside the reading).
bench_case make_memory_backward(const bench_options& o, const std::string& name) {
  const int64_t T = o.quick ? 1024 : 16384, H = 8, D = 64;
  const auto c = memory_spec(T, H, D, ac::backward, name);
  auto b = make_bwd(make_data(c));
  auto h = std::make_shared<hwm_reading>();
  bench_case bc;
  bc.name = name;
  const double pairs = double(T) * double(T + 1) / 2;
  bc.flops = 2.5 * 4.0 * double(D) * double(H) * pairs;
  bc.limit = "peak";
  bc.once = true;
  bc.note = std::string("attention_backward float32 causal T=S=") + std::to_string(T) +
            " H=8 D=64, flops = 2.5 x 4 D H x causal pairs, one run; ";
  bc.validate = [c] { return validate(c); };
  bc.run = [b, h] { run_under_hwm(*h, [&] { attention_backward(b->d->params(), b->grads()); }); };
  bc.after = [h, T, H, D] {
    char buf[512];
    std::snprintf(
        buf, sizeof buf,
        "peak memory of one backward call: q, k, v, out, dO, dq, dk, dv = %.0f MiB; "
        "resident before %.1f MiB, peak during the call %.1f MiB, growth %.1f MiB "
        "(%s); an (H, T, S) float probability matrix would be %.0f MiB, one (S, D) "
        "float buffer per thread %.1f MiB",
        8.0 * double(T * H * D) * 4 / (1 << 20), double(h->before.first) / 1024,
        double(h->after.second) / 1024, double(h->after.second - h->before.first) / 1024,
        h->reset ? "high-water mark reset before the call" : "VmHWM not reset: upper bound",
        double(H) * double(T) * double(T) * 4 / (1 << 20), double(T * D) * 4 / (1 << 20));
    return std::string(buf);
  };
  return bc;
}

// A decode step over a million keys (extended): T = 1, Hq = 32 query heads over Hkv = 8 key and
// value heads of D = 128, no position scheme, the keys and values float16 in a kv_cache of
// S = 2^20 tokens (head-major, keys in 8-key blocks: 4 GiB), built by appending chunks of 4,096
// tokens of bench_fill values, as a server's cache grows. The step reads K and V once: its limit
// is the DRAM read-bandwidth probe (the roofline's binding limit, as the other decode cases; a
// probe the size of the cache would take another 4 GiB).
// Validation: query heads 0 and 31 (kv heads 0 and 7) in double from the cache's stored values,
// within forward_tolerance's bound at this S (attention_cases.cpp: (2 ep + (2 S + 8) u) V with
// ep = 2 ds + 4 u A + 2 u, ds = (D + 11) u A + 2 u A, A = max|q| max|k| / sqrt(D), V = max|v|).
struct million_data {
  std::unique_ptr<kv_cache<float>> cache;
  std::vector<float> q, out;
  attention_params<float> params() {
    attention_params<float> p;
    p.q = q.data(), p.out = out.data();
    p.T = 1, p.Hq = 32, p.D = cache->head_dim();
    p.causal = true;
    return p;
  }
};

std::string validate_million(million_data& m) {
  const auto& c = *m.cache;
  const int64_t S = c.size(), D = c.head_dim(), Hq = 32, G = Hq / c.kv_heads();
  attention_forward_cached(m.params(), c);
  double qmax = 0, kmax = 0, vmax = 0, worst = 0;
  for (int64_t h = 0; h < Hq; ++h) {
    double n = 0;
    for (int64_t e = 0; e < D; ++e) n += double(m.q[h * D + e]) * m.q[h * D + e];
    qmax = std::max(qmax, std::sqrt(n));
  }
  for (const int64_t h : {int64_t{0}, Hq - 1}) {
    const int64_t hk = h / G;
    std::vector<double> s(static_cast<size_t>(S));
    double mx = -INFINITY;
    for (int64_t j = 0; j < S; ++j) {
      double dot = 0, n = 0, vm = 0;
      for (int64_t e = 0; e < D; ++e) {
        const double k = f16_to_float(c.keys16()[c.key_offset(j, hk, e)]);
        dot += double(m.q[h * D + e]) * k;
        n += k * k;
        vm = std::max(vm, std::abs(double(f16_to_float(c.values16()[c.row_offset(j, hk) + e]))));
      }
      kmax = std::max(kmax, std::sqrt(n));
      vmax = std::max(vmax, vm);
      s[j] = dot / std::sqrt(double(D));
      mx = std::max(mx, s[j]);
    }
    std::vector<double> o(static_cast<size_t>(D), 0.0);
    double l = 0;
    for (int64_t j = 0; j < S; ++j) {
      const double p = std::exp(s[j] - mx);
      l += p;
      for (int64_t e = 0; e < D; ++e)
        o[e] += p * double(f16_to_float(c.values16()[c.row_offset(j, hk) + e]));
    }
    for (int64_t e = 0; e < D; ++e)
      worst = std::max(worst, std::abs(o[e] / l - double(m.out[h * D + e])));
  }
  const double u = 0x1p-24, A = qmax * kmax / std::sqrt(double(D));
  const double ds = double(D + 11) * u * A + 2 * u * A, ep = 2 * ds + 4 * u * A + 2 * u;
  const double tol = (2 * ep + double(2 * S + 8) * u) * vmax;
  if (worst <= tol) return "";
  return "decode over " + std::to_string(S) + " keys: max error " + std::to_string(worst) +
         " > tolerance " + std::to_string(tol);
}

bench_case make_million(const bench_options& o, const std::string& name) {
  const int64_t S = o.quick ? 4096 : int64_t{1} << 20, Hkv = 8, D = 128, chunk = 4096;
  auto m = std::make_shared<million_data>();
  m->cache =
      std::make_unique<kv_cache<float>>(S, Hkv, D, attention_position<float>{}, 0, kv_storage::f16);
  std::vector<float> k(static_cast<size_t>(chunk * Hkv * D)), v(k.size());
  for (int64_t t = 0; t < S; t += chunk) {
    bench_fill(k, 100 + static_cast<uint64_t>(t));
    bench_fill(v, 200 + static_cast<uint64_t>(t));
    m->cache->append(k.data(), v.data(), std::min(chunk, S - t));
  }
  m->q.resize(32 * D);
  bench_fill(m->q, 7);
  m->out.resize(32 * D);
  bench_case bc;
  bc.name = name;
  bc.flops = 4.0 * double(D) * 32.0 * double(S);
  bc.bytes = 2.0 * double(2 * S * Hkv * D) + 4.0 * double(2 * 32 * D);
  bc.limit = "roofline";
  bc.reads_only = true;
  bc.validate = [m] { return validate_million(*m); };
  bc.run = [m] { attention_forward_cached(m->params(), *m->cache); };
  bc.note =
      "attention_forward_cached float32, T=1 Hq=32 over a kv_cache of S=" + std::to_string(S) +
      " tokens, Hkv=8 D=128, keys and values float16 (head-major, keys in 8-key blocks), "
      "built by appending 4096-token chunks; bytes = the K and V read once (" +
      std::to_string(static_cast<int64_t>(bc.bytes / (1 << 20))) + " MiB)";
  return bc;
}

// The perf list in its order (forward cases at 40, backward at 45; the sort is stable), then the
// memory cases.
bool register_perf_cases() {
  bool ok = true;
  for (const auto& c : ac::perf_cases()) {
    const bool backward = c.passes & ac::backward;
    ok = ok && register_bench_case({backward ? 45 : 40, c.name,
                                    [c, backward](const bench_options& o) {
                                      return backward ? make_backward(o, c) : make_attention(o, c);
                                    },
                                    c.extended});
  }
  return ok;
}

const bool registered_bench_attention =
    register_perf_cases() &&
    register_bench_case({49, "memory/T=32768/S=32768/H=8/D=64/causal",
                         [](const bench_options& o) {
                           return make_memory(o, "memory/T=32768/S=32768/H=8/D=64/causal");
                         }}) &&
    register_bench_case({50, "memory_backward/T=16384/S=16384/H=8/D=64/causal",
                         [](const bench_options& o) {
                           return make_memory_backward(
                               o, "memory_backward/T=16384/S=16384/H=8/D=64/causal");
                         }}) &&
    register_bench_case(
        {41, "attention/T=1/S=1048576/Hq=32/Hkv=8/D=128/scheme=none/kv=f16/cache",
         [](const bench_options& o) {
           return make_million(
               o, "attention/T=1/S=1048576/Hq=32/Hkv=8/D=128/scheme=none/kv=f16/cache");
         },
         true});

}  // namespace
}  // namespace posenc::cli
