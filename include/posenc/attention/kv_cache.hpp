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
// The q/k transform a cache carries is the one in pos.named (RoPE, M-RoPE, xPos: keys scaled as
// well as rotated, say).
// With M-RoPE (mrope_scheme) every token has three ids (temporal, height, width): append takes
// positions (3, n) row-major (empty = text tokens, the next position in all three rows), the
// next position is one past the largest id of any row (the Qwen2-VL convention of
// positions_mrope), positions() is the temporal row (masks and biases read it), and a call's
// M-RoPE query ids default to the ids of the last T tokens appended.
//
// Note on length-dependent frequencies (dynamic NTK, LongRoPE): keys are rotated with the
// frequencies in force when they were appended; the cache does not re-rotate them.
//
// Position edits (remove, shift, divide), as engines make them between decode steps: llama.cpp's
// llama_memory_seq_rm, llama_memory_seq_add (its context shift: drop the oldest tokens, move the
// rest back by the number dropped) and llama_memory_seq_div (Self-Extend's grouping). A stored
// key carries hook 1 at its old position, so an edit that moves a position moves the key too,
// in one of two ways (kv_shift_mode):
//   rerotate: llama.cpp's K-shift: the stored key (transformed and rounded to the storage
//     format) is widened, turned by the change d with the forward rotation at angle d omega_i
//     (for d < 0: the forward kernel with cos / sin at |d| and the sine negated, as ggml rotates
//     at a negative position) and rounded again, so each edit adds a rounding and repeated
//     shifts drift from keys rotated once at their final positions (kv_shift_drift measures
//     how far). The turn is the rotation alone: the attention factor a of YaRN or LongRoPE,
//     already in the stored key, is not applied again (with angle ggml_f32 ggml's YaRN
//     magnitude is divided out in float). Against llama.cpp 6dafc14e run on F32 caches
//     (tests/golden/llama_cpp_kshift, tests/test_kv_shift_llama_cpp.cpp), with angle ggml_f32
//     seq_add's keys are llama.cpp's bit for bit (NORM and NEOX pairs; unscaled, linear, Llama
//     3 factors) with two differences that are llama.cpp's: its K-shift passes YaRN's magnitude
//     again (every shift multiplies all cached keys, moved or not, by 1 + 0.1 ln s), and since
//     its kv-cell rework (#13706) seq_div turns keys by p - floor(p / d), the opposite of the
//     change of position; divide here turns by the change;
//   exact: the cache also keeps every key as appended (before hook 1, in Real) and an edit
//     transforms it afresh at its new position: after any sequence of edits the stored keys
//     are bit for bit those of an append at the final positions, at the cost of a second key
//     buffer (capacity * Hkv * D Reals).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/core/page_buffer.hpp"

namespace posenc {

namespace detail {
class qk_transform;
}

// How shift() and divide() move stored keys (see above).
enum class kv_shift_mode { rerotate, exact };
const char* kv_shift_mode_name(kv_shift_mode m);  // "rerotate", "exact"
// Throws invalid_argument naming `arg` and the allowed names.
kv_shift_mode kv_shift_mode_from_name(const std::string& name, const std::string& arg = "mode");

template <typename Real>
class kv_cache {
 public:
  // capacity >= 1 tokens of Hkv >= 1 heads of dim D >= 1; positions start at start_position
  // (>= 0). pos: the position schemes of the attention calls; their q/k transform (in
  // pos.named, optional; keys_transformed and M-RoPE's ids are ignored, a head_dim
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
  // shift_mode: how position edits move the stored keys (kv_shift_mode; exact keeps the keys
  // as appended as well).
  kv_cache(int64_t capacity, int64_t Hkv, int64_t D, attention_position<Real> pos = {},
           int64_t start_position = 0, kv_storage storage = kv_storage::f32,
           kv_shift_mode shift_mode = kv_shift_mode::rerotate);

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
  // (attention_params::k_blocked, docs/decisions.md "Keys in 8-key blocks"): element e of key j of
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

