#include "posenc/core/threads.hpp"

#include <omp.h>

#include <cstdlib>

namespace posenc {
namespace {
// Per calling thread, so concurrent lab runs can each choose their own count.
thread_local int g_threads = 0;
}  // namespace

int num_threads() {
  // Inside a parallel region (a lab shard, say) every nested parallel_for runs serially: an
  // inner team would get one thread anyway, and its shares must then cover all items.
  if (omp_in_parallel()) return 1;
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
