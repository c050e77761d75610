#include "posenc/attention/kv_cache.hpp"

#include <algorithm>
#include <type_traits>

#include "hooks.hpp"
#include "posenc/core/error.hpp"
#include "posenc/positions/positions.hpp"

namespace posenc {

template <typename Real>
kv_cache<Real>::kv_cache(int64_t capacity, int64_t Hkv, int64_t D, attention_position<Real> pos,
                         int64_t start_position, kv_storage storage)
    : capacity_(capacity),
      hkv_(Hkv),
      d_(D),
      start_(start_position),
      next_(start_position),
      pos_(pos),
      storage_(storage) {
  if (storage != kv_storage::f32 && !std::is_same_v<Real, float>)
    fail("kv_cache: storage {} (half precision) needs a float32 cache; this one is float64",
         name(storage));
  if (capacity < 1) fail("kv_cache: capacity must be >= 1, got {}", capacity);
  if (Hkv < 1) fail("kv_cache: Hkv must be >= 1, got {}", Hkv);
  if (D < 1) fail("kv_cache: D must be >= 1, got {}", D);
  if (start_position < 0 || start_position > (int64_t{1} << 62) - capacity)
    fail("kv_cache: start_position must be in [0, 2^62 - capacity], got {}", start_position);
  checked_bytes("kv_cache", static_cast<unsigned long long>(capacity),
                static_cast<unsigned long long>(Hkv), static_cast<unsigned long long>(D),
                storage == kv_storage::f32 ? 2 * sizeof(Real) : 2 * sizeof(uint16_t));
  transform_ = detail::make_key_transform(pos_, D, "kv_cache: ");
  const auto n = static_cast<size_t>(capacity * Hkv * D);
  if (storage == kv_storage::f32) {
    k_ = page_buffer<Real>(n);
    v_ = page_buffer<Real>(n);
  } else {
    k16_ = page_buffer<uint16_t>(n);
    v16_ = page_buffer<uint16_t>(n);
  }
  kpos_.resize(capacity);
}

template <typename Real>
std::vector<int64_t> kv_cache<Real>::append(const Real* k, const Real* v, int64_t n,
                                            std::span<const int64_t> positions) {
  if (n < 0) fail("kv_cache append: n must be >= 0, got {}", n);
  if (n > capacity_ - size_)
    fail(
        "kv_cache append: {} new tokens do not fit: the cache holds {} of its capacity {} "
        "({} free)",
        n, size_, capacity_, capacity_ - size_);
  if (n > 0 && (!k || !v)) fail("kv_cache append: k and v must not be null when n = {}", n);
  std::vector<int64_t> pos;
  if (positions.empty()) {
    if (next_ > (int64_t{1} << 62) - n)
      fail("kv_cache append: positions would exceed 2^62 (next position {})", next_);
    pos = positions_fresh(n, next_);
  } else {
    validate_positions(positions, n, "kv_cache append positions");
    pos.assign(positions.begin(), positions.end());
  }
  const int64_t row = hkv_ * d_;
  const auto D = static_cast<size_t>(d_);
  // Hook 1 on keys, once, at their absolute positions, on the token-major (n, Hkv, D) input
  // (in Real; half storage rounds the transformed key once). Then every row to its head's run:
  // token t of head hk at row size_ + t of the head-major (Hkv, capacity, D) storage.
  const Real* kin = k;
  if (n > 0 && transform_) {
    scratch_.assign(k, k + n * row);
    transform_->apply(pos, scratch_.data(), n, hkv_, d_, true, false);
    kin = scratch_.data();
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t hk = 0; hk < hkv_; ++hk) {
      const int64_t src = (t * hkv_ + hk) * d_, dst = (hk * capacity_ + size_ + t) * d_;
      if (storage_ == kv_storage::f32) {
        std::copy(kin + src, kin + src + d_, k_.data() + dst);
        std::copy(v + src, v + src + d_, v_.data() + dst);
      } else if constexpr (std::is_same_v<Real, float>) {
        to_half(storage_, std::span<const float>(kin + src, D),
                std::span<uint16_t>(k16_.data() + dst, D));
        to_half(storage_, std::span<const float>(v + src, D),
                std::span<uint16_t>(v16_.data() + dst, D));
      }
    }
  std::copy(pos.begin(), pos.end(), kpos_.begin() + size_);
  size_ += n;
  for (int64_t p : pos) next_ = std::max(next_, p + 1);
  return pos;
}

template <typename Real>
void kv_cache<Real>::clear() {
  size_ = 0;
  next_ = start_;
}

template <typename Real>
void attention_forward_cached(attention_params<Real> p, const kv_cache<Real>& cache) {
  if (p.k || p.v || p.S != 0 || !p.k_positions.empty())
    fail("attention_forward_cached: k, v, S and k_positions come from the cache; leave them unset");
  if (!p.key_padding.empty() || !p.cu_seqlens.empty() || !p.q_doc_ids.empty() ||
      !p.k_doc_ids.empty())
    fail("attention_forward_cached: key_padding and documents are not supported with a cache");
  if (p.D != cache.head_dim())
    fail("attention_forward_cached: D must equal the cache's head dim {}, got {}", cache.head_dim(),
         p.D);
  if (p.T > cache.size())
    fail("attention_forward_cached: T = {} queries but the cache holds only {} tokens", p.T,
         cache.size());
  if (p.kv != kv_storage::f32 || p.k16 || p.v16 || p.kv_head_stride != 0)
    fail(
        "attention_forward_cached: kv, k16, v16 and kv_head_stride come from the cache; leave "
        "them unset");
  p.kv = cache.storage();
  p.k = cache.keys();
  p.v = cache.values();
  p.k16 = cache.keys16();
  p.v16 = cache.values16();
  p.kv_head_stride = cache.capacity() * cache.head_dim();
  p.S = cache.size();
  p.Hkv = cache.kv_heads();
  p.k_positions = cache.positions();
  p.pos = detail::position_for_cached_keys(p.pos, cache.position());
  attention_forward(p);
}

template class kv_cache<float>;
template class kv_cache<double>;
template void attention_forward_cached(attention_params<float>, const kv_cache<float>&);
template void attention_forward_cached(attention_params<double>, const kv_cache<double>&);

}  // namespace posenc
