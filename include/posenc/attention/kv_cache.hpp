// posenc/attention/kv_cache.hpp: a key/value cache for generation, keeping positions right.
//
// The cache stores keys *after* the q/k transform (hook 1 of the position schemes it is given:
// RoPE at their absolute positions) together with those positions, and values as given. Each append
// takes n new tokens at the next positions next_position(), ..., next_position() + n - 1 (the
// seeds: generation with a cache must continue absolute positions after the prefix), or at explicit
// position ids. Appending past capacity is rejected before anything changes.
//
// Decoding with the cache:
//   kv_cache<float> cache(capacity, Hkv, D, pos);   // pos: the calls' attention_position
//   for each chunk of n new tokens (q, k, v):
//     cache.append(k, v, n);
//     attention_params<float> p;  p.q = q; p.out = out; p.T = n; p.Hq = Hq; p.D = D;
//     p.causal = true;  p.pos = pos;                 // every scheme as for the full pass
//     attention_forward_cached(p, cache);            // keys, values, positions from the cache
// equals the full-sequence forward on the same rows (tests/test_kv_cache.cpp).
//
// The q/k transforms a cache carries: RoPE, xPos (keys scaled as well as rotated) and M-RoPE.
// With M-RoPE (pos.mrope) every token has three ids (temporal, height, width): append takes
// positions (3, n) row-major (empty = text tokens, the next position in all three rows), the
// next position is one past the largest id of any row (the Qwen2-VL convention of
// positions_mrope), positions() is the temporal row (masks and biases read it), and a call's
// pos.mrope.q_positions default to the ids of the last T tokens appended.
//
// Note on length-dependent frequencies (dynamic NTK, LongRoPE): keys are rotated with the
// frequencies in force when they were appended; the cache does not re-rotate them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/core/page_buffer.hpp"

namespace posenc {

namespace detail {
class qk_transform;
}

template <typename Real>
class kv_cache {
 public:
  // capacity >= 1 tokens of Hkv >= 1 heads of dim D >= 1; positions start at start_position
  // (>= 0). pos: the position schemes of the attention calls; their q/k transform (pos.rope,
  // pos.xpos or pos.mrope, optional; keys_rotated and M-RoPE's id spans are ignored, a head_dim
  // when set must equal D) is applied to keys on append, the other schemes act at attention
  // time. What pos points to (the RoPE
  // frequencies, tables) must outlive the cache. Memory is allocated up front
  // (2 * head_capacity() * Hkv * D elements, capped by max_alloc_bytes).
  //
  // storage: f32 keeps keys and values in Real; f16 / bf16 (float caches only) keep them in
  // half precision (posenc/core/half.hpp), half the memory and half the bytes a decode step
  // reads: each appended key is transformed in float32 first, then rounded to the format (as
  // engines that store rotated keys in float16 do), each value rounded; attention widens them
  // exactly and computes in float32.
  kv_cache(int64_t capacity, int64_t Hkv, int64_t D, attention_position<Real> pos = {},
           int64_t start_position = 0, kv_storage storage = kv_storage::f32);

  // Appends n >= 0 tokens: k, v (n, Hkv, D). positions: empty = next positions, else (n,)
  // explicit ids >= 0 ((3, n) with M-RoPE: ids_per_token() rows). Throws invalid_argument (cache
  // unchanged) when size() + n > capacity(), for bad positions, or null data with n > 0. Returns
  // the positions used ((ids_per_token(), n) with M-RoPE).
  std::vector<int64_t> append(const Real* k, const Real* v, int64_t n,
                              std::span<const int64_t> positions = {});

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  int64_t kv_heads() const { return hkv_; }
  int64_t head_dim() const { return d_; }
  // Position of the next appended token: one past the largest position stored so far (or
  // start_position when empty).
  int64_t next_position() const { return next_; }
  const attention_position<Real>& position() const { return pos_; }

