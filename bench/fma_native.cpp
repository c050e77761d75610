// fma_native: a reference float32 FMA-peak probe compiled for this machine only (-march=native),
// the yardstick `posenc bench`'s in-process probe (src/core/machine*.cpp, Highway dynamic
// dispatch) is checked against. Not installed, not a test: it prints numbers.
//
// Method: N independent chains a_i = a_i * m + c in the widest vector the compiler was told the
// CPU has (64 bytes with AVX-512, 32 with AVX, else 16), for several N (the best N covers FMA
// latency x FMA ports); 1 and 2 threads (or argv[3]), each thread spinning until a common start
// so that thread creation is not timed; wall time from the start to the last thread's end; best
// of `reps` runs of about `seconds` each. An FMA counts as 2 flops.
//
//   fma_native [seconds per run = 0.2] [reps = 5] [max threads = 2]
//
// Output, one line per thread count:
//   fma_native: vector_bytes=64 lanes=16 threads=1 best_gflops=123.4 best_chains=12 | 8:... 12:...
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif
typedef float vec __attribute__((vector_size(kVectorBytes)));
constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(float));

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// N chains; this file is compiled with -ffp-contract=fast, so a * m + c is one FMA instruction
// where the target has one (checked with objdump when the numbers were recorded).
template <int N>
float chains(int64_t iters) {
  vec a[N];
#pragma GCC unroll 64
  for (int j = 0; j < N; ++j) a[j] = vec{} + (1.0f + 0.01f * static_cast<float>(j));
  const vec m = vec{} + 0.999999f, c = vec{} + 1e-7f;
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 64
    for (int j = 0; j < N; ++j) a[j] = a[j] * m + c;
  }
  vec s = a[0];
#pragma GCC unroll 64
  for (int j = 1; j < N; ++j) s += a[j];
  float r = 0;
  for (int l = 0; l < kLanes; ++l) r += s[l];
  return r;
}

using chains_fn = float (*)(int64_t);

// Seconds for `threads` threads to run fn(iters) each, from a common start to the last end.
double timed(chains_fn fn, int64_t iters, int threads) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> end(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      volatile float v = fn(iters);
      (void)v;
      end[static_cast<size_t>(t)] = now();
    });
  while (ready.load() < threads) {
  }
  const double t0 = now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return *std::max_element(end.begin(), end.end()) - t0;
}

struct variant {
  int n;
  chains_fn fn;
};

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const int max_threads = argc > 3 ? std::atoi(argv[3]) : 2;
  if (!(seconds > 0) || reps < 1 || max_threads < 1) {
    std::fprintf(stderr,
                 "usage: fma_native [seconds per run > 0] [reps >= 1] [max threads >= 1]\n");
    return 2;
  }
  const variant variants[] = {
      {8, chains<8>}, {10, chains<10>}, {12, chains<12>}, {16, chains<16>}, {24, chains<24>}};
  for (int threads = 1; threads <= max_threads; ++threads) {
    double best = 0;
    int best_n = 0;
    std::printf("fma_native: vector_bytes=%d lanes=%d threads=%d", kVectorBytes, kLanes, threads);
    char detail[512];
    int len = 0;
    for (const auto& v : variants) {
      // Calibrate on one thread to about `seconds` per run.
      int64_t iters = 1 << 14;
      for (;;) {
        const double dt = timed(v.fn, iters, 1);
        if (dt > seconds / 4) {
          iters = static_cast<int64_t>(static_cast<double>(iters) * seconds / dt);
          break;
        }
        iters *= 4;
      }
      double t = 1e30;
      for (int r = 0; r < reps; ++r) t = std::min(t, timed(v.fn, iters, threads));
      const double gflops = 2.0 * v.n * kLanes * static_cast<double>(iters) * threads / t / 1e9;
      len += std::snprintf(detail + len, sizeof(detail) - static_cast<size_t>(len), " %d:%.1f", v.n,
                           gflops);
      if (gflops > best) {
        best = gflops;
        best_n = v.n;
      }
    }
    std::printf(" best_gflops=%.1f best_chains=%d | chains:gflops%s\n", best, best_n, detail);
    std::fflush(stdout);
  }
  return 0;
}
