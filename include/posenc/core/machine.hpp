// posenc/core/machine.hpp: probes of this machine's own limits, measured in-process so that a
// benchmark can report its result as a fraction of what the hardware did in the same run.
//
// Bandwidth (STREAM, McCalpin 1995): copy a[i] = b[i] moves 2 x 8 bytes per element, triad
// a[i] = b[i] + s * c[i] moves 3 x 8; both counted as bytes read plus bytes written (no
// write-allocate traffic counted, as STREAM does); read sums a fourth array, in 2 MiB pages
// (page_buffer.hpp), 8 bytes read per element: the limit of a kernel that only reads (a decode step
// reads K and V and writes a few rows; STREAM's copy, which also writes and, with write-allocate,
// reads its destination, reads low for it: docs/decisions.md, "A read probe for the kernels that
// only read"). Arrays of `bytes_per_array` each, far larger than the last-level cache for a DRAM
// figure, or of a given footprint for a cache-level figure.
//
// FMA peak: independent fused multiply-add chains in the widest vector unit Highway finds at
// run time (dynamic dispatch), enough chains to cover FMA latency x FMA ports, float32. Checked
// against a -march=native probe (bench/fma_native.cpp) in docs/decisions.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace posenc {

struct bandwidth_result {
  double copy_gbps = 0;  // best of the repetitions, GB/s = 1e9 bytes per second
  double triad_gbps = 0;
  double read_gbps = 0;  // bytes read per second, summing one array
  size_t bytes_per_array = 0;
  int threads = 0;
};

// Runs `reps` repetitions of copy, triad and read over three arrays of `bytes_per_array` bytes each
// using `threads` threads (first-touch initialised by the same threads), returns the best rate.
bandwidth_result measure_bandwidth(size_t bytes_per_array, int threads, int reps = 5);

struct fma_peak_result {
  double gflops = 0;         // best of the repetitions, GFLOP/s (an FMA counts as 2)
  double gflops_median = 0;  // median of the repetitions (the spread shows a busy host)
  int threads = 0;           // threads that ran the loop
  std::string target;        // Highway target the loop ran on ("AVX3", "AVX2", ...)
  int lanes = 0;             // float32 lanes per vector in that target
  int chains = 0;            // independent accumulator vectors per thread
  int reps = 0;
};

// Float32 FMA rate of `threads` threads, each running `fma_probe_chains()` independent chains
// a <- a * m + c in vectors of `simd_float_lanes()` lanes; `reps` runs of about `seconds` each,
// timed from a barrier after the threads have started to a barrier after the last one ends.
fma_peak_result measure_fma_peak(int threads, double seconds = 0.1, int reps = 7);
// The bfloat16 dot-product rate (vdpbf16ps: 2 products and 2 additions per float32 lane) of
// `threads` threads, timed as measure_fma_peak; target "none" and gflops 0 on a CPU without
// AVX512_BF16.
fma_peak_result measure_bf16_dot_peak(int threads, double seconds = 0.1, int reps = 7);
// measure_fma_peak(...).gflops.
double measure_fma_peak_gflops(int threads, double seconds = 0.1, int reps = 7);

// Name of the SIMD target Highway's dynamic dispatch selects on this CPU ("AVX2", "AVX3", ...).
std::string simd_target_name();
// Restricts Highway's dynamic dispatch to `name` (lower case, as simd_target_name() spells it:
// "avx3", "avx2", "sse4", ...) or "best" (every target again), for every kernel and probe of the
// process from the next call on: how an AVX-512 host measures the AVX2 kernels. The CLI reads it
// from the environment variable POSENC_SIMD_TARGET. Throws invalid_argument naming the targets
// this CPU and build have when `name` is not one of them.
void limit_simd_target(const std::string& name);
// Lanes of float32 in that target's widest vector.
int simd_float_lanes();
// The FMA-peak loop, once, on the calling thread: fma_probe_chains() vectors of
// simd_float_lanes() float32 lanes, chain j starting at 1 + 0.1 j, each updated `iters` times
// as a <- a * 0.999999 + 1e-7 (one FMA), so every lane tends to 1e-7 / (1 - 0.999999) = 0.1
// (float rounding stops it within 4% of that). Returns the sum of every lane of every chain.
float fma_chains(int64_t iters);
// Independent accumulator vectors per thread of the FMA-peak loop on that target: at least
// FMA latency (4-5 cycles) x FMA ports (2), and few enough to stay in registers.
int fma_probe_chains();

}  // namespace posenc
