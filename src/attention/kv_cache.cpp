#include "posenc/attention/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/positions/positions.hpp"

namespace posenc {

const char* kv_shift_mode_name(kv_shift_mode m) {
  return m == kv_shift_mode::exact ? "exact" : "rerotate";
}

kv_shift_mode kv_shift_mode_from_name(const std::string& name, const std::string& arg) {
  if (name == "rerotate") return kv_shift_mode::rerotate;
  if (name == "exact") return kv_shift_mode::exact;
  fail("{} must be rerotate or exact, got '{}'", arg, name);
}

namespace {

// rerotate turns stored keys by RoPE's rotation of the change, which a q/k transform that is no
// rotation by the position (xPos: a scale as well) does not have: such a cache moves keys only
// in exact mode. The transform's title when refused, else null.
template <typename Real>
const char* rerotate_refused(const attention_position<Real>& pos, kv_shift_mode mode) {
  if (mode != kv_shift_mode::rerotate) return nullptr;
  for (const auto& n : pos.named) {
    const scheme_decl& d = scheme_decl_of(n.name);
    if (d.transform && !d.transform->rotation) return d.title;
  }
  return nullptr;
}

}  // namespace

template <typename Real>
kv_cache<Real>::kv_cache(int64_t capacity, int64_t Hkv, int64_t D, attention_position<Real> pos,
                         int64_t start_position, kv_storage storage, kv_shift_mode shift_mode)
    : capacity_(capacity),
      hkv_(Hkv),
      d_(D),
      start_(start_position),
      next_(start_position),
      blocked_(D >= 1 && D % kKeyBlock == 0),
      head_cap_(blocked_ && capacity >= 1 ? (capacity + kKeyBlock - 1) / kKeyBlock * kKeyBlock
                                          : capacity),
      pos_(pos),
      storage_(storage),
      mode_(shift_mode) {
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
  const detail::rope_parts rope = detail::rope_of(pos_.named);
  if (rope.freqs && mode_ == kv_shift_mode::rerotate) {
    unit_freqs_ = std::make_unique<rope_freqs>(*rope.freqs);
    unit_freqs_->attention_factor = 1;
    if (unit_freqs_->hf) unit_freqs_->hf->attention_factor = 1.0f;
    if (unit_freqs_->ggml) {
      // ggml's rope_yarn multiplies attn_factor by 1 + 0.1 ln(1 / freq_scale) when ext_factor
      // is on: divided out here, so that the turn is the rotation alone. llama.cpp's K-shift
      // (6dafc14e) does not: it passes the forward's attn_factor, and every K-shift multiplies
      // all cached keys by the YaRN magnitude once more (tests/test_kv_shift_llama_cpp.cpp).
      auto& g = *unit_freqs_->ggml;
      g.attn_factor =
          g.ext_factor != 0.0f ? 1.0f / std::fma(0.1f, std::log(1.0f / g.freq_scale), 1.0f) : 1.0f;
    }
    attention_position<Real> unit = pos_;  // the same RoPE at unit magnitude
    for (named_scheme& n : unit.named)
      if (n.freqs == rope.freqs) n.freqs = unit_freqs_.get();
    turn_ = detail::make_key_transform(unit, D, "kv_cache: ");
  }
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
  if (mode_ == kv_shift_mode::exact && transform_) {
    checked_bytes("kv_cache (exact shift mode's keys as appended)",
                  static_cast<unsigned long long>(capacity), static_cast<unsigned long long>(Hkv),
                  static_cast<unsigned long long>(D), sizeof(Real));
    raw_.resize(n);
  }
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
  if (n > 0 && !raw_.empty()) std::copy(k, k + n * row, raw_.begin() + size_ * row);
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
void kv_cache<Real>::load_key(int64_t j, int64_t hk, Real* row) const {
  if (storage_ == kv_storage::f32) {
    for (int64_t e = 0; e < d_; ++e) row[e] = k_.data()[key_offset(j, hk, e)];
  } else if constexpr (std::is_same_v<Real, float>) {
    for (int64_t e = 0; e < d_; ++e)
      row[e] = half_to_float(storage_, k16_.data()[key_offset(j, hk, e)]);
  }
}

template <typename Real>
void kv_cache<Real>::store_key(int64_t j, int64_t hk, const Real* row) {
  if (storage_ == kv_storage::f32) {
    for (int64_t e = 0; e < d_; ++e) k_.data()[key_offset(j, hk, e)] = row[e];
  } else if constexpr (std::is_same_v<Real, float>) {
    for (int64_t e = 0; e < d_; ++e)
      k16_.data()[key_offset(j, hk, e)] = float_to_half(storage_, row[e]);
  }
}

template <typename Real>
void kv_cache<Real>::update_next() {
  next_ = start_;
  if (size_ > 0) next_ = 0;
  for (int64_t j = 0; j < size_; ++j)
    for (int64_t r = 0; r < rows_; ++r)
      next_ = std::max(next_, (r == 0 ? kpos_[j] : ids_[(r - 1) * capacity_ + j]) + 1);
}

template <typename Real>
void kv_cache<Real>::check_range(const char* what, int64_t p0, int64_t p1) const {
  if (p0 < 0 || p1 < p0 || p1 > to_end)
    fail(
        "kv_cache {}: the range [p0, p1) must have 0 <= p0 <= p1 <= 2^62 + 1 (to_end), got [{}, "
        "{})",
        what, p0, p1);
}

template <typename Real>
int64_t kv_cache<Real>::compact(const std::vector<char>& keep) {
  const int64_t row = hkv_ * d_;
  int64_t w = 0;
  for (int64_t j = 0; j < size_; ++j) {
    if (!keep[j]) continue;
    if (w != j) {
      for (int64_t hk = 0; hk < hkv_; ++hk) {
        for (int64_t e = 0; e < d_; ++e) {
          if (storage_ == kv_storage::f32)
            k_.data()[key_offset(w, hk, e)] = k_.data()[key_offset(j, hk, e)];
          else
            k16_.data()[key_offset(w, hk, e)] = k16_.data()[key_offset(j, hk, e)];
        }
        if (storage_ == kv_storage::f32)
          std::copy_n(v_.data() + row_offset(j, hk), d_, v_.data() + row_offset(w, hk));
        else
          std::copy_n(v16_.data() + row_offset(j, hk), d_, v16_.data() + row_offset(w, hk));
      }
      kpos_[w] = kpos_[j];
      for (int64_t r = 1; r < rows_; ++r)
        ids_[(r - 1) * capacity_ + w] = ids_[(r - 1) * capacity_ + j];
      if (!raw_.empty()) std::copy_n(raw_.begin() + j * row, row, raw_.begin() + w * row);
    }
    ++w;
  }
  const int64_t dropped = size_ - w;
  size_ = w;
  update_next();
  return dropped;
}

template <typename Real>
int64_t kv_cache<Real>::remove(int64_t p0, int64_t p1) {
  check_range("remove", p0, p1);
  std::vector<char> keep(static_cast<size_t>(size_));
  for (int64_t j = 0; j < size_; ++j) keep[j] = kpos_[j] < p0 || kpos_[j] >= p1;
  return compact(keep);
}

template <typename Real>
void kv_cache<Real>::move(const std::vector<int64_t>& idx, const std::vector<int64_t>& to) {
  const int64_t n = static_cast<int64_t>(idx.size()), row = hkv_ * d_;
  if (transform_ && n > 0) {
    std::vector<Real> keys(static_cast<size_t>(n * row));
    std::vector<int64_t> at(static_cast<size_t>(n));
    if (mode_ == kv_shift_mode::exact) {
      // Hook 1 afresh on the keys as appended, at the new positions.
      for (int64_t t = 0; t < n; ++t) {
        std::copy_n(raw_.begin() + idx[t] * row, row, keys.begin() + t * row);
        at[t] = to[t];
      }
      transform_->apply(at, keys.data(), n, hkv_, d_, true, false);
    } else {
      // The stored key turned by the change d: the forward rotation at angle d omega_i (every
      // change of one edit has one sign: shift's delta, divide's floor(p / d) - p <= 0). For
      // d < 0 that is R(-|d|) = M R(|d|) M, M negating the second element v of every pair:
      // the forward kernel at |d| on the mirrored key, mirrored back. Negation is exact, so
      // each output is the forward kernel's with the sine negated, u' = fma(u, c, v s),
      // v' = fma(u, -s, v c), which is what llama.cpp's K-shift computes (ggml_rope_ext at the
      // negative position: the float32 angle pipelines are odd in the position, cosf / sinf
      // even / odd), bit for bit with angle ggml_f32 (tests/test_kv_shift_llama_cpp.cpp). The
      // transpose kernel (inverse) fuses the other product of v' and can differ in the last bit.
      bool back = false;
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t hk = 0; hk < hkv_; ++hk) load_key(idx[t], hk, keys.data() + t * row + hk * d_);
        const int64_t dlt = to[t] - kpos_[idx[t]];
        back = back || dlt < 0;
        at[t] = dlt < 0 ? -dlt : dlt;
      }
      if (turn_ && back) {
        // M on keys (n, Hkv, D): v of pair i is channel 2i + 1 (interleaved) or R/2 + i (half).
        const int64_t R = unit_freqs_->rotary_dim;
        const bool half = detail::rope_of(pos_.named).layout == rope_layout::half;
        const auto mirror = [&] {
          for (int64_t h = 0; h < n * hkv_; ++h)
            for (int64_t i = 0; i < R / 2; ++i) {
              Real& v = keys[h * d_ + (half ? R / 2 + i : 2 * i + 1)];
              v = -v;
            }
        };
        mirror();
        turn_->apply(at, keys.data(), n, hkv_, d_, true, false);
        mirror();
      } else {
        (turn_ ? turn_ : transform_)->apply(at, keys.data(), n, hkv_, d_, true, back);
      }
    }
    for (int64_t t = 0; t < n; ++t)
      for (int64_t hk = 0; hk < hkv_; ++hk) store_key(idx[t], hk, keys.data() + t * row + hk * d_);
  }
  for (int64_t t = 0; t < n; ++t) kpos_[idx[t]] = to[t];
  update_next();
}

