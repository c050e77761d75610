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
      blocked_(D >= 1 && D % kKeyBlock == 0),
      head_cap_(blocked_ && capacity >= 1 ? (capacity + kKeyBlock - 1) / kKeyBlock * kKeyBlock
                                          : capacity),
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
  checked_bytes("kv_cache", static_cast<unsigned long long>(head_cap_),
                static_cast<unsigned long long>(Hkv), static_cast<unsigned long long>(D),
                storage == kv_storage::f32 ? 2 * sizeof(Real) : 2 * sizeof(uint16_t));
  transform_ = detail::make_key_transform(pos_, D, "kv_cache: ");
  rows_ = transform_ ? transform_->ids_per_token() : 1;
  if (rows_ > 1) ids_.resize(static_cast<size_t>((rows_ - 1) * capacity));
  const auto n = static_cast<size_t>(head_cap_ * Hkv * D);
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
  // pos: (rows_, n) row-major, row 0 the positions of masks and biases.
  std::vector<int64_t> pos;
  if (positions.empty()) {
    if (next_ > (int64_t{1} << 62) - n)
      fail("kv_cache append: positions would exceed 2^62 (next position {})", next_);
    const auto fresh = positions_fresh(n, next_);
    for (int64_t r = 0; r < rows_; ++r) pos.insert(pos.end(), fresh.begin(), fresh.end());
  } else if (rows_ > 1) {
    if (static_cast<int64_t>(positions.size()) != rows_ * n)
      fail(
          "kv_cache append: positions must have shape ({}, n) = ({}, {}) for this cache's q/k "
          "transform ({} ids per token), got {} entries",
          rows_, rows_, n, rows_, positions.size());
    for (int64_t r = 0; r < rows_; ++r)
      validate_positions(positions.subspan(static_cast<size_t>(r * n), static_cast<size_t>(n)), n,
                         "kv_cache append positions (one row)");
    pos.assign(positions.begin(), positions.end());
  } else {
    validate_positions(positions, n, "kv_cache append positions");
    pos.assign(positions.begin(), positions.end());
  }
  const std::span<const int64_t> pos0(pos.data(), static_cast<size_t>(n));
  // Hook 1 for these keys: with several ids per token, a transform at their ids.
  std::unique_ptr<detail::qk_transform> at_ids;
  if (transform_ && rows_ > 1) at_ids = transform_->with_key_ids(pos, n);
  const detail::qk_transform* tr = rows_ > 1 ? at_ids.get() : transform_.get();
  const int64_t row = hkv_ * d_;
  const auto D = static_cast<size_t>(d_);
  // Hook 1 on keys, once, at their absolute positions (ids), on the token-major (n, Hkv, D)
  // input (in Real; half storage rounds the transformed key once). Then every row to its
  // head's run: value t of head hk at row size_ + t of the head's slots, key t there too or
  // scattered into its 8-key block (key_offset), 8 elements at a time.
  const Real* kin = k;
  if (n > 0 && tr) {
    scratch_.assign(k, k + n * row);
    tr->apply(pos0, scratch_.data(), n, hkv_, d_, true, false);
    kin = scratch_.data();
  }
  const int64_t piece = blocked_ ? kKeyBlock : d_;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t hk = 0; hk < hkv_; ++hk) {
      const int64_t src = (t * hkv_ + hk) * d_, j = size_ + t, dst = row_offset(j, hk);
      if (storage_ == kv_storage::f32) {
        for (int64_t e = 0; e < d_; e += piece)
          std::copy_n(kin + src + e, piece, k_.data() + key_offset(j, hk, e));
        std::copy(v + src, v + src + d_, v_.data() + dst);
      } else if constexpr (std::is_same_v<Real, float>) {
        for (int64_t e = 0; e < d_; e += piece)
          to_half(
              storage_, std::span<const float>(kin + src + e, static_cast<size_t>(piece)),
              std::span<uint16_t>(k16_.data() + key_offset(j, hk, e), static_cast<size_t>(piece)));
        to_half(storage_, std::span<const float>(v + src, D),
                std::span<uint16_t>(v16_.data() + dst, D));
      }
    }
  std::copy(pos0.begin(), pos0.end(), kpos_.begin() + size_);
  for (int64_t r = 1; r < rows_; ++r)
    std::copy(pos.begin() + r * n, pos.begin() + (r + 1) * n,
              ids_.begin() + (r - 1) * capacity_ + size_);
  size_ += n;
  for (int64_t p : pos) next_ = std::max(next_, p + 1);
  return pos;
}

template <typename Real>
std::span<const int64_t> kv_cache<Real>::ids(int64_t row) const {
  if (row < 0 || row >= rows_)
    fail("kv_cache ids: row must be in [0, {}) (ids per token), got {}", rows_, row);
  if (row == 0) return positions();
  return {ids_.data() + (row - 1) * capacity_, static_cast<size_t>(size_)};
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
  if (p.kv != kv_storage::f32 || p.k16 || p.v16 || p.kv_head_stride != 0 || p.k_blocked)
    fail(
        "attention_forward_cached: kv, k16, v16, kv_head_stride and k_blocked come from the "
        "cache; leave them unset");
  p.kv = cache.storage();
  p.k = cache.keys();
  p.v = cache.values();
  p.k16 = cache.keys16();
  p.v16 = cache.values16();
  p.kv_head_stride = cache.head_stride();
  p.k_blocked = cache.keys_blocked();
  p.S = cache.size();
  p.Hkv = cache.kv_heads();
  p.k_positions = cache.positions();
  // A transform with several ids per token: the ids of the last T tokens, (rows, T).
  std::vector<int64_t> q_ids;
  for (int64_t r = 0; cache.ids_per_token() > 1 && p.T >= 0 && r < cache.ids_per_token(); ++r) {
    const auto row = cache.ids(r);
    q_ids.insert(q_ids.end(), row.end() - p.T, row.end());
  }
  p.pos = detail::position_for_cached_keys(p.pos, cache.position(), q_ids);
  attention_forward(p);
}

template class kv_cache<float>;
template class kv_cache<double>;
template void attention_forward_cached(attention_params<float>, const kv_cache<float>&);
template void attention_forward_cached(attention_params<double>, const kv_cache<double>&);

}  // namespace posenc
