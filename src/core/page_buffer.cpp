#include "posenc/core/page_buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace posenc::detail {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

void* page_alloc(size_t bytes) {
  // Below one huge page the advice cannot apply: cache-line aligned, no rounding to 2 MiB.
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t n = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, n);
  if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHugePage) madvise(p, n, MADV_HUGEPAGE);  // a hint: ignored without THP
#endif
  std::memset(p, 0, n);  // the first touch, after the advice
  return p;
}

void page_free(void* p) {
  std::free(p);
}

}  // namespace posenc::detail