template <typename Real>
int64_t kv_cache<Real>::shift(int64_t p0, int64_t p1, int64_t delta) {
  check_range("shift", p0, p1);
  if (rows_ > 1)
    fail(
        "kv_cache shift: an M-RoPE cache (three ids per token) can remove tokens but not move "
        "them");
  if (const char* t = rerotate_refused(pos_, mode_))
    fail(
        "kv_cache shift: an {} cache moves keys only in exact mode (kv_shift_mode::exact): its "
        "key transform does not invert by the transpose",
        t);
  if (delta < -(int64_t{1} << 62) || delta > (int64_t{1} << 62))
    fail("kv_cache shift: delta must be in [-2^62, 2^62], got {}", delta);
  std::vector<char> keep(static_cast<size_t>(size_), 1);
  std::vector<int64_t> idx, to;
  for (int64_t j = 0; j < size_; ++j) {
    if (kpos_[j] < p0 || kpos_[j] >= p1) continue;
    const int64_t np = kpos_[j] + delta;
    if (np > (int64_t{1} << 62))
      fail("kv_cache shift: position {} + {} would exceed 2^62", kpos_[j], delta);
    if (np < 0)
      keep[j] = 0;  // llama.cpp frees a cell whose position falls below 0
    else if (delta != 0) {
      idx.push_back(j);
      to.push_back(np);
    }
  }
  move(idx, to);
  return compact(keep);
}

