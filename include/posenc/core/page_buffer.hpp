// posenc/core/page_buffer.hpp: memory for large arrays that a kernel streams through with a
// large stride, such as a KV cache (each head's rows lie Hkv * D elements apart, a new 4 KiB
// page per row for Hkv * D * 4 >= 4096 bytes). With 4 KiB pages every row then costs a TLB miss
// and a page walk; a page_buffer is aligned to 2 MiB and advised to use transparent huge pages
// (Linux madvise(MADV_HUGEPAGE), before the first touch), so that one TLB entry covers 2 MiB.
// The advice is a hint: where the kernel or the build does not support it, the buffer is plain
// aligned memory; below 2 MiB it is cache-line aligned only. Zero-filled on construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace posenc {

namespace detail {
// 2 MiB-aligned, zeroed bytes, advised for huge pages; freed with page_free.
void* page_alloc(size_t bytes);
void page_free(void* p);
}  // namespace detail

template <typename T>
class page_buffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  page_buffer() = default;
  explicit page_buffer(size_t n)
      : n_(n), p_(static_cast<T*>(n ? detail::page_alloc(n * sizeof(T)) : nullptr)) {}
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  T& operator[](size_t i) { return p_.get()[i]; }
  const T& operator[](size_t i) const { return p_.get()[i]; }

 private:
  struct deleter {
    void operator()(T* p) const { detail::page_free(p); }
  };
  size_t n_ = 0;
  std::unique_ptr<T, deleter> p_;
};

}  // namespace posenc
