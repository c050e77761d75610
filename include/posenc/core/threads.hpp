// posenc/core/threads.hpp: thread ranges.
//
// A kernel is written for one thread's share: it gets (ith, nth) and asks thread_range for the
// half-open [begin, end) of n items it owns. parallel_for runs it on OpenMP threads.
#pragma once

#include <cstdint>
#include <utility>

namespace posenc {

// Items [begin, end) of n owned by thread ith of nth; balanced to within one item.
inline std::pair<int64_t, int64_t> thread_range(int64_t n, int ith, int nth) {
  const int64_t base = n / nth, extra = n % nth;
  const int64_t begin = ith * base + (ith < extra ? ith : extra);
  return {begin, begin + base + (ith < extra ? 1 : 0)};
}

namespace detail {
int omp_thread_num();
}

// Number of threads parallel_for uses: 1 inside an OpenMP parallel region (nested calls run
// serially), else the calling thread's set_num_threads value, else POSENC_THREADS if set, else
// OpenMP's default. set_num_threads applies to the calling thread only (0 = back to default).
int num_threads();
void set_num_threads(int n);

// Runs fn(begin, end) over thread_range shares of [0, n). With n < min_per_thread * 2 it runs
// on the calling thread only.
template <typename F>
void parallel_for(int64_t n, F&& fn, int64_t min_per_thread = 1) {
  int nth = num_threads();
  if (nth > 1 && n >= 2 * min_per_thread) {
    if (n / min_per_thread < nth) nth = static_cast<int>(n / min_per_thread);
#pragma omp parallel num_threads(nth)
    {
      auto [b, e] = thread_range(n, detail::omp_thread_num(), nth);
      if (b < e) fn(b, e);
    }
  } else if (n > 0) {
    fn(int64_t{0}, n);
  }
}

}  // namespace posenc
