// tools/posenc/bench/bench.hpp: how a kernel family adds its cases to `posenc bench`.
//
// A case file (tools/posenc/bench/bench_<family>.cpp) registers factories at static initialisation:
//
//   static const bool registered = posenc::cli::register_bench_case(
//       {10, "rope_apply_half_T4096", [](const posenc::cli::bench_options& o) { ... }});
//
// The factory allocates and fills the inputs, and returns a bench_case whose `validate` compares
// the fast path against the reference (run once before timing; a non-empty string is a
// failure and the case is reported as invalid, never timed) and whose `run` is the timed body.
// Benchmarks are not tests: nothing here asserts a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gemm_probe.hpp"

namespace posenc::cli {

struct bench_options {
  int threads = 2;
  bool quick = false;  // small shapes: used by the end-to-end tests and `--quick`
};

struct bench_case {
  std::string name;
  double bytes = 0;            // bytes read + written by one run (memory-bound cases)
  double flops = 0;            // floating-point operations of one run (compute-bound cases)
  double footprint_bytes = 0;  // working set; bandwidth is compared with a probe of this size
                               // (0 = the DRAM probe)
  // Which limit the fraction is of: "bandwidth", "peak", or "roofline": whichever of the two
  // binds (the larger fraction; a case with both bytes and flops, e.g. a decode step, whose
  // arithmetic intensity depends on the shape). The result records the binding one.
  std::string limit = "bandwidth";
  // The bytes are all reads (a decode step reads K and V; its writes are a few rows): the
  // bandwidth limit is the read probe's, not STREAM copy's, which also writes.
  bool reads_only = false;
  std::function<std::string()> validate;
  std::function<void()> run;
  std::string note;  // shape, layout, what is counted
  // Run exactly once, without a warm-up (a case whose one run is long and measures something a
  // second run would not, like a high-water mark); `after` (if set) is appended to the note
  // after that run.
  bool once = false;
  std::function<std::string()> after;
  // The per-head GEMM products of an attention case (prefill, backward), whose tuned-GEMM rate
  // the case is also reported against (gemm_probe.hpp); T == 0: none.
  gemm_shape gemm;
};

struct bench_spec {
  int order;
  std::string name;
  std::function<bench_case(const bench_options&)> make;
  // Extended cases (long sequences, large caches: tens of seconds each) run only with
  // `posenc bench --extended` or a --filter that names them, so that the default run stays short.
  bool extended = false;
};

bool register_bench_case(bench_spec spec);

// Fills v with deterministic values in [-1, 1) from (seed, index) (splitmix64), on the kernels'
// threads so that first touch places the pages where the kernel will use them.
void bench_fill(std::vector<float>& v, uint64_t seed);
const std::vector<bench_spec>& bench_specs();  // sorted by order

}  // namespace posenc::cli