  kv_storage storage() const { return storage_; }
  // Head-major: kv head hk owns head_capacity() slots (capacity() rounded up to a multiple of
  // kKeyBlock = 8 when the keys are blocked, else capacity()), head_stride() = head_capacity() * D
  // elements apart, so that a decode step reads each head's keys and values as two contiguous
  // runs (attention_params::kv_head_stride). Values are rows: value j of head hk at
  // row_offset(j, hk) = (hk * head_capacity() + j) * D. Keys are rows as well when
  // keys_blocked() is false; when D is a multiple of 8 they are stored in 8-key blocks
  // (attention_params::k_blocked, docs/design.md "Keys in 8-key blocks"): element e of key j of
  // head hk at key_offset(j, hk, e). Rows or blocks, the keys hold the same values and attention
  // returns the same bits. With half-precision storage keys() and values() are null and keys16()
  // and values16() hold the stored bits (and the other way round).
  bool keys_blocked() const { return blocked_; }
  int64_t head_capacity() const { return head_cap_; }
  int64_t head_stride() const { return head_cap_ * d_; }
  int64_t row_offset(int64_t j, int64_t hk) const { return (hk * head_cap_ + j) * d_; }
  int64_t key_offset(int64_t j, int64_t hk, int64_t e) const {
    return blocked_ ? blocked_key_index(head_stride(), d_, j, hk, e) : row_offset(j, hk) + e;
  }
  const Real* keys() const { return k_.empty() ? nullptr : k_.data(); }
  const Real* values() const { return v_.empty() ? nullptr : v_.data(); }
  const uint16_t* keys16() const { return k16_.empty() ? nullptr : k16_.data(); }
  const uint16_t* values16() const { return v16_.empty() ? nullptr : v16_.data(); }
  std::span<const int64_t> positions() const { return {kpos_.data(), static_cast<size_t>(size_)}; }
  // Ids per token of the q/k transform (3 for M-RoPE, else 1), and row r of the stored ids
  // (size(),); row 0 is positions().
  int64_t ids_per_token() const { return rows_; }
  std::span<const int64_t> ids(int64_t row) const;

  // Forgets every token; positions restart at start_position.
  void clear();

 private:
  int64_t capacity_, hkv_, d_, start_, size_ = 0, next_;
  bool blocked_;      // keys in 8-key blocks (D % 8 == 0)
  int64_t head_cap_;  // slots per head: capacity_, rounded up to whole blocks when blocked_
  attention_position<Real> pos_;
  std::shared_ptr<const detail::qk_transform> transform_;  // pos_'s hook 1; null = off
  kv_storage storage_ = kv_storage::f32;
  // Head-major, in 2 MiB pages (page_buffer.hpp): a decode step streams each head's run.
  page_buffer<Real> k_, v_;
  page_buffer<uint16_t> k16_, v16_;
  std::vector<Real> scratch_;  // half storage: one append's keys, transformed before rounding
  std::vector<int64_t> kpos_;
  int64_t rows_ = 1;          // ids per token
  std::vector<int64_t> ids_;  // rows_ > 1: (rows_ - 1, capacity), rows 1.. of the ids
};

// Attention of p's queries against everything in the cache: sets p.k, p.v, p.S, p.Hkv and
// p.k_positions from the cache and p.pos's q/k transform to the cache's, marked as already
// applied to the keys (keys_rotated = true), and Llama 4's temperature to the cache's when p
// sets none. q_positions default to the last T cache positions (the tokens just appended;
// M-RoPE's q ids likewise). p must not set k, v, S, k_positions, key_padding or documents of
// its own (invalid_argument otherwise); p.D must equal the cache's head dim and p.pos.rope,
// p.pos.xpos and p.pos.mrope must be unset or the cache's.
template <typename Real>
void attention_forward_cached(attention_params<Real> p, const kv_cache<Real>& cache);

}  // namespace posenc