template <typename Real>
int64_t kv_cache<Real>::evict_streaming(int64_t sinks, int64_t window) {
  if (sinks < 0) fail("kv_cache evict_streaming: sinks must be >= 0, got {}", sinks);
  if (window < 1) fail("kv_cache evict_streaming: window must be >= 1, got {}", window);
  // What shift would refuse, refused before anything is forgotten.
  if (rows_ > 1)
    fail("kv_cache evict_streaming: an M-RoPE cache (three ids per token) cannot move tokens");
  if (const char* t = rerotate_refused(pos_, mode_))
    fail(
        "kv_cache evict_streaming: an {} cache moves keys only in exact mode "
        "(kv_shift_mode::exact)",
        t);
  if (size_ <= sinks + window) return 0;
  for (int64_t j = 1; j < size_; ++j)
    if (kpos_[j] <= kpos_[j - 1])
      fail(
          "kv_cache evict_streaming: positions must increase in storage order (token {} at {} "
          "after {})",
          j, kpos_[j], kpos_[j - 1]);
  // The evicted tokens are those at positions [lo, hi); the window then moves down by hi - lo.
  const int64_t lo = kpos_[sinks], hi = kpos_[size_ - window];
  const int64_t dropped = remove(lo, hi);
  shift(hi, to_end, lo - hi);
  return dropped;
}

