#include "posenc/core/error.hpp"

#include <limits>

namespace posenc {

unsigned long long checked_bytes(const char* what, unsigned long long a, unsigned long long b,
                                 unsigned long long c, unsigned long long elem_bytes) {
  unsigned long long n = 1;
  for (unsigned long long f : {a, b, c, elem_bytes}) {
    if (f != 0 && n > std::numeric_limits<unsigned long long>::max() / f) {
      fail("{} is too large: {} x {} x {} elements of {} bytes overflows 64 bits", what, a, b, c,
           elem_bytes);
    }
    n *= f;
  }
  if (n > max_alloc_bytes) {
    fail("{} would need {} bytes ({} x {} x {} x {} bytes); the cap is {} bytes (8 GiB)", what, n,
         a, b, c, elem_bytes, max_alloc_bytes);
  }
  return n;
}

}  // namespace posenc
