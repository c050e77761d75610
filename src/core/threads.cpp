#include "posenc/core/threads.hpp"

#include <omp.h>

#include <cstdlib>

namespace posenc {
namespace {
int g_threads = 0;
}

int num_threads() {
  if (g_threads > 0) return g_threads;
  if (const char* e = std::getenv("POSENC_THREADS")) {
    int n = std::atoi(e);
    if (n > 0) return n;
  }
  return omp_get_max_threads();
}

void set_num_threads(int n) {
  g_threads = n > 0 ? n : 0;
}

int detail::omp_thread_num() {
  return omp_get_thread_num();
}

}  // namespace posenc
