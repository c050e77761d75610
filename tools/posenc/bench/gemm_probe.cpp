// The GEMM probe (gemm_probe.hpp): tuned SGEMM libraries loaded at run time, timed on the
// per-head products of an attention case.
#include "gemm_probe.hpp"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "bench.hpp"

namespace posenc::cli {
namespace {

// C = op(A) op(B), row-major, alpha 1, beta 0; op transposes when the flag is set. gemm returns
// the library's status (0: done).
struct sgemm_api {
  std::string name;
  // Threads inside one product; 1 for the "heads" threading (called from several threads).
  void (*set_threads)(const sgemm_api&, int) = nullptr;
  int (*gemm)(const sgemm_api&, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) = nullptr;
  void* fn = nullptr;          // the library's GEMM entry point
  void* threads_fn = nullptr;  // OpenBLAS: openblas_set_num_threads
};

// oneDNN: dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, N, K, float alpha,
// const float* A, dnnl_dim_t lda, const float* B, dnnl_dim_t ldb, float beta, float* C,
// dnnl_dim_t ldc), row-major, dnnl_dim_t = int64_t. Threads: OpenMP (Debian's build), so the
// calling thread's omp_set_num_threads, and one thread inside a parallel region.
using dnnl_sgemm_fn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                              const float*, int64_t, float, float*, int64_t);
struct dnnl_version_t {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};

// OpenBLAS: cblas_sgemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
// with CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112 and 32-bit integers.
using cblas_sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int,
                                const float*, int, float, float*, int);

struct loaded {
  std::vector<gemm_library_info> info;
  std::vector<sgemm_api> apis;
};

void* open_first(const std::vector<const char*>& names, std::string& file, std::string& why) {
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) {
      file = n;
      return h;
    }
  }
  why = "not found (";
  for (size_t i = 0; i < names.size(); ++i) why += (i ? ", " : "") + std::string(names[i]);
  why += ")";
  return nullptr;
}

loaded load_libraries() {
  loaded l;
  {
    gemm_library_info info{"oneDNN", "", "", ""};
    if (void* h = open_first({"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"}, info.file,
                             info.unavailable)) {
      void* fn = dlsym(h, "dnnl_sgemm");
      auto ver = reinterpret_cast<const dnnl_version_t* (*)()>(dlsym(h, "dnnl_version"));
      if (!fn) {
        info.unavailable = info.file + " has no dnnl_sgemm";
      } else {
        if (ver)
          if (const dnnl_version_t* v = ver())
            info.version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                           std::to_string(v->patch);
        sgemm_api a;
        a.name = "oneDNN";
        a.fn = fn;
        a.set_threads = [](const sgemm_api&, int n) { omp_set_num_threads(n); };
        a.gemm = [](const sgemm_api& api, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                    int64_t ldc) {
          return reinterpret_cast<dnnl_sgemm_fn>(api.fn)(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K,
                                                         1.0f, A, lda, B, ldb, 0.0f, C, ldc);
        };
        l.apis.push_back(a);
      }
    }
    l.info.push_back(info);
  }
  {
    gemm_library_info info{"OpenBLAS", "", "", ""};
    if (void* h = open_first({"libopenblas.so.0", "libopenblas.so"}, info.file, info.unavailable)) {
      void* fn = dlsym(h, "cblas_sgemm");
      void* th = dlsym(h, "openblas_set_num_threads");
      auto cfg = reinterpret_cast<const char* (*)()>(dlsym(h, "openblas_get_config"));
      if (!fn || !th) {
        info.unavailable = info.file + " has no cblas_sgemm or openblas_set_num_threads";
      } else {
        if (cfg)
          if (const char* c = cfg()) info.version = c;
        sgemm_api a;
        a.name = "OpenBLAS";
        a.fn = fn;
        a.threads_fn = th;
        a.set_threads = [](const sgemm_api& api, int n) {
          reinterpret_cast<void (*)(int)>(api.threads_fn)(n);
        };
        a.gemm = [](const sgemm_api& api, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                    int64_t ldc) {
          auto i = [](int64_t v) { return static_cast<int>(v); };
          reinterpret_cast<cblas_sgemm_fn>(api.fn)(101, ta ? 112 : 111, tb ? 112 : 111, i(M), i(N),
                                                   i(K), 1.0f, A, i(lda), B, i(ldb), 0.0f, C,
                                                   i(ldc));
          return 0;  // cblas_sgemm reports nothing
        };
        l.apis.push_back(a);
      }
    }
    l.info.push_back(info);
  }
  return l;
}

const loaded& libraries() {
  static const loaded l = load_libraries();
  return l;
}