template <typename Real>
void kv_cache<Real>::divide(int64_t p0, int64_t p1, int64_t d) {
  check_range("divide", p0, p1);
  if (d < 1) fail("kv_cache divide: d must be >= 1, got {}", d);
  if (rows_ > 1)
    fail(
        "kv_cache divide: an M-RoPE cache (three ids per token) can remove tokens but not move "
        "them");
  if (const char* t = rerotate_refused(pos_, mode_))
    fail(
        "kv_cache divide: an {} cache moves keys only in exact mode (kv_shift_mode::exact): its "
        "key transform does not invert by the transpose",
        t);
  std::vector<int64_t> idx, to;
  for (int64_t j = 0; j < size_; ++j)
    if (kpos_[j] >= p0 && kpos_[j] < p1 && kpos_[j] / d != kpos_[j]) {
      idx.push_back(j);
      to.push_back(kpos_[j] / d);
    }
  move(idx, to);
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

namespace {

// Keys as stored, widened, (size(), Hkv, D) token-major.
template <typename Real>
std::vector<double> stored_keys(const kv_cache<Real>& c) {
  const int64_t n = c.size(), H = c.kv_heads(), D = c.head_dim();
  std::vector<double> out(static_cast<size_t>(n * H * D));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t hk = 0; hk < H; ++hk)
      for (int64_t e = 0; e < D; ++e) {
        const int64_t at = c.key_offset(j, hk, e);
        out[(j * H + hk) * D + e] =
            c.storage() == kv_storage::f32
                ? static_cast<double>(c.keys()[at])
                : static_cast<double>(half_to_float(c.storage(), c.keys16()[at]));
      }
  return out;
}

}  // namespace

std::vector<kv_shift_drift_row> kv_shift_drift(const rope_freqs& f, rope_layout layout,
                                               rope_angle angle, int64_t n, int64_t delta,
                                               std::span<const int64_t> counts, uint64_t seed) {
  if (n < 1 || n > (int64_t{1} << 20)) fail("kv_shift_drift: n must be in [1, 2^20], got {}", n);
  if (delta == 0) fail("kv_shift_drift: delta must not be 0");
  if (counts.empty()) fail("kv_shift_drift: counts must not be empty");
  for (size_t k = 0; k < counts.size(); ++k)
    if (counts[k] < 1 || counts[k] > 1000000 || (k > 0 && counts[k] <= counts[k - 1]))
      fail("kv_shift_drift: counts must increase, each in [1, 10^6]; got {} at index {}", counts[k],
           k);
  const int64_t most = counts.back(), ad = delta < 0 ? -delta : delta;
  if (ad > ((int64_t{1} << 62) - n) / (most + 1))
    fail("kv_shift_drift: {} shifts of {} from {} keys pass position 2^62", most, delta, n);
  const int64_t D = f.head_dim > 0 ? f.head_dim : f.rotary_dim;
  const int64_t P = delta < 0 ? most * ad : 0;
  rng r(seed);
  std::vector<float> k(static_cast<size_t>(n * D)), v(static_cast<size_t>(n * D), 0.0f);
  for (float& x : k) x = static_cast<float>(r.normal());
  const std::vector<double> kd(k.begin(), k.end()), vd(v.begin(), v.end());
  std::vector<int64_t> start(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) start[i] = P + i;
  attention_position<float> pos;
  pos.named = {rope_scheme(f, layout, angle)};
  attention_position<double> pos64;
  pos64.named = {rope_scheme(f, layout, rope_angle::exact)};
  std::vector<kv_shift_drift_row> out;
  for (kv_storage st : {kv_storage::f32, kv_storage::bf16, kv_storage::f16}) {
    kv_cache<float> moved(n, 1, D, pos, 0, st, kv_shift_mode::rerotate);
    moved.append(k.data(), v.data(), n, start);
    int64_t done = 0;
    for (int64_t want : counts) {
      for (; done < want; ++done) moved.shift(0, kv_cache<float>::to_end, delta);
      std::vector<int64_t> final_pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) final_pos[i] = P + i + want * delta;
      kv_cache<float> once(n, 1, D, pos, 0, st, kv_shift_mode::rerotate);
      once.append(k.data(), v.data(), n, final_pos);
      kv_cache<double> truth(n, 1, D, pos64, 0, kv_storage::f32);
      truth.append(kd.data(), vd.data(), n, final_pos);
      const auto a = stored_keys(moved), b = stored_keys(once), c = stored_keys(truth);
      kv_shift_drift_row row;
      row.storage = st;
      row.shifts = want;
      double s1 = 0, s2 = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const double d1 = std::abs(a[i] - b[i]), d2 = std::abs(b[i] - c[i]);
        row.drift_max = std::max(row.drift_max, d1);
        row.once_max = std::max(row.once_max, d2);
        s1 += d1 * d1;
        s2 += d2 * d2;
      }
      row.drift_rms = std::sqrt(s1 / static_cast<double>(a.size()));
      row.once_rms = std::sqrt(s2 / static_cast<double>(a.size()));
      out.push_back(row);
    }
  }
  return out;
}

template class kv_cache<float>;
template class kv_cache<double>;
template void attention_forward_cached(attention_params<float>, const kv_cache<float>&);
template void attention_forward_cached(attention_params<double>, const kv_cache<double>&);

}  // namespace posenc
