// posenc/core/machine.hpp: probes of this machine's own limits, measured in-process so that a
// benchmark can report its result as a fraction of what the hardware did in the same run.
//
// Bandwidth (STREAM, McCalpin 1995): copy a[i] = b[i] moves 2 x 8 bytes per element, triad
// a[i] = b[i] + s * c[i] moves 3 x 8; both counted as bytes read plus bytes written (no
// write-allocate traffic counted, as STREAM does). Arrays of `bytes_per_array` each, far larger
// than the last-level cache for a DRAM figure, or of a given footprint for a cache-level figure.
//
// FMA peak: independent fused multiply-add chains in the widest vector unit Highway finds at
// run time (dynamic dispatch), enough chains to cover FMA latency x FMA ports, float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace posenc {

struct bandwidth_result {
  double copy_gbps = 0;  // best of the repetitions, GB/s = 1e9 bytes per second
  double triad_gbps = 0;
  size_t bytes_per_array = 0;
  int threads = 0;
};

// Runs `reps` repetitions of copy and triad over three arrays of `bytes_per_array` bytes each
// using `threads` threads (first-touch initialised by the same threads), returns the best rate.
bandwidth_result measure_bandwidth(size_t bytes_per_array, int threads, int reps = 5);

// Best float32 FMA rate over `reps` runs of about `seconds` each, GFLOP/s (an FMA counts as 2).
double measure_fma_peak_gflops(int threads, double seconds = 0.2, int reps = 3);

// Name of the SIMD target Highway's dynamic dispatch selects on this CPU ("AVX2", "AVX3", ...).
std::string simd_target_name();
// Lanes of float32 in that target's widest vector.
int simd_float_lanes();

}  // namespace posenc
