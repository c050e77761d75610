#include "posenc/core/machine.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "posenc/core/threads.hpp"

namespace posenc {

float fma_chains(int64_t iters);  // machine_simd.cpp

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
  // First touch by the threads that will stream the data.
#pragma omp parallel num_threads(threads)
  {
    auto [lo, hi] = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t i = lo; i < hi; ++i) {
      pa[i] = 0.0;
      pb[i] = 1.0;
      pc[i] = 2.0;
    }
  }
  const double s = 3.0;
  double best_copy = 1e30, best_triad = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now();
#pragma omp parallel num_threads(threads)
    {
      auto [lo, hi] = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i];
    }
    double t1 = now();
#pragma omp parallel num_threads(threads)
    {
      auto [lo, hi] = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    }
    double t2 = now();
    best_copy = std::min(best_copy, t1 - t0);
    best_triad = std::min(best_triad, t2 - t1);
  }
  // Keep the result observable so the stores are not elided.
  volatile double sink = pa[n / 2];
  (void)sink;
  r.copy_gbps = 2.0 * static_cast<double>(r.bytes_per_array) / best_copy / 1e9;
  r.triad_gbps = 3.0 * static_cast<double>(r.bytes_per_array) / best_triad / 1e9;
  return r;
}

double measure_fma_peak_gflops(int threads, double seconds, int reps) {
  const int lanes = simd_float_lanes();
  // Calibrate the iteration count on one thread.
  int64_t iters = 1 << 16;
  for (;;) {
    double t0 = now();
    volatile float v = fma_chains(iters);
    (void)v;
    double dt = now() - t0;
    if (dt > seconds / 4 || iters > (int64_t{1} << 40)) {
      iters = static_cast<int64_t>(static_cast<double>(iters) * seconds / std::max(dt, 1e-9));
      break;
    }
    iters *= 4;
  }
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now();
#pragma omp parallel num_threads(threads)
    {
      volatile float v = fma_chains(iters);
      (void)v;
    }
    best = std::min(best, now() - t0);
  }
  const double flops = 2.0 * 12.0 * lanes * static_cast<double>(iters) * threads;
  return flops / best / 1e9;
}

}  // namespace posenc
