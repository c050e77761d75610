// tools/posenc/bench/gemm_probe.hpp: the GEMM limit of an attention case (`posenc bench`).
//
// The FMA peak is what no kernel can pass; a tuned GEMM on the same shapes is what the best
// library reaches on the products attention is made of, with its packing, its cache blocking
// and its loads. The probe times a tuned single-precision GEMM, found at run time (dlopen; no
// build dependency), on each attention case's per-head products:
//   forward   Sc = Q K^T (T x S, inner D), O = Sc V (T x D, inner S)       2 x 2 T S D FLOPs
//   backward  Sc = Q K^T, dP = dO V^T (T x S, inner D), dV = P^T dO,
//             dK = dS^T Q (S x D, inner T), dQ = dS K (T x D, inner S)     5 x 2 T S D FLOPs
// over the full T x S rectangle (a GEMM has no causal mask), in two threadings: the library's
// own threads inside each product (heads one after another), and heads split over the threads
// with one single-threaded product each (how posenc splits its work). The faster one is the
// case's GEMM rate; an attention case's fraction of it is its causal GFLOP/s (as counted for the
// FMA peak) over that rate.
//
// Libraries tried, in order: oneDNN (libdnnl.so.3, .so.2: dnnl_sgemm, row-major; Debian
// libdnnl2) and OpenBLAS (libopenblas.so.0: cblas_sgemm; Debian libopenblas0-pthread). Each
// one present is measured; the best reading is the rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace posenc::cli {

// One attention case's products. T == 0: the case has none.
struct gemm_shape {
  int64_t T = 0, S = 0, D = 0;
  bool backward = false;
  bool operator<(const gemm_shape& o) const {
    if (T != o.T) return T < o.T;
    if (S != o.S) return S < o.S;
    if (D != o.D) return D < o.D;
    return backward < o.backward;
  }
};

// A GEMM library the probe can load: name, version and file, or why not.
struct gemm_library_info {
  std::string name, version, file;
  std::string unavailable;  // non-empty: not loaded, and why
};

// What the probe found on this machine (loaded once per process).
std::vector<gemm_library_info> gemm_libraries();

struct gemm_reading {
  std::string library;    // "oneDNN", "OpenBLAS"
  std::string threading;  // "library" (threads inside each product) or "heads"
  double gflops = 0;      // best repetition
  double seconds = 0;     // its time for `heads` heads
};

struct gemm_result {
  gemm_shape shape;
  int threads = 0, heads = 0;
  double gflops = 0;  // the best reading (0: no library)
  std::string library, threading;
  std::vector<gemm_reading> readings;
  std::vector<std::string> failures;  // a library that returned an error status: not timed
};

// Times every library present in both threadings on `shape` (`heads` heads of it, at least
// one per thread), each repeated until min_seconds have passed and at least reps times.
gemm_result measure_gemm(const gemm_shape& shape, int threads, double min_seconds, int reps);

}  // namespace posenc::cli