  // Position edits on the tokens whose position (positions(), row 0) is in [p0, p1), with
  // 0 <= p0 <= p1 (p1 = to_end: every position from p0 on). The tokens keep their order; after
  // an edit next_position() is one past the largest remaining position (start_position when
  // the cache is empty). A bad argument throws invalid_argument and changes nothing.
  static constexpr int64_t to_end = (int64_t{1} << 62) + 1;
  // Forgets those tokens (llama_memory_seq_rm); returns how many.
  int64_t remove(int64_t p0, int64_t p1);
  // Their positions += delta (llama_memory_seq_add); a token whose position would fall below 0
  // is removed, as llama.cpp does; returns how many were removed. Keys move by shift_mode().
  // Positions above 2^62 are refused.
  int64_t shift(int64_t p0, int64_t p1, int64_t delta);
  // Their positions become floor(p / d), d >= 1 (llama_memory_seq_div: Self-Extend's
  // grouping); keys move by shift_mode().
  void divide(int64_t p0, int64_t p1, int64_t d);
  // StreamingLLM's eviction (Xiao et al. 2024, sec. 3.2): keeps the first `sinks` tokens and the
  // last `window` (in storage order), forgets the ones between and moves the window's positions
  // down to follow the sinks', so that positions are assigned inside the cache: after appending
  // token i, evict_streaming(n, W) and a query at next_position() - 1 attend as the
  // streaming_llm scheme's row i (schemes.hpp). remove + shift (llama.cpp's seq_rm + seq_add)
  // with keys moved by shift_mode(). Positions must increase in storage order (an
  // invalid_argument otherwise, cache unchanged); nothing happens while size() <= sinks +
  // window. Returns how many tokens were forgotten.
  int64_t evict_streaming(int64_t sinks, int64_t window);
  // shift and divide on an M-RoPE cache (three ids per token) and, in rerotate mode, on a cache
  // of a q/k transform reached by name (whose keys need not turn by a rotation) are refused by
  // name; remove works on every cache.
  kv_shift_mode shift_mode() const { return mode_; }

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
  kv_shift_mode mode_ = kv_shift_mode::rerotate;
  std::vector<Real> raw_;  // exact mode: (capacity, Hkv, D), the keys as appended
  // rerotate mode with RoPE: the rotation alone (the frequencies with magnitude 1), so that a
  // shift turns a stored key without multiplying it by the attention factor again.
  std::unique_ptr<rope_freqs> unit_freqs_;
  std::shared_ptr<const detail::qk_transform> turn_;

  void check_range(const char* what, int64_t p0, int64_t p1) const;
  // Keeps the tokens with keep[j], in order; returns how many were dropped.
  int64_t compact(const std::vector<char>& keep);
  // New positions for the tokens `idx` (their old ones in kpos_): stores them and moves the
  // keys (shift_mode_), then recomputes next_.
  void move(const std::vector<int64_t>& idx, const std::vector<int64_t>& to);
  void load_key(int64_t j, int64_t hk, Real* row) const;
  void store_key(int64_t j, int64_t hk, const Real* row);
  void update_next();
};

// How far rerotate-mode keys drift under repeated context shifts (llama.cpp's K-shift), per
// storage format. n keys of one head of dim f.head_dim, entries N(0, 1) from rng(seed), are
// appended at positions P .. P + n - 1 (P = max(counts) |delta| when delta < 0, else 0) to a
// rerotate-mode cache with RoPE (f, layout, angle), which then takes shift(0, to_end, delta)
// again and again. After counts[k] shifts (counts increasing, >= 1) its keys are compared with
//   - the keys rotated once at the final positions in the same pipeline and storage (an
//     exact-mode cache's): the drift, max and root-mean-square of |difference| over every
//     element;
//   - the float64 rotation at the final positions (angle exact): the exact-mode keys' own
//     error (one rounding to the storage format and the pipeline's), as the yardstick.
// The values' storage is the keys' (they do not move). Throws invalid_argument for n < 1,
// delta = 0, bad counts (empty, not increasing, above 10^6) or positions past 2^62.
struct kv_shift_drift_row {
  kv_storage storage = kv_storage::f32;
  int64_t shifts = 0;
  double drift_max = 0, drift_rms = 0;  // rerotate-mode keys against one rotation
  double once_max = 0, once_rms = 0;    // one rotation (exact mode) against float64
};
std::vector<kv_shift_drift_row> kv_shift_drift(const rope_freqs& f, rope_layout layout,
                                               rope_angle angle, int64_t n, int64_t delta,
                                               std::span<const int64_t> counts, uint64_t seed = 0);

// Attention of p's queries against everything in the cache: sets p.k, p.v, p.S, p.Hkv and
// p.k_positions from the cache and p.pos's q/k transform to the cache's, marked as already
// applied to the keys (keys_transformed = true), and Llama 4's temperature to the cache's when p
// sets none. q_positions default to the last T cache positions (the tokens just appended;
// M-RoPE's q ids likewise). p must not set k, v, S, k_positions, key_padding or documents of
// its own (invalid_argument otherwise); p.D must equal the cache's head dim and a q/k transform
// in p.pos.named must be left out or the cache's (the same parameters and frequencies; M-RoPE's
// query ids may be given).
template <typename Real>
void attention_forward_cached(attention_params<Real> p, const kv_cache<Real>& cache);

}  // namespace posenc