// One head's operands: Q, dO, O or dQ (T x D); K, V, dK, dV (S x D); Sc/P and dP/dS (T x S).
struct head_buffers {
  std::vector<float> q, k, v, o, dq, dk, dv, sc, dp;
  head_buffers(const gemm_shape& s, uint64_t seed) {
    const auto td = static_cast<size_t>(s.T * s.D), sd = static_cast<size_t>(s.S * s.D),
               ts = static_cast<size_t>(s.T * s.S);
    q.resize(td), o.resize(td), k.resize(sd), v.resize(sd), sc.resize(ts);
    bench_fill(q, seed), bench_fill(k, seed + 1), bench_fill(v, seed + 2);
    bench_fill(o, seed + 3);  // dO in the backward
    if (s.backward) {
      dq.resize(td), dk.resize(sd), dv.resize(sd), dp.resize(ts);
      bench_fill(dp, seed + 4);
    }
  }
};

// The products of one head (gemm_probe.hpp), Sc overwritten in place as P and dP as dS; the
// first non-zero library status, else 0.
int run_head(const sgemm_api& a, const gemm_shape& s, head_buffers& b) {
  const int64_t T = s.T, S = s.S, D = s.D;
  int st = a.gemm(a, false, true, T, S, D, b.q.data(), D, b.k.data(), D, b.sc.data(), S);  // Q K^T
  if (!s.backward)
    return st ? st : a.gemm(a, false, false, T, D, S, b.sc.data(), S, b.v.data(), D, b.o.data(), D);
  struct product {
    bool ta, tb;
    int64_t M, N, K;
    const float *A, *B;
    int64_t lda, ldb;
    float* C;
    int64_t ldc;
  };
  const product ps[] = {
      {false, true, T, S, D, b.o.data(), b.v.data(), D, D, b.dp.data(), S},     // dO V^T
      {true, false, S, D, T, b.sc.data(), b.o.data(), S, D, b.dv.data(), D},    // P^T dO
      {true, false, S, D, T, b.dp.data(), b.q.data(), S, D, b.dk.data(), D},    // dS^T Q
      {false, false, T, D, S, b.dp.data(), b.k.data(), S, D, b.dq.data(), D}};  // dS K
  for (const product& p : ps)
    if (!st) st = a.gemm(a, p.ta, p.tb, p.M, p.N, p.K, p.A, p.lda, p.B, p.ldb, p.C, p.ldc);
  return st;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<gemm_library_info> gemm_libraries() {
  return libraries().info;
}

gemm_result measure_gemm(const gemm_shape& shape, int threads, double min_seconds, int reps) {
  gemm_result r;
  r.shape = shape;
  r.threads = threads;
  r.heads = std::max(2, 2 * threads);
  if (libraries().apis.empty()) return r;
  std::vector<std::unique_ptr<head_buffers>> heads;
  for (int h = 0; h < r.heads; ++h)
    heads.push_back(std::make_unique<head_buffers>(shape, 1000 + 16 * static_cast<uint64_t>(h)));
  const double flops = (shape.backward ? 5.0 : 2.0) * 2.0 * double(shape.T) * double(shape.S) *
                       double(shape.D) * r.heads;
  const int saved_threads = omp_get_max_threads();
  for (const auto& api : libraries().apis) {
    for (const char* threading : {"library", "heads"}) {
      const bool by_heads = std::string(threading) == "heads";
      api.set_threads(api, by_heads ? 1 : threads);
      // The first non-zero status of any product (a library that refuses a shape is not timed).
      auto once = [&] {
        int st = 0;
        if (by_heads) {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : st)
          for (int h = 0; h < r.heads; ++h)
            st |= run_head(api, shape, *heads[static_cast<size_t>(h)]);
        } else {
          for (auto& h : heads) st = st ? st : run_head(api, shape, *h);
        }
        return st;
      };
      // Warm-up (the library's packing buffers and thread pool), and the status check.
      if (const int st = once()) {
        r.failures.push_back(api.name + " (" + threading + " threading): status " +
                             std::to_string(st));
        continue;
      }
      double best = 1e300;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < reps || seconds_since(start) < min_seconds; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        once();
        best = std::min(best, seconds_since(t0));
      }
      gemm_reading g{api.name, threading, flops / best * 1e-9, best};
      r.readings.push_back(g);
      if (g.gflops > r.gflops) r.gflops = g.gflops, r.library = g.library, r.threading = threading;
    }
    api.set_threads(api, threads);
  }
  omp_set_num_threads(saved_threads);
  return r;
}

}  // namespace posenc::cli
