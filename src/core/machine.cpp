#include "posenc/core/machine.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "posenc/core/page_buffer.hpp"
#include "posenc/core/threads.hpp"
#include "src/core/bf16_dot.hpp"

namespace posenc {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct free_deleter {
  void operator()(double* p) const { std::free(p); }
};
using buffer = std::unique_ptr<double[], free_deleter>;

buffer alloc(size_t n) {
  void* p = std::aligned_alloc(64, ((n * sizeof(double) + 63) / 64) * 64);
  return buffer(static_cast<double*>(p));
}

}  // namespace

bandwidth_result measure_bandwidth(size_t bytes_per_array, int threads, int reps) {
  const int64_t n = static_cast<int64_t>(bytes_per_array / sizeof(double));
  buffer a = alloc(n), b = alloc(n), c = alloc(n);
  bandwidth_result r;
  r.bytes_per_array = static_cast<size_t>(n) * sizeof(double);
  r.threads = threads;
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
  // The read probe's array in 2 MiB pages, as the KV cache and the decode inputs are (4 KiB pages
  // read ~15% slower here: a TLB miss every 4 KiB and prefetch streams that stop at each page).
  page_buffer<double> h(static_cast<size_t>(n));
  double* ph = h.data();
  // First touch by the threads that will stream the data.
#pragma omp parallel num_threads(threads)
  {
    auto [lo, hi] = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t i = lo; i < hi; ++i) {
      pa[i] = 0.0;
      pb[i] = 1.0;
      pc[i] = 2.0;
      ph[i] = 1.0;
    }
  }
  const double s = 3.0;
  double best_copy = 1e30, best_triad = 1e30, best_read = 1e30;
  std::vector<double> sums(static_cast<size_t>(threads), 0.0);
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now();
#pragma omp parallel num_threads(threads)
    {
      // Plain variables, not a structured binding: clang (14) rejects a binding referenced in an
      // omp simd loop, which it outlines as a capture.
      const auto range = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
      const int64_t lo = range.first, hi = range.second;
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i];
    }
    double t1 = now();
#pragma omp parallel num_threads(threads)
    {
      const auto range = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
      const int64_t lo = range.first, hi = range.second;  // as above
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    }
    double t2 = now();
    // Read: sum h, 16 independent partial sums per thread (enough chains for the add latency
    // on any target, so that the loads, not the adds, bound it).
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      auto [lo, hi] = thread_range(n, t, omp_get_num_threads());
      double part[16] = {};
      int64_t i = lo;
      for (; i + 16 <= hi; i += 16)
        for (int u = 0; u < 16; ++u) part[u] += ph[i + u];
      for (; i < hi; ++i) part[0] += ph[i];
      double sum = 0;
      for (double x : part) sum += x;
      sums[static_cast<size_t>(t)] += sum;
    }
    double t3 = now();
    best_copy = std::min(best_copy, t1 - t0);
    best_triad = std::min(best_triad, t2 - t1);
    best_read = std::min(best_read, t3 - t2);
  }
  // Keep the results observable so the stores and the sums are not elided.
  volatile double sink = pa[n / 2];
  for (double x : sums) sink = sink + x;
  (void)sink;
  r.copy_gbps = 2.0 * static_cast<double>(r.bytes_per_array) / best_copy / 1e9;
  r.triad_gbps = 3.0 * static_cast<double>(r.bytes_per_array) / best_triad / 1e9;
  r.read_gbps = static_cast<double>(r.bytes_per_array) / best_read / 1e9;
  return r;
}

namespace {

// Times `loop(iters)` on `threads` threads: the count calibrated on one thread to about
// `seconds`, then `reps` runs; fills r.threads, r.gflops (best) and r.gflops_median, counting
// flops_per_iter per thread and iteration.
template <typename Loop>
void time_peak_loop(fma_peak_result& r, int threads, double seconds, Loop loop,
                    double flops_per_iter) {
  int64_t iters = 1 << 14;
  for (;;) {
    double t0 = now();
    volatile float v = loop(iters);
    (void)v;
    double dt = now() - t0;
    if (dt > seconds / 4 || iters > (int64_t{1} << 40)) {
      iters = std::max<int64_t>(
          1, static_cast<int64_t>(static_cast<double>(iters) * seconds / std::max(dt, 1e-9)));
      break;
    }
    iters *= 4;
  }
  std::vector<double> times;
  for (int rep = 0; rep < r.reps; ++rep) {
    double t0 = 0, t1 = 0;
    int team = 0;
    // The clock starts once every thread of the team exists and stops when the last one is
    // done: waking the pool is not FMA time.
#pragma omp parallel num_threads(threads)
    {
#pragma omp single
      {
        team = omp_get_num_threads();
        t0 = now();
      }  // implied barrier
      volatile float v = loop(iters);
      (void)v;
#pragma omp barrier
#pragma omp single
      t1 = now();
    }
    r.threads = team;
    times.push_back(t1 - t0);
  }
  std::sort(times.begin(), times.end());
  const double flops = flops_per_iter * static_cast<double>(iters) * r.threads;
  r.gflops = flops / times.front() / 1e9;
  r.gflops_median = flops / times[times.size() / 2] / 1e9;
}

}  // namespace

fma_peak_result measure_fma_peak(int threads, double seconds, int reps) {
  fma_peak_result r;
  r.target = simd_target_name();
  r.lanes = simd_float_lanes();
  r.chains = fma_probe_chains();
  r.reps = std::max(reps, 1);
  time_peak_loop(r, threads, seconds, fma_chains, 2.0 * r.chains * r.lanes);
  return r;
}

fma_peak_result measure_bf16_dot_peak(int threads, double seconds, int reps) {
  fma_peak_result r;
  r.reps = std::max(reps, 1);
  if (!detail::bf16_dot_cpu()) {
    r.target = "none";
    return r;
  }
  r.target = "AVX512_BF16";
  r.lanes = 16;
  r.chains = detail::kBf16DotChains;
  // Each vdpbf16ps: 16 lanes x 2 products x (multiply + add).
  time_peak_loop(r, threads, seconds, detail::bf16_dot_chains, 4.0 * r.chains * r.lanes);
  return r;
}

double measure_fma_peak_gflops(int threads, double seconds, int reps) {
  return measure_fma_peak(threads, seconds, reps).gflops;
}

}  // namespace posenc
