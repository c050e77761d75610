// The float32 fast path of attention_tiled: Highway micro-kernels (dynamic dispatch, one binary,
// best target at run time; this file is compiled once per target through foreach_target.h).
//
// Same algorithm as the generic tiled path in attention.cpp (FlashAttention-2, Dao 2023,
// Algorithm 1; online softmax, Milakov and Gimelshein 2018), with the two block products done
// by one register-blocked micro-kernel:
//
//   C(MR x NV*N) = beta_r * C + A(MR x K) . B(K x NV*N)      N = float lanes (8 with AVX2)
//     A read by broadcasts (row stride lda), B by vector loads (row stride ldb), C kept in
//     MR * NV <= 12 registers over the whole K loop (6 rows x 2 vectors: 12 accumulators cover
//     FMA latency x 2 FMA ports; 2 loads + 6 broadcasts per 12 FMAs)
//
//   Q K^T:  A = q block (rows, D), pre-multiplied by the scale, in K-chunks of 64 columns
//           (a_layout::kChunked: the micro-kernel reads its rows from one pointer);  B = kT
//           (D, Bk): the key block transposed once per call for the whole of K ("packed":
//           (Hkv, S/Bk, D, Bk), keys contiguous), shared by every query block and every query
//           head of the group (GQA: no copy per head);  C = s (rows, Bk), beta = 0.
//   P V:    A = p (rows, Bk);  B = the block's v rows, packed once per call with kT into vP
//           (Hkv, S, Dp + 16), zero-padded to Dp: read in place their stride Hkv*D (4 KiB for
//           Hkv*D = 1024) puts every row in one L1 set, and the product re-reads each row once
//           per strip of output rows. Packing (then per item) took the T = S = 2048 case from
//           0.41 to 0.53 of the FMA peak (posenc bench, same run); packing once per call
//           instead of once per query block, 0.31 to 0.37-0.40 on an Intel Xeon;
//           C = acc (rows, Dp), beta_r = alpha_r = exp(m_old - m_new): the softmax rescale is
//           fused into the accumulator load.
//
// Work item = (kv head, block of bq queries) x its G = Hq / Hkv query heads = G * bq tile rows
// (<= 64 + G; packed calls up to kPackTileRows = 256 while 16 items remain); items are taken from
// an atomic counter, heaviest (last, for causal) first. Inside a key block of Bk = 64 keys, per
// tile row:
//   score mod   s += scale q.a^K_c (hook 2a, scalar) + each bias's add_row over the row's
//               visible keys (hook 2b: one virtual call per row and block; each scheme's row
//               is as fast as it can be exact, e.g. a vectorised formula or a slice of a
//               per-call table, in its hook file; see engine_terms.hpp)
//   masks       causal / window as a key-index range per row; key padding as an additive
//               0 / -inf row per block; documents by a per-block "one document" test, else a
//               scalar compare
//   softmax     vector row max, p = SoftmaxExp(s - m) (below: 1.13 ulp; exactly 0 for
//               s - m <= -87 and for -inf, so masked keys give p = 0 and no p is subnormal),
//               vector row sum.
// Decode-like calls (fewer than 16 tile rows per item, or fewer than kSplitItems items: decode
// and speculative decoding, MQA included) read K in place instead of transposing all of it up
// front, and split their keys (flash-decoding: Dao, Haziza, Massa and Sizov 2023) into chunks of
// SplitChunk keys (512 down to 128, the longest that still leaves kMinSplitWork items), each a
// work item that leaves its row state (m, l, acc, w) in a buffer; merge_item combines a row's
// chunks in chunk order after the items. The chunking depends on the shape only, so the bits are
// the same on any number of threads. Within a chunk, per key block:
//   fewer than kPackRows rows: each score a vector dot product over D, four keys at a time with
//     one accumulator each, key outer and row inner (each key row is used by every row while in
//     L1);
//   kPackRows rows or more: the block transposed into thread scratch as it is read (8 x 8
//     register transposes), then the same block product as the prefill;
// both prefetching the rows of their head one key at a time, kPrefetchKeys keys ahead into L1
// (dot products) or kPackPrefetchKeys ahead into L2 (packed blocks, whose block product is long)
// (in the token-major layout the rows lie a page apart, beyond the hardware prefetchers; spread
// out, the requests overlap the arithmetic instead of arriving as one burst per block). With
// token-major K and V the items run kv head fastest, so the threads read the heads of the same
// key range (the same pages) together. K and V may be
// head-major (attention_params::kv_head_stride, the KV cache's layout): each head's rows are
// then one contiguous run. Every mask and position term runs through the same score-mod code.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/attention/attention_simd.cpp"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "posenc/core/half.hpp"
#include "posenc/core/page_buffer.hpp"
#include "src/attention/attention_plan.hpp"
#include "src/core/bf16_dot.hpp"

#ifndef POSENC_ATTENTION_SIMD_TYPES
#define POSENC_ATTENTION_SIMD_TYPES
#include "posenc/core/threads.hpp"

namespace posenc::detail {

// Keys per block of the float32 forward: 128 (64 before), so that each row's per-block work of
// the online softmax (two horizontal reductions, a libm exp, the masks' bookkeeping, the bias
// call) and each P V call's accumulator load, rescale and store serve twice the keys
// (docs/decisions.md, "Where the forward's time goes"). It is also the width of a chunk of a
// chunked A (kAChunk), so that the score block s is one chunk for P V.
#ifndef POSENC_SIMD_BK
#define POSENC_SIMD_BK 128
#endif
constexpr int64_t kSimdBk = POSENC_SIMD_BK;
constexpr int64_t kBwdBk = 64;  // keys per block of the backward (attention_backward.cpp's kBk)
// Keys per block of the bfloat16 products (simd_problem::bk), chosen for the same reason.
constexpr int64_t kBf16Bk = 128;
constexpr int64_t kSimdRows = 64;  // target tile rows per work item
// Packed (prefill) calls: tiles of up to kPackTileRows rows, doubled from kSimdRows while they
// leave kMinPackItems items or more (docs/decisions.md, "Prefill on an Intel Xeon").
#ifndef POSENC_PACK_TILE_ROWS
#define POSENC_PACK_TILE_ROWS 256
#endif
constexpr int64_t kPackTileRows = POSENC_PACK_TILE_ROWS;
constexpr int64_t kMinPackItems = 16;
constexpr int64_t kAChunk = kSimdBk;  // columns per K-chunk of a chunked A (a_layout::kChunked)
// Decode-like calls (fewer than 16 tile rows per item) split each item's keys into chunks (a
// whole number of blocks), each a work item of its own (flash-decoding): the longest of
// kSplitKeysMax, its half, ..., kSplitKeysMin keys that still makes kMinSplitWork items or more
// (long chunks pay the split's per-item cost less often; short ones keep short caches spread
// over the threads). A function of the shape only, never of the thread count: the merge order,
// and so the bits, are the same on any number of threads.
#ifndef POSENC_SPLIT_KEYS
#define POSENC_SPLIT_KEYS 512
#endif
constexpr int64_t kSplitKeysMax = POSENC_SPLIT_KEYS;
constexpr int64_t kSplitKeysMin = 128;
constexpr int64_t kMinSplitWork = 16;
static_assert(kSplitKeysMax % kSimdBk == 0 && kSplitKeysMin % kSimdBk == 0,
              "a chunk is a whole number of key blocks");
static_assert(kSplitKeysMax >= kSplitKeysMin);
// Keys per chunk for a split call with `items` (kv head, query block) items over S keys.
constexpr int64_t SplitChunk(int64_t items, int64_t S) {
  int64_t c = kSplitKeysMax;
  while (c > kSplitKeysMin && items * ((S + c - 1) / c) < kMinSplitWork) c /= 2;
  return c;
}
static_assert(SplitChunk(8, 8192) == 512 && SplitChunk(1, 8192) == 512 &&
              SplitChunk(1, 2048) == 128 && SplitChunk(8, 512) == 256);
// Calls with fewer (kv head, query block) items than this are split too (decode and speculative
// decoding with many query heads per kv head: MQA, or T of 2 to 16), so that every thread has
// work: a shape constant like the chunk lengths.
constexpr int64_t kSplitItems = 64;
// On the in-place path (split calls), items of at least this many tile rows transpose each key
// block into thread scratch just before its product (one pass over the block, shared by the
// rows); fewer rows form each score as a dot product over the key row in place.
#ifndef POSENC_PACK_ROWS
#define POSENC_PACK_ROWS 8
#endif
constexpr int64_t kPackRows = POSENC_PACK_ROWS;
// Keys ahead of the one being scored whose key and value rows the decode path prefetches, and
// whether it prefetches head-major (contiguous) rows too: the knobs the measurements in
// docs/decisions.md turned (build attention_simd.cpp with -DPOSENC_PF_KEYS=N,
// -DPOSENC_PF_CONTIG=0).
#ifndef POSENC_PF_KEYS
#define POSENC_PF_KEYS 16
#endif
#ifndef POSENC_PF_CONTIG
#define POSENC_PF_CONTIG 1
#endif
constexpr int64_t kPrefetchKeys = POSENC_PF_KEYS;
// The decode path's four dot products per row reduced together (SumOfLanes4) or one by one.
// POSENC_HEAD_FAST: token-major split calls order their items kv head fastest (AttendItems).
#ifndef POSENC_HEAD_FAST
#define POSENC_HEAD_FAST 1
#endif
#ifndef POSENC_SUM4
#define POSENC_SUM4 1
#endif
// The items that pack their key blocks (kPackRows rows or more: MQA, speculative steps) spend a
// long block product between the reads of two blocks, so their stream runs a whole block ahead
// (64 keys: 64 KiB of float32 K and V at D = 128) and fills L2 rather than L1, which would
// evict the block in use (docs/decisions.md, "Decode: chunk length by shape").
#ifndef POSENC_PACK_PF_KEYS
#define POSENC_PACK_PF_KEYS 64
#endif
constexpr int64_t kPackPrefetchKeys = POSENC_PACK_PF_KEYS;
// The cache level each stream's prefetches fill: __builtin_prefetch's locality, 3 = all levels
// (x86 prefetcht0), 2 = L2 and below (prefetcht1).
#ifndef POSENC_PF_LOCALITY
#define POSENC_PF_LOCALITY 3
#endif
#ifndef POSENC_PACK_PF_LOCALITY
#define POSENC_PACK_PF_LOCALITY 2
#endif
inline void StreamPrefetch(const void* p) {
  __builtin_prefetch(p, 0, POSENC_PF_LOCALITY);
}
inline void PackStreamPrefetch(const void* p) {
  __builtin_prefetch(p, 0, POSENC_PACK_PF_LOCALITY);
}

// Everything the per-target kernel reads; built once per call by attention_simd_f32.
struct simd_problem {
  const attention_params<float>* p = nullptr;
  const attention_plan* pl = nullptr;
  const float* q = nullptr;  // (T, Hq, D): p.q, or a copy transformed by hook 1
  // Half-precision queries (p.q_storage): q16 replaces q, widened row by row in ItemBegin (a
  // transformed copy made by hook 1 is float32 and clears q16).
  kv_storage qt = kv_storage::f32;
  const uint16_t* q16 = nullptr;
  const float* k = nullptr;  // (S, Hkv, D), transformed by hook 1 (decode path only)
  // Hook 1 inside the tiles (its row form): qtab (T, Rt) tables of the query positions, applied
  // to each item's q rows; null when q is p.q untransformed or a transformed copy.
  const qk_transform* tr = nullptr;
  const float* qtab = nullptr;
  int64_t Rt = 0;
  const float* kT =
      nullptr;  // (Hkv, nkb, D, Bk) transposed key blocks, zero-padded; null for decode
  // (Hkv, S, vb_row(Dp)) the value rows, float32, zero-padded to Dp, each head one contiguous
  // run: packed once per call with kT, read in place by every query block's P V product.
  const float* vP = nullptr;
  // attention_products::bf16 on a vdpbf16ps CPU (packed calls only; bf16_dot.hpp): instead of
  // kT and vP, the keys and values in bfloat16 pairs, zero-padded:
  //   kT16 (Hkv, nkb, D2, Bk, 2): elements 2 d2, 2 d2 + 1 of key j0 + jj at (d2, jj), D2 =
  //                               ceil(D / 2)
  //   vP16 (Hkv, nkb, Bk / 2, Dp, 2): element e of keys j0 + 2t and j0 + 2t + 1 at (t, e)
  // and each item's q rows as pairs (simd_scratch::qb), its probabilities as bfloat16 (pb).
  bool bf16 = false;
  int64_t bk = kSimdBk;  // keys per block of AttendItem: kSimdBk, or kBf16Bk with bf16
  const uint16_t* kT16 = nullptr;
  const uint16_t* vP16 = nullptr;
  int64_t D2 = 0;
  bool packed() const { return kT || kT16; }
  // In-place path (kT null): items of kPackRows or more rows pack each key block into
  // simd_scratch::kb, with hook 1's row form applied from ktab (S, Rt) when it is not null.
  bool pack_local = false;
  const float* ktab = nullptr;
  bool prefetch = true;      // software prefetch of the in-place path
  const float* v = nullptr;  // (S, Hkv, D): p.v, read through a packed block (simd_scratch::vb)
  // Half-precision storage (p.kv): kt / vt say how K and V are stored; k16 / v16 replace k / v
  // for f16 and bf16 (K stays in p.kv's format unless hook 1 made a float32 copy).
  kv_storage kt = kv_storage::f32, vt = kv_storage::f32;
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  // Element strides of K and V: between consecutive keys of a head (ld) and between heads
  // (hs). Token-major (S, Hkv, D): ld = Hkv * D, hs = D; head-major (p.kv_head_stride):
  // ld = D, hs = kv_head_stride. K's may differ from V's (hook 1's token-major copy of K).
  int64_t k_ld = 0, k_hs = 0, v_ld = 0, v_hs = 0;
  // Keys in 8-key blocks (attention_params::k_blocked; then k_ld = D): krow(j, hk) is the j-th
  // D-element slice of the head's run, which for j a multiple of 8 is the start of j's block.
  // The decode path reads the blocks as they are (DecodeScores<true>), the packing gathers rows
  // from them (KeyRow).
  bool k_blocked = false;
  // Byte address of row j of head hk of K or V (any storage).
  const void* krow(int64_t j, int64_t hk) const {
    const int64_t x = j * k_ld + hk * k_hs;
    return kt == kv_storage::f32 ? static_cast<const void*>(k + x) : k16 + x;
  }
  const void* vrow(int64_t j, int64_t hk) const {
    const int64_t x = j * v_ld + hk * v_hs;
    return vt == kv_storage::f32 ? static_cast<const void*>(v + x) : v16 + x;
  }
  int64_t Dp = 0;           // D rounded up to the vector length
  int64_t nkb = 0;          // key blocks
  int64_t bq = 1, nqb = 1;  // queries per item, query blocks
  float scale = 1;
  const engine_terms<float>* terms = nullptr;    // hook 2b: terms->biases
  const relative_vectors<float>* rel = nullptr;  // hooks 2a and 3; null = off
  int64_t C = 0;                                 // rows of the relative tables
  bool kpos_contiguous = true;  // kpos[j] == j for every key (the default; biases may use it)
  bool any_key_pad = false;
  int64_t nch = 1;            // key chunks per item (split-K); 1 = no split
  int64_t chunk = 0;          // keys per chunk when nch > 1 (SplitChunk)
  bool head_fastest = false;  // item order: kv head fastest (token-major K/V, split calls)
  int64_t rows_max = 0;       // tile rows of a full item: G * min(bq, T)
  float* part = nullptr;      // split-K partials (Hkv * nqb * nch, rows_max, part_row()); null
                              // when nch == 1
  int64_t part_row() const { return Dp + C + 2; }  // per row: m, l, acc (Dp), w (C)
};

// One thread's scratch, sized once before the parallel region.
struct simd_scratch {
  std::vector<float> qs;     // (rows, D): scale * q rows of the item
  std::vector<float> qc;     // (ceil(D / kAChunk), rows, kAChunk): qs in K-chunks (packed paths)
  std::vector<float> s;      // (rows, Bk): scores, then probabilities
  std::vector<float> acc;    // (rows, Dp): unnormalised output
  std::vector<float> m, l;   // (rows,): running max and sum
  std::vector<float> beta;   // (rows,): this block's rescale alpha
  std::vector<float> kadd;   // (Bk,): 0 for a real key, -inf for a pad key
  std::vector<float> qa;     // (rows, C): scale q . a^K_c (relative tables only)
  std::vector<float> w;      // (rows, C): probability mass per table row
  std::vector<int64_t> c;    // (Bk,): the table row of each key of a block row
  std::vector<float> vb;     // (Bk, vb_row(Dp)): the value rows of one key block, zero-padded to Dp
  std::vector<float> kb;     // (D * Bk): one key block, transposed (simd_problem::pack_local)
  std::vector<float> krows;  // (8 * D): PackKeyBlock's rows
  std::vector<float> krot;   // (Bk, D): the decode path's transformed key rows (hook 1 fused)
  std::vector<uint16_t> qb;  // (rows, 2 D2): the item's q' rows in bfloat16 (pr.bf16)
  std::vector<uint16_t> pb;  // (rows, Bk): a block's probabilities in bfloat16 (pr.bf16)
};

// Row stride of the packed value block: Dp plus one cache line. In V the rows of one head lie
// Hkv * D floats apart (4 KiB for Hkv * D = 1024), so every row of a block falls in the same L1
// set and the P V product, which reads each row once per strip of output rows, would miss L1
// on every load; the packed rows are 64 B longer than a multiple of the set stride.
inline int64_t vb_row(int64_t Dp) {
  return Dp + 16;
}

// Bytes per stored key or value element.
inline int64_t kv_bytes(kv_storage s) {
  return s == kv_storage::f32 ? 4 : 2;
}

}  // namespace posenc::detail
#endif  // POSENC_ATTENTION_SIMD_TYPES

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::kAChunk;
using detail::kBwdBk;
using detail::kPackPrefetchKeys;
using detail::kPrefetchKeys;
using detail::kSimdBk;
using detail::kSplitKeysMin;
using detail::kv_bytes;
using detail::PackStreamPrefetch;
using detail::qk_transform;
using detail::simd_problem;
using detail::simd_scratch;
using detail::SplitChunk;
using detail::StreamPrefetch;
using detail::vb_row;

// Register blocking per target (docs/decisions.md, "Register blocking per target"): DF is the
// vector of the block products, kMR x kNV their accumulator block, each chosen by measurement (the
// macros are the knob those builds turned). AVX-512 (32 registers): full 512-bit vectors,
// POSENC_AVX3_MR x POSENC_AVX3_NV = 6 x 2 (of 6 x 2, 8 x 2, 12 x 2, 6 x 4 and 4 x 4 the fastest or
// level on Zen 4 and Zen 5). AVX2 (16 registers, 8 lanes): POSENC_AVX2_MR x POSENC_AVX2_NV = 3 x 4
// = 12 accumulators (FMA latency x 2 ports; 4 loads + 3 broadcasts per 12 FMAs; 2-9% faster than
// 6 x 2 on Zen 5, level on Zen 4). Other targets (SSE4 and below: no FMA, so a multiply and an
// add each need a temporary): 6 x 2. DH, the 8-float granule, handles a last half vector of a
// product whose width is a multiple of 8 but not of DF's lanes (D = 80 with 16 lanes), and the
// decode path's dot products.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#ifndef POSENC_AVX3_MR
#define POSENC_AVX3_MR 6
#endif
#ifndef POSENC_AVX3_NV
#define POSENC_AVX3_NV 2
#endif
using DF = hn::CappedTag<float, 16>;
constexpr int kMR = POSENC_AVX3_MR, kNV = POSENC_AVX3_NV;
#elif HWY_TARGET == HWY_AVX2
#ifndef POSENC_AVX2_MR
#define POSENC_AVX2_MR 3
#endif
#ifndef POSENC_AVX2_NV
#define POSENC_AVX2_NV 4
#endif
using DF = hn::CappedTag<float, 8>;
constexpr int kMR = POSENC_AVX2_MR, kNV = POSENC_AVX2_NV;
#else
using DF = hn::CappedTag<float, 8>;
constexpr int kMR = 6, kNV = 2;
#endif
using DH = hn::CappedTag<float, 8>;

static_assert(kSimdBk % (kNV * hn::MaxLanes(DF())) == 0, "key panels must tile a key block");

// Columns of one packed key panel: the width of a full column strip of the block products.
HWY_INLINE int64_t PanelWidth() {
  return kNV * static_cast<int64_t>(hn::Lanes(DF()));
}

// e^t for a softmax argument t = s - m <= 0 (s a score, m >= s the row's running maximum, or its
// log-sum-exp in the backward), in fewer instructions than hwy/contrib/math's general Exp (which
// spends its own on the sign of x, two integer powers of two and the range up to 104):
//   k = round(t log2 e),  r = t - k ln 2  (Cody and Waite 1980: ln 2 = L1 + L2 with L1 =
//       0.693359375 = 355/512, nine bits, so k L1 is exact for |k| < 2^15 and t - k L1 is exact;
//       L2 = -2.12194440e-4 carries the rest), |r| <= ln(2)/2 + tiny;
//   e^r by its Taylor polynomial of degree 7 in Horner form, 1 + r (1 + r (1/2 + ... + r/7!));
//   e^t = 2^k e^r: vscalefps on AVX-512, otherwise times the float 2^k built in its exponent
//       bits (k >= -126 is a normal number for every t > -87, the only results kept).
// Error budget in ulps of e^t, t in (-87, 0] (derived term by term in
// src/verify/attention_checks.cpp, softmax_exp_check, which `posenc check` runs on every target):
// with FMA (AVX2, AVX-512) the reduction 0.27, the truncation |r|^8 / 8! 0.09, the Horner steps
// before the last 0.27 and the last fused step 0.5: 1.13 ulp (measured over every float in (-87,
// 0]: 0.94); without FMA (SSE4 and below) 1.41 (measured 1.22). Highway's Exp claims 1 ulp. t <=
// -87 gives exactly 0: e^-87 = 1.6e-38, just above FLT_MIN (1.2e-38), so no result is subnormal (on
// Intel CPUs every FMA of P V that meets a subnormal takes a microcode assist; see
// SoftmaxBackwardBlock), and what is dropped is below 1.7e-38 against a row sum of at least 1 (its
// maximum's e^0). t = -inf (a masked key) gives exactly 0, and so does t = NaN, as with Highway's
// Exp.
template <class D>
HWY_INLINE hn::Vec<D> SoftmaxExp(D d, hn::Vec<D> t) {
  const auto k = hn::Round(hn::Mul(t, hn::Set(d, 1.44269504088896341f)));
  auto r = hn::MulAdd(k, hn::Set(d, -0.693359375f), t);
  r = hn::MulAdd(k, hn::Set(d, 2.12194440e-4f), r);
  auto q = hn::Set(d, 1.0f / 5040.0f);
  q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 720.0f));
  q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 120.0f));
  q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 24.0f));
  q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 6.0f));
  q = hn::MulAdd(q, r, hn::Set(d, 0.5f));
  q = hn::MulAdd(q, r, hn::Set(d, 1.0f));
  q = hn::MulAdd(q, r, hn::Set(d, 1.0f));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  const hn::Vec<D> y{_mm512_scalef_ps(q.raw, k.raw)};
#else
  // k + 127 in the low bits of 1.5 * 2^23 + 127 + k (exact: an integer below 2^24), shifted
  // into the exponent field: the float 2^k, one add and one shift.
  const hn::RebindToSigned<D> di;
  const auto biased = hn::BitCast(di, hn::Add(k, hn::Set(d, 12582912.0f + 127.0f)));
  const auto y = hn::Mul(q, hn::BitCast(d, hn::ShiftLeft<23>(biased)));
#endif
  return hn::IfThenElseZero(hn::Gt(t, hn::Set(d, -87.0f)), y);
}

// A softmax row's numerators in place, x[j] <- SoftmaxExp(x[j] - m) for j < n (x[j] <= m; -inf
// gives exactly 0), and their sum over float32 lanes: the online softmax's step (n a multiple of
// the lanes there) and the per-pair path's (exp_row_f32).
HWY_INLINE float ExpRowInPlace(float* HWY_RESTRICT x, int64_t n, float m) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  auto vsum = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto e = SoftmaxExp(d, hn::Sub(hn::LoadU(d, x + j), vm));
    hn::StoreU(e, d, x + j);
    vsum = hn::Add(vsum, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  if (j < n) {  // the tail through a zero-padded vector, so each element sees the same exp
    HWY_ALIGN float t[hn::MaxLanes(DF())] = {};
    for (int64_t k = 0; k < n - j; ++k) t[k] = x[j + k];
    const auto e = SoftmaxExp(d, hn::Sub(hn::Load(d, t), vm));
    hn::Store(e, d, t);
    for (int64_t k = 0; k < n - j; ++k) sum += x[j + k] = t[k];
  }
  return sum;
}

// N floats from a row stored as float32, float16 or bfloat16 (widening is exact).
template <class D>
HWY_INLINE hn::Vec<D> LoadAsFloat(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadAsFloat(D d, const hwy::float16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, D>(), p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadAsFloat(D d, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), p));
}
HWY_INLINE float AsFloat(float x) {
  return x;
}
HWY_INLINE float AsFloat(hwy::float16_t x) {
  return f16_to_float(std::bit_cast<uint16_t>(x));
}
HWY_INLINE float AsFloat(hwy::bfloat16_t x) {
  return bf16_to_float(std::bit_cast<uint16_t>(x));
}

// dst[0, n) = the n values at src, stored as `st`, widened to float32.
template <typename TS>
HWY_INLINE void WidenRowT(const TS* HWY_RESTRICT src, float* HWY_RESTRICT dst, int64_t n) {
  const DH d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t e = 0;
  for (; e + N <= n; e += N) hn::StoreU(LoadAsFloat(d, src + e), d, dst + e);
  for (; e < n; ++e) dst[e] = AsFloat(src[e]);
}
HWY_INLINE void WidenRow(kv_storage st, const void* src, float* dst, int64_t n) {
  switch (st) {
    case kv_storage::f32:
      std::copy(static_cast<const float*>(src), static_cast<const float*>(src) + n, dst);
      return;
    case kv_storage::f16:
      return WidenRowT(static_cast<const hwy::float16_t*>(src), dst, n);
    case kv_storage::bf16:
      return WidenRowT(static_cast<const hwy::bfloat16_t*>(src), dst, n);
  }
}

// Key j of head hk as a float32 row (D elements), from rows or from 8-key blocks (k_blocked:
// its elements [c, c + 8) at c * 8 + slot * 8 of its block, slot = j % 8).
HWY_INLINE void KeyRow(const simd_problem& pr, int64_t j, int64_t hk, float* HWY_RESTRICT row) {
  const int64_t D = pr.p->D;
  if (!pr.k_blocked) return WidenRow(pr.kt, pr.krow(j, hk), row, D);
  const int64_t slot = j % kKeyBlock, eb = kv_bytes(pr.kt);
  const char* blk = static_cast<const char*>(pr.krow(j - slot, hk));
  for (int64_t c = 0; c < D; c += kKeyBlock)
    WidenRow(pr.kt, blk + (c + slot) * kKeyBlock * eb, row + c, kKeyBlock);
}

// A's layout in a block product. kStrided: row r at A + r * lda, element kk at [kk * ak] (ak = 1:
// rows contiguous; ak = row length of a matrix read transposed, as the backward reads P^T and
// dS^T). kChunked: A in K-chunks of kAChunk columns, element (r, kk) at
// A[(kk / kAChunk) * lda + r * kAChunk + kk % kAChunk] (lda = the stride between chunks; a
// matrix of at most kAChunk columns with rows kAChunk floats apart, the score block s, is one
// chunk). Chunked, the micro-kernel addresses its MR rows from one pointer at constant
// displacements (r * 256 B); strided, it needs MR pointer registers, and with 12 or more rows the
// compiler spills them into the K loop (vmovq xmm -> gpr and stack reloads in the loop body on
// an Intel Xeon; docs/decisions.md, "Prefill on an Intel Xeon").
enum class a_layout { kStrided, kChunked };
static_assert(kAChunk == kSimdBk, "the score block s (rows, Bk) is one chunk of A for P V");

// C(MR x NV*N) = beta_r * C + A(MR x K) . B(K x NV*N), beta == nullptr: C = A . B, N = lanes of
// the tag D. A as `AL` says (above); B: row kk at B + kk * ldb; C: row r at C + r * ldc.
// Accumulation order: for each output, kk = 0, 1, ..., K-1 with FMA (the same in both layouts,
// so the layout never changes a bit).
template <class D, int MR, int NV, a_layout AL, typename TB = float>
HWY_INLINE void MicroKernel(const float* HWY_RESTRICT A, int64_t lda, const TB* HWY_RESTRICT B,
                            int64_t ldb, float* HWY_RESTRICT C, int64_t ldc, int64_t K,
                            const float* HWY_RESTRICT beta, int64_t ak = 1) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      c[r][v] =
          beta ? hn::Mul(hn::Set(d, beta[r]), hn::LoadU(d, C + r * ldc + v * N)) : hn::Zero(d);
  auto step = [&](const TB* HWY_RESTRICT b, auto a_of) HWY_ATTR {
    hn::Vec<D> bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = LoadAsFloat(d, b + v * N);
    for (int r = 0; r < MR; ++r) {
      const auto a = hn::Set(d, a_of(r));
      for (int v = 0; v < NV; ++v) c[r][v] = hn::MulAdd(a, bv[v], c[r][v]);
    }
  };
  if constexpr (AL == a_layout::kChunked) {
    for (int64_t k0 = 0; k0 < K; k0 += kAChunk) {
      const float* HWY_RESTRICT a = A + k0 / kAChunk * lda;
      const TB* HWY_RESTRICT b = B + k0 * ldb;
      const int64_t kn = std::min(kAChunk, K - k0);
      for (int64_t kk = 0; kk < kn; ++kk)
        step(b + kk * ldb, [&](int r) HWY_ATTR { return a[r * kAChunk + kk]; });
    }
  } else {
    for (int64_t kk = 0; kk < K; ++kk)
      step(B + kk * ldb, [&](int r) HWY_ATTR { return A[r * lda + kk * ak]; });
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) hn::StoreU(c[r][v], d, C + r * ldc + v * N);
}

// C(rows x NV*N) over the whole tile: rows in strips of MR0 (kMR unless said), the rest in strips
// of 8 (when MR0 > 8), 4, 2 and 1.
template <class D, int NV, a_layout AL, typename TB = float, int MR0 = kMR>
HWY_INLINE void GemmStrip(int64_t rows, const float* A, int64_t lda, const TB* B, int64_t ldb,
                          float* C, int64_t ldc, int64_t K, const float* beta, int64_t ak = 1) {
  const int64_t row_step = AL == a_layout::kChunked ? kAChunk : lda;
  int64_t r = 0;
  auto strips = [&](auto mr) {
    constexpr int MR = decltype(mr)::value;
    for (; r + MR <= rows; r += MR)
      MicroKernel<D, MR, NV, AL, TB>(A + r * row_step, lda, B, ldb, C + r * ldc, ldc, K,
                                     beta ? beta + r : nullptr, ak);
  };
  strips(std::integral_constant<int, MR0>());
  if constexpr (MR0 > 8) strips(std::integral_constant<int, 8>());
  if constexpr (MR0 > 4) strips(std::integral_constant<int, 4>());
  strips(std::integral_constant<int, 2>());
  strips(std::integral_constant<int, 1>());
}

// C(rows x ncols) over the whole tile, ncols a multiple of 8: column strips of kNV vectors (a
// strip of B stays in L1 while every row strip passes over it), then narrower strips of taller
// row blocks (below), then a half vector. panel == 0: B is row-major (row kk at B + kk * ldb).
// panel > 0: B is packed in panels of `panel` columns (PanelWidth()), each K x panel contiguous, so
// that the strip a micro-kernel streams is one contiguous run of memory instead of K rows a whole B
// row apart (with a 64-key block those lie 256 B apart and fill only a quarter of the L1 sets). B
// may also be stored as float16 or bfloat16 (TB), widened as it is loaded.
template <a_layout AL = a_layout::kStrided, typename TB = float>
HWY_INLINE void Gemm(int64_t rows, int64_t ncols, const float* A, int64_t lda, const TB* B,
                     int64_t ldb, float* C, int64_t ldc, int64_t K, const float* beta,
                     int64_t ak = 1, int64_t panel = 0) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t ldp = panel ? panel : ldb;
  auto bcol = [&](int64_t c0) { return panel ? B + c0 / panel * K * panel + c0 % panel : B + c0; };
  int64_t c0 = 0;
  for (; c0 + kNV * N <= ncols; c0 += kNV * N)
    GemmStrip<DF, kNV, AL, TB>(rows, A, lda, bcol(c0), ldp, C + c0, ldc, K, beta, ak);
  // The columns past the last full strip (D = 80: 16 of them) in narrower strips of taller row
  // blocks, kMR kNV accumulators still (a single vector of kMR rows would leave 3-6 chains, fewer
  // than FMA latency x 2 ports). Chunked A only: strided A needs a pointer register per row.
  constexpr bool kTall = AL == a_layout::kChunked;
  if constexpr (kNV >= 4) {
    if (c0 + 2 * N <= ncols) {
      GemmStrip<DF, 2, AL, TB, kTall ? kMR * kNV / 2 : kMR>(rows, A, lda, bcol(c0), ldp, C + c0,
                                                            ldc, K, beta, ak);
      c0 += 2 * N;
    }
  }
  for (; c0 + N <= ncols; c0 += N)
    GemmStrip<DF, 1, AL, TB, kTall ? kMR * kNV : kMR>(rows, A, lda, bcol(c0), ldp, C + c0, ldc, K,
                                                      beta, ak);
  if (c0 < ncols)
    GemmStrip<DH, 1, AL, TB, kTall ? kMR * kNV : kMR>(rows, A, lda, bcol(c0), ldp, C + c0, ldc, K,
                                                      beta, ak);
}

// The decode path's P V (rows < kPackRows): acc(rows, ncols) = beta_r acc + s(rows, K) . B, s one
// K-chunk (K <= kSimdBk). Gemm's strips of kNV vectors leave a single row (MHA) 2 accumulator
// chains, a quarter of the FMA rate; here a row strip of MR rows takes column strips of
// DecNV(MR) vectors, so that every strip has at least 8 independent accumulators within the
// target's registers. Each output still accumulates kk = 0 .. K-1 by FMA after its beta scaling
// (MicroKernel), so the bits are Gemm's.
template <int MR>
constexpr int DecNV() {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return MR >= 4 ? 4 : 8;
#else
  return MR >= 4 ? 2 : MR >= 2 ? 4 : 8;
#endif
}
template <typename TB>
HWY_INLINE void DecodePV(int64_t rows, int64_t ncols, const float* s, const TB* B, int64_t ldb,
                         float* C, int64_t ldc, int64_t K, const float* beta) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  constexpr auto AL = a_layout::kChunked;
  int64_t r = 0;
  auto strips = [&](auto mr) {
    constexpr int MR = decltype(mr)::value, NV = DecNV<MR>();
    for (; r + MR <= rows; r += MR) {
      const float* A = s + r * kAChunk;
      float* Cr = C + r * ldc;
      const float* br = beta ? beta + r : nullptr;
      int64_t c0 = 0;
      for (; c0 + NV * N <= ncols; c0 += NV * N)
        MicroKernel<DF, MR, NV, AL, TB>(A, kSimdBk, B + c0, ldb, Cr + c0, ldc, K, br);
      for (; c0 + N <= ncols; c0 += N)
        MicroKernel<DF, MR, 1, AL, TB>(A, kSimdBk, B + c0, ldb, Cr + c0, ldc, K, br);
      if (c0 < ncols) MicroKernel<DH, MR, 1, AL, TB>(A, kSimdBk, B + c0, ldb, Cr + c0, ldc, K, br);
    }
  };
  strips(std::integral_constant<int, 4>());
  strips(std::integral_constant<int, 2>());
  strips(std::integral_constant<int, 1>());
}

// dst row c (c < 8, at dst + c * ldd) = column c of the 8 x 8 block of rows src[i] + off, for
// 8-lane vectors (d: DH with 8 lanes; not on the 1-lane targets): three rounds of interleaves
// (32-bit, 64-bit, 128-bit halves).
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
template <class D8>
HWY_INLINE void Transpose8x8(D8 d, const float* const* src, int64_t off, float* HWY_RESTRICT dst,
                             int64_t ldd) {
  const hn::Repartition<double, D8> dd;
  using V = hn::Vec<D8>;
  V r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = hn::LoadU(d, src[i] + off);
  for (int i = 0; i < 8; i += 2) {  // (r_i[0] r_i+1[0] r_i[1] r_i+1[1] | ...[4], [5])
    t[i] = hn::InterleaveLower(d, r[i], r[i + 1]);
    t[i + 1] = hn::InterleaveUpper(d, r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4)  // four rows' column c in each 128-bit half
    for (int k = 0; k < 2; ++k) {
      const auto a = hn::BitCast(dd, t[i + k]), b = hn::BitCast(dd, t[i + k + 2]);
      u[i + 2 * k] = hn::BitCast(d, hn::InterleaveLower(dd, a, b));
      u[i + 2 * k + 1] = hn::BitCast(d, hn::InterleaveUpper(dd, a, b));
    }
  // u[c] (c < 4) holds rows 0-3 of columns c and c + 4, u[c + 4] rows 4-7.
  for (int c = 0; c < 4; ++c) {
    hn::StoreU(hn::ConcatLowerLower(d, u[c + 4], u[c]), d, dst + c * ldd);
    hn::StoreU(hn::ConcatUpperUpper(d, u[c + 4], u[c]), d, dst + (c + 4) * ldd);
  }
}
#endif

// Transposes key block kb of head hk into dst (Bk / W, D, W) for W = PanelWidth() (a row of
// panels, Gemm's panel layout), zero for keys past S. rows: scratch of 8 * D floats.
// With a transform table ktab (S, Rt), each key row is first transformed by tr's row form (hook 1
// inside the packing: no transformed copy of K). pf_end > 0: also prefetches the key and value
// rows kPackPrefetchKeys ahead of each packed key into L2, below pf_end (the in-place path,
// where the block is packed just before its product and K is read once).
void PackKeyBlock(const simd_problem& pr, int64_t hk, int64_t kb, float* HWY_RESTRICT dst,
                  float* HWY_RESTRICT rows, const qk_transform* tr, const float* ktab, int64_t Rt,
                  int64_t pf_end) {
  const int64_t S = pr.p->S, D = pr.p->D;
  const int64_t W = PanelWidth();
  const int64_t j0 = kb * kSimdBk, nb = std::min(kSimdBk, S - j0);
  const int64_t kbytes = D * kv_bytes(pr.kt), vbytes = D * kv_bytes(pr.vt);
  // float32 keys without a transform are transposed from where they lie; others are widened
  // and transformed into `rows` first.
  const bool in_place = pr.kt == kv_storage::f32 && !ktab && !pr.k_blocked;
  // 8 keys at a time: each source row is read contiguously, each destination row gets 8
  // consecutive floats, so both sides stay within a few cache lines.
  // (W >= 8 except on 1- and 2-lane targets, where a group spans several panels.)
  for (int64_t jj0 = 0; jj0 < kSimdBk; jj0 += 8) {
    // float32 keys in 8-key blocks (k_blocked), a whole block of keys below S: its 8 x 8 pieces
    // are transposed where they lie (slot t's elements [d, d + 8) at t * 8 + d * 8).
    bool blk_in_place = false;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    blk_in_place = pr.k_blocked && pr.kt == kv_storage::f32 && !ktab && jj0 + 8 <= nb &&
                   W % 8 == 0 && hn::Lanes(DH()) == 8;
#endif
    const float* src[8];
    for (int64_t t = 0; t < 8; ++t) {
      const int64_t jj = jj0 + t;
      float* row = rows + t * D;
      src[t] = row;
      if (jj >= nb) {
        std::fill(row, row + D, 0.0f);
        continue;
      }
      if (const int64_t jf = j0 + jj + kPackPrefetchKeys; jf < pf_end) {
        const char* kf = static_cast<const char*>(pr.krow(jf, hk));
        const char* vf = static_cast<const char*>(pr.vrow(jf, hk));
        for (int64_t b = 0; b < kbytes; b += 64) PackStreamPrefetch(kf + b);
        for (int64_t b = 0; b < vbytes; b += 64) PackStreamPrefetch(vf + b);
      }
      if (in_place) {
        src[t] = static_cast<const float*>(pr.krow(j0 + jj, hk));
        continue;
      }
      if (blk_in_place) {
        src[t] = static_cast<const float*>(pr.krow(j0 + jj0, hk)) + t * kKeyBlock;
        continue;
      }
      KeyRow(pr, j0 + jj, hk, row);
      if (ktab) tr->apply_rows(ktab + (j0 + jj) * Rt, true, row, 1, D);
    }
    if (W % 8 == 0) {  // the 8 keys are 8 consecutive columns of one panel
      float* HWY_RESTRICT out = dst + jj0 / W * D * W + jj0 % W;
      int64_t d = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
      if (blk_in_place)
        for (; d < D; d += 8) Transpose8x8(DH(), src, d * kKeyBlock, out + d * W, W);
      if (hn::Lanes(DH()) == 8)
        for (; d + 8 <= D; d += 8) Transpose8x8(DH(), src, d, out + d * W, W);
#endif
      for (; d < D; ++d)
        for (int64_t t = 0; t < 8; ++t) out[d * W + t] = src[t][d];
    } else {
      for (int64_t d = 0; d < D; ++d)
        for (int64_t t = 0; t < 8; ++t) {
          const int64_t jj = jj0 + t;
          dst[jj / W * D * W + d * W + jj % W] = src[t][d];
        }
    }
  }
}

// Transposes key blocks of K into kT: (Hkv, nkb, Bk / W, D, W), one PackKeyBlock per (head,
// block) item; the caller splits the items over threads.
void PackKeys(const simd_problem& pr, float* kT, int64_t item_begin, int64_t item_end,
              const qk_transform* tr, const float* ktab, int64_t Rt) {
  const int64_t D = pr.p->D, nkb = pr.nkb;
  std::vector<float> rows(static_cast<size_t>(8 * D));
  for (int64_t item = item_begin; item < item_end; ++item)
    PackKeyBlock(pr, item / nkb, item % nkb, kT + item * D * kSimdBk, rows.data(), tr, ktab, Rt, 0);
}

// out[k] = the sum of a_k's lanes, k = 0..3: one reduction for four dot products. Two interleave
// steps within each 128-bit block leave [sum a0, sum a1, sum a2, sum a3] of that block, then the
// blocks are added (instead of a full horizontal sum per vector).
template <class D>
HWY_INLINE void SumOfLanes4(D d, hn::Vec<D> a0, hn::Vec<D> a1, hn::Vec<D> a2, hn::Vec<D> a3,
                            float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a0);
  out[1] = hn::GetLane(a1);
  out[2] = hn::GetLane(a2);
  out[3] = hn::GetLane(a3);
  (void)d;
#else
  constexpr size_t kN = hn::MaxLanes(D());
  static_assert(kN == 4 || kN == 8, "DH: one or two 128-bit blocks");
  const auto t0 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const auto t1 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const hn::Repartition<uint64_t, D> du;
  const auto w0 = hn::BitCast(du, t0), w1 = hn::BitCast(du, t1);
  const auto u = hn::Add(hn::BitCast(d, hn::InterleaveLower(du, w0, w1)),
                         hn::BitCast(d, hn::InterleaveUpper(du, w0, w1)));
  if constexpr (kN == 4) {
    hn::StoreU(u, d, out);
  } else {
    const hn::Half<D> dh;
    hn::StoreU(hn::Add(hn::LowerHalf(dh, u), hn::UpperHalf(dh, u)), dh, out);
  }
#endif
}

// The four sums of a key group's accumulators, one reduction (SumOfLanes4) or one by one.
template <class D>
HWY_INLINE void Reduce4(D d, hn::Vec<D> a0, hn::Vec<D> a1, hn::Vec<D> a2, hn::Vec<D> a3,
                        float* HWY_RESTRICT out) {
#if POSENC_SUM4
  SumOfLanes4(d, a0, a1, a2, a3, out);
#else
  out[0] = hn::GetLane(hn::SumOfLanes(d, a0)), out[1] = hn::GetLane(hn::SumOfLanes(d, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, a2)), out[3] = hn::GetLane(hn::SumOfLanes(d, a3));
#endif
}

// The decode path's register blocks (docs/decisions.md, "Decode: dot products in register
// blocks"): kDecRows8 rows against a group of 8 keys, kDecRows4 rows against a last group of 4;
// RB x 4 KG accumulators plus the group's key vectors and a q vector fit the target's registers
// (32 with AVX-512, else 16), and at least 8 independent chains cover FMA latency x 2 ports.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kDecRows8 = 2, kDecRows4 = 4;
#else
constexpr int kDecRows8 = 1, kDecRows4 = 2;
#endif

// s[r * Bk + t] for rows [r0, r0 + RB) of qs (rows, D) and keys t = 0 .. 4 KG - 1 at k0 (rows
// kstride elements apart; kBlk: slots of one 8-key block, kstride = 8, element e of a slot at
// BlockOffset(e)). Each (row, key) accumulates in DH lanes over e = 0, N, 2N, ..., ends in
// Reduce4 over its group of four keys and a scalar tail over [De, D): the same operations in the
// same order whatever RB, KG and the layout, so neither the blocking nor the layout changes a
// bit.
template <bool kBlk>
HWY_INLINE int64_t BlockOffset(int64_t e) {
  return kBlk ? e / kKeyBlock * kKeyBlock * kKeyBlock + e % kKeyBlock : e;
}
template <int RB, int KG, bool kBlk, typename TK>
HWY_INLINE void DecodeDots(const float* HWY_RESTRICT qs, int64_t r0, int64_t D, const TK* k0,
                           int64_t kstride, float* HWY_RESTRICT s) {
  const DH d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t De = D / N * N;
  constexpr int NK = 4 * KG;
  const TK* kp[NK];
  for (int t = 0; t < NK; ++t) kp[t] = k0 + t * kstride;
  hn::Vec<DH> a[RB][NK];
  for (int r = 0; r < RB; ++r)
    for (int t = 0; t < NK; ++t) a[r][t] = hn::Zero(d);
  // One step: q elements [e, e + N) against the keys' elements at offset ko of each key.
  auto step = [&](int64_t e, int64_t ko) HWY_ATTR {
    hn::Vec<DH> kv[NK];
    for (int t = 0; t < NK; ++t) kv[t] = LoadAsFloat(d, kp[t] + ko);
    for (int r = 0; r < RB; ++r) {
      const auto qv = hn::LoadU(d, qs + (r0 + r) * D + e);
      for (int t = 0; t < NK; ++t) a[r][t] = hn::MulAdd(qv, kv[t], a[r][t]);
    }
  };
  if constexpr (kBlk) {  // piece by piece (N divides 8, so De = D): offsets stay constants
    for (int64_t c = 0; c < De; c += kKeyBlock)
      for (int64_t u = 0; u < kKeyBlock; u += N) step(c + u, c * kKeyBlock + u);
  } else {
    for (int64_t e = 0; e < De; e += N) step(e, e);
  }
  for (int r = 0; r < RB; ++r) {
    const float* qr = qs + (r0 + r) * D;
    float* srow = s + (r0 + r) * kSimdBk;
    for (int g = 0; g < KG; ++g) {
      float dd[4];
      Reduce4(d, a[r][4 * g], a[r][4 * g + 1], a[r][4 * g + 2], a[r][4 * g + 3], dd);
      for (int64_t e = De; e < D; ++e)
        for (int t = 0; t < 4; ++t) dd[t] += qr[e] * AsFloat(kp[4 * g + t][BlockOffset<kBlk>(e)]);
      for (int t = 0; t < 4; ++t) srow[4 * g + t] = dd[t];
    }
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// DecodeDots<RB, 2, true> in 16-lane vectors (AVX-512): keys in 8-key blocks lie two keys'
// 8-element pieces side by side (slots t and t + 1 of element piece c are 16 consecutive
// elements), so one 16-lane vector holds keys t (low half) and t + 1 (high half) against q's
// piece in both halves. Each half does DecodeDots' 8-lane operations in its order (the same
// fused multiply-adds over c = 0, 8, ..., then Reduce4 over the 8-lane halves of a group of four
// keys): the same bits in half the instructions (docs/decisions.md, "Decode: key pairs in
// 16-lane vectors").
constexpr bool kDecPairs = true;
template <int RB, typename TK>
HWY_INLINE void DecodeDotsPairs(const float* HWY_RESTRICT qs, int64_t r0, int64_t D, const TK* k0,
                                float* HWY_RESTRICT s) {
  const DF df;
  const DH dh;
  hn::Vec<DF> a[RB][4];
  for (int r = 0; r < RB; ++r)
    for (int p = 0; p < 4; ++p) a[r][p] = hn::Zero(df);
  for (int64_t c = 0; c < D; c += kKeyBlock) {
    hn::Vec<DF> kv[4];
    for (int p = 0; p < 4; ++p) kv[p] = LoadAsFloat(df, k0 + c * kKeyBlock + 2 * p * kKeyBlock);
    for (int r = 0; r < RB; ++r) {
      const auto qh = hn::LoadU(dh, qs + (r0 + r) * D + c);
      const auto qv = hn::Combine(df, qh, qh);
      for (int p = 0; p < 4; ++p) a[r][p] = hn::MulAdd(qv, kv[p], a[r][p]);
    }
  }
  for (int r = 0; r < RB; ++r) {
    float* srow = s + (r0 + r) * kSimdBk;
    for (int g = 0; g < 2; ++g)
      Reduce4(dh, hn::LowerHalf(dh, a[r][2 * g]), hn::UpperHalf(dh, a[r][2 * g]),
              hn::LowerHalf(dh, a[r][2 * g + 1]), hn::UpperHalf(dh, a[r][2 * g + 1]), srow + 4 * g);
  }
}
#else
// Declared only, for DecodeScores' discarded `if constexpr (kDecPairs)` branch: never called.
constexpr bool kDecPairs = false;
template <int RB, typename TK>
void DecodeDotsPairs(const float* qs, int64_t r0, int64_t D, const TK* k0, float* s);
#endif

// Scores of one block on the decode path: s(rows, Bk) for keys [0, nb) of the block at k0 (key
// rows kstride floats apart), qs (rows, D). Keys in groups of 8 (then one of 4), rows in register
// blocks (DecodeDots): each key vector is loaded once per row block and each q vector once per
// key group. Prefetches the key and value rows kPrefetchKeys ahead (keys j0 + jj +
// kPrefetchKeys below pf_end), spread over the block so that the memory requests overlap the
// arithmetic. Keys stored as TK (float, float16, bfloat16); v0, vbytes: the block's first value
// row and the value row stride in bytes (for the prefetch only).
// kBlk: K in 8-key blocks (k_blocked; kstride = D, k0 the block of j0), each group's keys read
// slot by slot (DecodeDots<..., true>): the same products, in address order.
template <bool kBlk, typename TK>
HWY_INLINE void DecodeScores(const float* HWY_RESTRICT qs, int64_t rows, int64_t D, const TK* k0,
                             const char* v0, int64_t vbytes, int64_t kstride, int64_t nb,
                             int64_t j0, int64_t pf_end, float* HWY_RESTRICT s) {
  const DH d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t De = D / N * N;
  // Bytes of one key row and of one value row (vbytes / kstride: bytes per value element; with
  // kBlk the keys' rows are the D-element slices of their blocks, kstride = D).
  const int64_t krow_bytes = D * static_cast<int64_t>(sizeof(TK)),
                vrow_bytes = D * vbytes / kstride;
  auto prefetch = [&](int64_t jj) {
    if (j0 + jj + kPrefetchKeys >= pf_end) return;
    const char* kj = reinterpret_cast<const char*>(k0 + (jj + kPrefetchKeys) * kstride);
    const char* vj = v0 + (jj + kPrefetchKeys) * vbytes;
    for (int64_t b = 0; b < krow_bytes; b += 64) StreamPrefetch(kj + b);
    for (int64_t b = 0; b < vrow_bytes; b += 64) StreamPrefetch(vj + b);
  };
  // The keys of a group at jj (a multiple of 4) and their spacing: rows, or slots of a block.
  const int64_t kst = kBlk ? kKeyBlock : kstride;
  auto group = [&](int64_t jj) {
    return kBlk ? k0 + jj / kKeyBlock * kKeyBlock * D + jj % kKeyBlock * kKeyBlock
                : k0 + jj * kstride;
  };
  int64_t jj = 0;
  for (; jj + 8 <= nb; jj += 8) {
    for (int64_t t = 0; t < 8; ++t) prefetch(jj + t);
    int64_t r = 0;
    if constexpr (kBlk && kDecPairs) {  // jj is a block's first key: group(jj) is the block
      for (; r + 4 <= rows; r += 4) DecodeDotsPairs<4>(qs, r, D, group(jj), s + jj);
      for (; r + 2 <= rows; r += 2) DecodeDotsPairs<2>(qs, r, D, group(jj), s + jj);
      for (; r < rows; ++r) DecodeDotsPairs<1>(qs, r, D, group(jj), s + jj);
      continue;
    }
    if constexpr (kDecRows8 > 1)
      for (; r + kDecRows8 <= rows; r += kDecRows8)
        DecodeDots<kDecRows8, 2, kBlk>(qs, r, D, group(jj), kst, s + jj);
    for (; r < rows; ++r) DecodeDots<1, 2, kBlk>(qs, r, D, group(jj), kst, s + jj);
  }
  if (jj + 4 <= nb) {
    for (int64_t t = 0; t < 4; ++t) prefetch(jj + t);
    int64_t r = 0;
    for (; r + kDecRows4 <= rows; r += kDecRows4)
      DecodeDots<kDecRows4, 1, kBlk>(qs, r, D, group(jj), kst, s + jj);
    if constexpr (kDecRows4 > 2)
      for (; r + 2 <= rows; r += 2) DecodeDots<2, 1, kBlk>(qs, r, D, group(jj), kst, s + jj);
    for (; r < rows; ++r) DecodeDots<1, 1, kBlk>(qs, r, D, group(jj), kst, s + jj);
    jj += 4;
  }
  for (; jj < nb; ++jj) {
    prefetch(jj);
    const TK* kj = group(jj);
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = qs + r * D;
      auto a0 = hn::Zero(d);
      for (int64_t e = 0; e < De; e += N)
        a0 = hn::MulAdd(hn::LoadU(d, qr + e), LoadAsFloat(d, kj + BlockOffset<kBlk>(e)), a0);
      float dot = hn::GetLane(hn::SumOfLanes(d, a0));
      for (int64_t e = De; e < D; ++e) dot += qr[e] * AsFloat(kj[BlockOffset<kBlk>(e)]);
      s[r * kSimdBk + jj] = dot;
    }
  }
}

// The rows of one work item: tile row r holds query head hk * G + r / nq and query i0 + r % nq.
struct item_rows {
  int64_t hk, i0, nq, G, rows;
  int64_t head(int64_t r) const { return hk * G + r / nq; }
  int64_t query(int64_t r) const { return i0 + r % nq; }
};

// An item's start: its query rows scaled (and transformed), m = -inf, l = 0, acc = 0, and hook
// 2a's q . a^K for every table row.
void ItemBegin(const simd_problem& pr, simd_scratch& sc, const item_rows& it) {
  const auto& p = *pr.p;
  const int64_t Hq = p.Hq, D = p.D, Dp = pr.Dp, C = pr.C, rows = it.rows;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float *qs = sc.qs.data(), *qc = sc.qc.data(), *acc = sc.acc.data(), *m = sc.m.data(),
        *l = sc.l.data(), *qa = sc.qa.data(), *w = sc.w.data();
  const auto* rel = pr.rel;
  // qs(rows, D) = scale * q rows: the score scale folded into q once per item (after hook 1's
  // row form, when the transform is fused).
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t x = (it.query(r) * Hq + it.head(r)) * D;
    float* qr = qs + r * D;
    if (pr.q16)
      WidenRow(pr.qt, pr.q16 + x, qr, D);
    else
      std::copy(pr.q + x, pr.q + x + D, qr);
    if (pr.qtab) pr.tr->apply_rows(pr.qtab + it.query(r) * pr.Rt, false, qr, 1, D);
    // bfloat16 products: q' before the scale, rounded to pairs (the scale multiplies the
    // float32 score instead, so bfloat16 q without hook 1 enters exactly).
    // (An odd D's last slot stays the zero make_scratch wrote.)
    if (pr.kT16) detail::bf16_round(qr, sc.qb.data() + r * 2 * pr.D2, D);
    for (int64_t e = 0; e < D; ++e) qr[e] *= pr.scale;
    m[r] = neg_inf;
    l[r] = 0;
  }
  // qc: qs again in K-chunks of kAChunk columns (a_layout::kChunked), for the block products.
  if (pr.kT || pr.pack_local)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e0 = 0; e0 < D; e0 += kAChunk)
        std::copy(qs + r * D + e0, qs + r * D + std::min(D, e0 + kAChunk),
                  qc + e0 * rows + r * kAChunk);
  // (The bfloat16 products need no zeroed acc: a row's first visible block has beta = alpha =
  // exp(-inf) = 0, which bf16_gemm takes as C = A . B, and a row that never sees a key is never
  // read.)
  if (!pr.kT16) std::fill(acc, acc + rows * Dp, 0.0f);
  if (rel) {
    std::fill(w, w + rows * C, 0.0f);
    // qa[r][c] = scale q_i . a^K_c: hook 2a's score term for all C rows at once.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < C; ++c) {
        float dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += qs[r * D + e] * rel->keys[c * D + e];
        qa[r * C + c] = dot;
      }
  }
}

// Decode path: the first kPrefetchKeys rows of the item at once (items that pack their blocks:
// kPackPrefetchKeys, those past the first kPrefetchKeys into L2 only, as their stream does);
// DecodeScores or PackKeyBlock keeps the stream going from there.
void ItemPrefetch(const simd_problem& pr, int64_t hk, int64_t kb_begin, int64_t j_end) {
  const int64_t D = pr.p->D;
  if (!pr.packed() && pr.prefetch) {
    const int64_t j_first = kb_begin * kSimdBk;
    const int64_t ahead = pr.pack_local ? kPackPrefetchKeys : kPrefetchKeys;
    for (int64_t j = j_first; j < std::min(j_end, j_first + ahead); ++j) {
      const char* vj = static_cast<const char*>(pr.vrow(j, hk));
      const char* kj = static_cast<const char*>(pr.krow(j, hk));
      const bool near = j < j_first + kPrefetchKeys;
      for (int64_t b = 0; b < D * kv_bytes(pr.kt); b += 64)
        near ? StreamPrefetch(kj + b) : PackStreamPrefetch(kj + b);
      for (int64_t b = 0; b < D * kv_bytes(pr.vt); b += 64)
        near ? StreamPrefetch(vj + b) : PackStreamPrefetch(vj + b);
    }
  }
}

// Step 1 of a key block: s(rows, ncols) = qs K_blk^T.
void BlockScores(const simd_problem& pr, simd_scratch& sc, int64_t hk, int64_t rows, int64_t kb,
                 int64_t nb, int64_t ncols, int64_t pf_end) {
  const int64_t D = pr.p->D, j0 = kb * pr.bk;
  const float* qs = sc.qs.data();
  const float* qc = sc.qc.data();
  float* s = sc.s.data();
  // 1. Q K^T: s(rows, ncols).
  if (pr.kT16) {  // bfloat16 pairs: s = scale * (q' . k') with float32 accumulation
    detail::bf16_gemm(rows, ncols, sc.qb.data(), pr.D2,
                      pr.kT16 + (hk * pr.nkb + kb) * pr.D2 * pr.bk * 2, pr.bk, s, pr.bk, pr.D2,
                      nullptr, pr.scale);
  } else if (pr.kT) {
    Gemm<a_layout::kChunked>(rows, ncols, qc, rows * kAChunk,
                             pr.kT + (hk * pr.nkb + kb) * D * kSimdBk, kSimdBk, s, kSimdBk, D,
                             nullptr, 1, PanelWidth());
  } else if (pr.pack_local) {
    // Transposed into scratch as it is read (prefetching kPrefetchKeys rows ahead), then the
    // same block product as the packed path.
    PackKeyBlock(pr, hk, kb, sc.kb.data(), sc.krows.data(), pr.ktab ? pr.tr : nullptr, pr.ktab,
                 pr.Rt, pf_end);
    Gemm<a_layout::kChunked>(rows, ncols, qc, rows * kAChunk, sc.kb.data(), kSimdBk, s, kSimdBk, D,
                             nullptr, 1, PanelWidth());
  } else if (pr.ktab) {
    // Hook 1's row form on the decode path: each key of the block widened and transformed into
    // scratch as it is read (the key and value rows kPrefetchKeys ahead prefetched here), then
    // the in-place path's dots over the scratch rows: the bits of a transformed copy of K,
    // without one (a decode step over S keys wrote and reread all S Hkv D of it).
    float* kr = sc.krot.data();
    const int64_t kbytes = D * kv_bytes(pr.kt), vb = D * kv_bytes(pr.vt);
    for (int64_t jj = 0; jj < nb; ++jj) {
      if (const int64_t jf = j0 + jj + kPrefetchKeys; jf < pf_end) {
        const char* kf = static_cast<const char*>(pr.krow(jf, hk));
        const char* vf = static_cast<const char*>(pr.vrow(jf, hk));
        for (int64_t b = 0; b < kbytes; b += 64) StreamPrefetch(kf + b);
        for (int64_t b = 0; b < vb; b += 64) StreamPrefetch(vf + b);
      }
      KeyRow(pr, j0 + jj, hk, kr + jj * D);
      pr.tr->apply_rows(pr.ktab + (j0 + jj) * pr.Rt, true, kr + jj * D, 1, D);
    }
    DecodeScores<false>(qs, rows, D, kr, static_cast<const char*>(pr.vrow(j0, hk)), 0, D, nb, j0, 0,
                        s);
  } else {
    // Key outer, row inner: each key row (one L1 set apart from the next, as for V) is used
    // by every row while it is in L1.
    const char* v0 = static_cast<const char*>(pr.vrow(j0, hk));
    const int64_t vbytes = pr.v_ld * kv_bytes(pr.vt);
    auto scores = [&](auto blk, const auto* k0) {
      DecodeScores<decltype(blk)::value>(qs, rows, D, k0, v0, vbytes, pr.k_ld, nb, j0, pf_end, s);
    };
    auto by_layout = [&](const auto* k0) {
      if (pr.k_blocked)
        scores(std::true_type{}, k0);
      else
        scores(std::false_type{}, k0);
    };
    switch (pr.kt) {
      case kv_storage::f32:
        by_layout(static_cast<const float*>(pr.krow(j0, hk)));
        break;
      case kv_storage::f16:
        by_layout(static_cast<const hwy::float16_t*>(pr.krow(j0, hk)));
        break;
      case kv_storage::bf16:
        by_layout(static_cast<const hwy::bfloat16_t*>(pr.krow(j0, hk)));
        break;
    }
  }
}

// Step 4 of a key block: acc = beta_r acc + p v_blk.
void BlockPV(const simd_problem& pr, simd_scratch& sc, int64_t hk, int64_t rows, int64_t j0,
             int64_t nb) {
  const int64_t D = pr.p->D, S = pr.p->S, Dp = pr.Dp;
  const float* s = sc.s.data();
  float* acc = sc.acc.data();
  const float* beta = sc.beta.data();
  if (pr.vP16) {  // bfloat16 products: p rounded to bfloat16, pairs of keys against vP16
    const int64_t nb2 = (nb + 1) / 2;  // an odd block's last column is a masked 0
    uint16_t* pb = sc.pb.data();
    const int64_t Bk = pr.bk;
    if (2 * nb2 == Bk)
      detail::bf16_round(s, pb, rows * Bk);
    else
      for (int64_t r = 0; r < rows; ++r) detail::bf16_round(s + r * Bk, pb + r * Bk, 2 * nb2);
    const int64_t kb = j0 / Bk;
    detail::bf16_gemm(rows, Dp, pb, Bk / 2, pr.vP16 + (hk * pr.nkb + kb) * Bk * Dp, Dp, acc, Dp,
                      nb2, beta, 1.0f);
    return;
  }
  // 4. P V with the rescale fused: acc = beta_r acc + p v_blk. The decode path (few rows: each
  // value row is used by one or two row strips) reads the rows in place, widened as they are
  // loaded, when they need no padding (D = Dp); otherwise they are packed into vb first. Items
  // of kPackRows rows or more run Gemm, fewer run DecodePV (the same bits either way).
  auto pv = [&](const auto* vb, int64_t ldv) {
    if (pr.kT || pr.pack_local)
      Gemm<a_layout::kChunked>(rows, Dp, s, kSimdBk, vb, ldv, acc, Dp, nb, beta);
    else
      DecodePV(rows, Dp, s, vb, ldv, acc, Dp, nb, beta);
  };
  if (pr.vP) {
    const int64_t ldv = vb_row(Dp);
    pv(pr.vP + (hk * S + j0) * ldv, ldv);
  } else if (!pr.kT && D == Dp) {
    switch (pr.vt) {
      case kv_storage::f32:
        pv(static_cast<const float*>(pr.vrow(j0, hk)), pr.v_ld);
        break;
      case kv_storage::f16:
        pv(static_cast<const hwy::float16_t*>(pr.vrow(j0, hk)), pr.v_ld);
        break;
      case kv_storage::bf16:
        pv(static_cast<const hwy::bfloat16_t*>(pr.vrow(j0, hk)), pr.v_ld);
        break;
    }
  } else {
    float* vb = sc.vb.data();
    const int64_t ldv = vb_row(Dp);
    for (int64_t jj = 0; jj < nb; ++jj) WidenRow(pr.vt, pr.vrow(j0 + jj, hk), vb + jj * ldv, D);
    pv(vb, ldv);
  }
}

// An item's end: the chunk's state for merge_item (part), or out and lse.
void ItemEnd(const simd_problem& pr, simd_scratch& sc, const item_rows& it, float* part) {
  const auto& p = *pr.p;
  const int64_t Hq = p.Hq, D = p.D, Dp = pr.Dp, C = pr.C, rows = it.rows;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float *acc = sc.acc.data(), *m = sc.m.data(), *l = sc.l.data(), *w = sc.w.data();
  const auto* rel = pr.rel;
  if (part) {  // split-K: the chunk's unnormalised state, merged by merge_item
    const int64_t pw = pr.part_row();
    for (int64_t r = 0; r < rows; ++r) {
      float* pr_row = part + r * pw;
      pr_row[0] = m[r];
      pr_row[1] = l[r];
      std::copy(acc + r * Dp, acc + (r + 1) * Dp, pr_row + 2);
      if (rel) std::copy(w + r * C, w + (r + 1) * C, pr_row + 2 + Dp);
    }
    return;
  }

  // Epilogue: normalise, add hook 3 (sum_j p_ij a^V_c = sum_c w_c a^V_c / l).
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = it.query(r), h = it.head(r);
    float* out = p.out + (i * Hq + h) * D;
    float inv, lse = 0.0f;
    if (!p.sinks.empty()) {
      sink_normalise(m[r], l[r], p.sinks[h], &inv, &lse);
    } else if (l[r] == 0.0f) {
      inv = 0.0f, lse = neg_inf;
    } else {
      inv = 1.0f / l[r];
      lse = m[r] + std::log(l[r]);
    }
    if (l[r] == 0.0f) {
      for (int64_t e = 0; e < D; ++e) out[e] = 0;
      if (p.lse) p.lse[i * Hq + h] = lse;
      continue;
    }
    const float* arow = acc + r * Dp;
    if (!rel) {  // one pass over out: the same product as the copy and the scaling below
      for (int64_t e = 0; e < D; ++e) out[e] = arow[e] * inv;
    } else {
      for (int64_t e = 0; e < D; ++e) out[e] = arow[e];
      const float* wrow = w + r * C;
      for (int64_t c = 0; c < C; ++c) {
        const float wc = wrow[c];
        if (wc == 0.0f) continue;
        const float* av = rel->values + c * D;
        for (int64_t e = 0; e < D; ++e) out[e] += wc * av[e];
      }
      for (int64_t e = 0; e < D; ++e) out[e] *= inv;
    }
    if (p.lse) p.lse[i * Hq + h] = lse;
  }
}

// One work item: kv head hk, queries [i0, i1) of the G heads that read it, keys [ja, jb) (a
// split-K chunk, block aligned; [0, S) when unsplit). Tile row r holds query head hk * G + r / nq
// and query i0 + r % nq. part == nullptr: writes out and lse; else the row's partial state
// (m, l, acc (Dp), w (C)) at part + r * pr.part_row(), for merge_item.
// One function on purpose: split into inline steps it ran 2-5% slower on prefill (T = S = 2048,
// no position) in 4 of 4 interleaved rounds on Zen 5, with bit-identical results.
// NOLINTNEXTLINE(readability-function-size)
void AttendItem(const simd_problem& pr, simd_scratch& sc, int64_t hk, int64_t i0, int64_t i1,
                int64_t ja, int64_t jb, float* part) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto& p = *pr.p;
  const auto& pl = *pr.pl;
  const int64_t T = p.T, S = p.S, C = pr.C;
  const item_rows it{hk, i0, i1 - i0, pl.group, pl.group * (i1 - i0)};
  const int64_t rows = it.rows;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* s = sc.s.data();
  float* m = sc.m.data();
  float* l = sc.l.data();
  float* beta = sc.beta.data();
  float* kadd = sc.kadd.data();
  float* qa = sc.qa.data();
  float* w = sc.w.data();
  int64_t* cidx = sc.c.data();
  const auto* rel = pr.rel;
  const auto& biases = pr.terms->biases;

  ItemBegin(pr, sc, it);

  // Key range any row may see by token index (causal and window rules).
  int64_t j_begin = 0, j_end = S;
  if (p.causal) j_end = std::clamp<int64_t>(S - T + i1, 0, S);
  if (p.window > 0) j_begin = std::clamp<int64_t>(S - T + i0 - p.window + 1, 0, S);
  // The chunk's share; the prefetch stays within it (a neighbouring chunk may be another
  // thread's item).
  j_begin = std::max(j_begin, ja);
  j_end = std::min(j_end, jb);
  const int64_t Bk = pr.bk;  // kSimdBk, or kBf16Bk for the bfloat16 products
  const int64_t kb_begin = j_begin / Bk;
  const int64_t pf_end = pr.prefetch ? j_end : 0;  // where the decode stream's prefetch stops
  ItemPrefetch(pr, hk, kb_begin, j_end);

  for (int64_t kb = kb_begin; kb * Bk < j_end; ++kb) {
    const int64_t j0 = kb * Bk, nb = std::min(Bk, S - j0);
    const int64_t ncols = (nb + N - 1) / N * N;
    BlockScores(pr, sc, hk, rows, kb, nb, ncols, pf_end);
    // Key-side masks of this block, shared by every row.
    bool block_pad = false;
    if (pr.any_key_pad) {
      for (int64_t jj = 0; jj < nb; ++jj) {
        kadd[jj] = pl.kvalid[j0 + jj] ? 0.0f : neg_inf;
        block_pad |= !pl.kvalid[j0 + jj];
      }
    }
    const bool docs = !pl.qdoc.empty();
    bool one_doc = true;
    if (docs)
      for (int64_t jj = 1; jj < nb; ++jj) one_doc &= pl.kdoc[j0 + jj] == pl.kdoc[j0];

    // 2. Score mod and 3. online softmax, row by row.
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = it.query(r), h = it.head(r);
      const int64_t qi = S - T + i, qp = pl.qpos[i];
      float* srow = s + r * Bk;
      // Visible key-index range [lo_j, hi_j) of this row within the block.
      int64_t lo_j = 0, hi_j = nb;
      if (p.causal) hi_j = std::min(hi_j, qi - j0 + 1);
      if (p.window > 0) lo_j = std::max(lo_j, qi - p.window + 1 - j0);
      bool none = !pl.qvalid[i] || lo_j >= hi_j;
      if (docs && one_doc && pl.kdoc[j0] != pl.qdoc[i]) none = true;
      if (none) {
        beta[r] = 1;  // the row's acc is unchanged; its probabilities are zero
        for (int64_t jj = 0; jj < ncols; ++jj) srow[jj] = 0;
        continue;
      }
      const int64_t* kp = pl.kpos.data() + j0 + lo_j;
      if (rel) {
        rel->index_row(qp, kp, hi_j - lo_j, cidx);
        for (int64_t jj = lo_j; jj < hi_j; ++jj) srow[jj] += qa[r * C + cidx[jj - lo_j]];
      }
      for (const auto& b : biases)
        bias_add_row(*b, pl, pr.kpos_contiguous, h, i, j0 + lo_j, hi_j - lo_j, srow + lo_j);
      // Masks: outside [lo_j, hi_j) (and the padded columns), pad keys, other documents.
      for (int64_t jj = 0; jj < lo_j; ++jj) srow[jj] = neg_inf;
      for (int64_t jj = hi_j; jj < ncols; ++jj) srow[jj] = neg_inf;
      if (block_pad)
        for (int64_t jj = 0; jj < ncols; jj += N)
          hn::StoreU(hn::Add(hn::LoadU(d, srow + jj), hn::LoadU(d, kadd + jj)), d, srow + jj);
      if (docs && !one_doc)
        for (int64_t jj = lo_j; jj < hi_j; ++jj)
          if (pl.kdoc[j0 + jj] != pl.qdoc[i]) srow[jj] = neg_inf;

      // Online softmax.
      auto vmax = hn::Set(d, neg_inf);
      for (int64_t jj = 0; jj < ncols; jj += N) vmax = hn::Max(vmax, hn::LoadU(d, srow + jj));
      const float mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
      const float m_new = std::max(m[r], mx);
      if (m_new == neg_inf) {  // nothing visible yet in this row (all keys masked)
        beta[r] = 1;
        for (int64_t jj = 0; jj < ncols; ++jj) srow[jj] = 0;
        continue;
      }
      // exp(-inf) = 0 on the first visible block; exp(0) = 1 exactly, without the call, while
      // the row's maximum holds (most blocks once it has settled).
      const float alpha = m_new == m[r] ? 1.0f : std::exp(m[r] - m_new);
      l[r] = alpha * l[r] + ExpRowInPlace(srow, ncols, m_new);  // masked: exactly 0
      m[r] = m_new;
      beta[r] = alpha;
      if (rel) {  // cidx still holds this row's table rows
        float* wrow = w + r * C;
        if (alpha != 1.0f)
          for (int64_t c = 0; c < C; ++c) wrow[c] *= alpha;
        for (int64_t jj = lo_j; jj < hi_j; ++jj) wrow[cidx[jj - lo_j]] += srow[jj];
      }
    }
    BlockPV(pr, sc, hk, rows, j0, nb);
  }

  ItemEnd(pr, sc, it, part);
}

// The thread body: takes items from the shared counter until none is left. Item n maps to key
// chunk n % nch, query block nqb - 1 - (n / nch) / Hkv (the heaviest causal blocks first) and kv
// head (n / nch) % Hkv; or, with head_fastest (split calls on token-major K and V, whose heads
// share each key's rows), to kv head n % Hkv, chunk (n / Hkv) % nch and query block
// nqb - 1 - (n / Hkv) / nch, so that the threads read the heads of one key range together
// (neighbouring bytes of the same pages) instead of one head's rows a page apart each. Which
// thread takes an item never changes its bits.
void AttendItems(const simd_problem& pr, simd_scratch& sc, std::atomic<int64_t>* next) {
  const auto& p = *pr.p;
  const int64_t work = p.Hkv * pr.nqb * pr.nch;
  for (;;) {
    const int64_t n = next->fetch_add(1, std::memory_order_relaxed);
    if (n >= work) return;
    int64_t ch, qb, hk;
    if (pr.head_fastest) {
      const int64_t g = n / p.Hkv;
      hk = n % p.Hkv;
      ch = g % pr.nch;
      qb = pr.nqb - 1 - g / pr.nch;
    } else {
      const int64_t g = n / pr.nch;
      ch = n % pr.nch;
      qb = pr.nqb - 1 - g / p.Hkv;
      hk = g % p.Hkv;
    }
    float* part = nullptr;
    int64_t ja = 0, jb = p.S;
    if (pr.nch > 1) {
      ja = ch * pr.chunk;
      jb = std::min(p.S, ja + pr.chunk);
      part = pr.part + ((qb * p.Hkv + hk) * pr.nch + ch) * pr.rows_max * pr.part_row();
    }
    AttendItem(pr, sc, hk, qb * pr.bq, std::min(p.T, (qb + 1) * pr.bq), ja, jb, part);
  }
}

// The granule the float32 row width Dp is rounded up to: 8 floats (4 with 128-bit vectors).
// The whole of a half-precision array widened (for hook 1's transformed copy of K).
void WidenRows(kv_storage st, const void* src, float* dst, int64_t n) {
  WidenRow(st, src, dst, n);
}

// Items [item_begin, item_end) of the (head, key block) pairs packed for bfloat16 products
// (simd_problem::kT16 and vP16), padding included: each key row as KeyRow reads it (widened, from
// rows or 8-key blocks), transformed by ktab's row form when given, rounded to bfloat16 (to
// nearest even; exact for values stored in bfloat16); each value row widened and rounded
// likewise.
void PackBf16(const simd_problem& pr, uint16_t* kT16, uint16_t* vP16, int64_t item_begin,
              int64_t item_end, const qk_transform* tr, const float* ktab, int64_t Rt) {
  const int64_t S = pr.p->S, D = pr.p->D, D2 = pr.D2, Dp = pr.Dp, nkb = pr.nkb;
  const int64_t B = pr.bk;
  std::vector<float> row(static_cast<size_t>(D));
  std::vector<uint16_t> r16(static_cast<size_t>(2 * D2), 0);  // an odd D's last slot stays 0
  for (int64_t item = item_begin; item < item_end; ++item) {
    const int64_t hk = item / nkb, j0 = item % nkb * B, nb = std::min(B, S - j0);
    uint16_t* kd = kT16 + item * D2 * B * 2;
    uint16_t* vd = vP16 + item * B * Dp;
    std::fill(kd, kd + D2 * B * 2, uint16_t{0});
    std::fill(vd, vd + B * Dp, uint16_t{0});
    for (int64_t jj = 0; jj < nb; ++jj) {
      const int64_t j = j0 + jj;
      KeyRow(pr, j, hk, row.data());
      if (ktab) tr->apply_rows(ktab + j * Rt, true, row.data(), 1, D);
      detail::bf16_round(row.data(), r16.data(), D);
      for (int64_t e2 = 0; e2 < D2; ++e2) {
        kd[(e2 * B + jj) * 2] = r16[2 * e2];
        kd[(e2 * B + jj) * 2 + 1] = r16[2 * e2 + 1];
      }
      WidenRow(pr.vt, pr.vrow(j, hk), row.data(), D);
      detail::bf16_round(row.data(), r16.data(), D);
      uint16_t* vt = vd + jj / 2 * Dp * 2 + jj % 2;
      for (int64_t e = 0; e < D; ++e) vt[2 * e] = r16[e];
    }
  }
}

// Whether this target is an AVX-512 one (the bfloat16 products run only under those, so that a
// forced narrower target, POSENC_SIMD_TARGET, keeps its float32 products).
bool TargetIsAvx3() {
  return HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL;
}

int64_t Lanes() {
  return static_cast<int64_t>(hn::Lanes(DH()));
}

// The block product for other callers (the backward pass): Gemm with ncols a multiple of 8.
void GemmExported(int64_t rows, int64_t ncols, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float* C, int64_t ldc, int64_t K, const float* beta, int64_t ak) {
  Gemm(rows, ncols, A, lda, B, ldb, C, ldc, K, beta, ak);
}

// The same with B packed in panels of PanelWidth() columns, each K x PanelWidth() contiguous.
void GemmPanelExported(int64_t rows, int64_t ncols, const float* A, int64_t lda, const float* B,
                       float* C, int64_t ldc, int64_t K, const float* beta) {
  Gemm(rows, ncols, A, lda, B, PanelWidth(), C, ldc, K, beta, 1, PanelWidth());
}

int64_t PanelWidthExported() {
  return PanelWidth();
}

// The backward's softmax step over one (rows x Bk) block, row r visible on keys
// [jlo[r], jhi[r]): P = SoftmaxExp(s - lse_r) (the forward's exponential), dS =
// P (dp - D_r); 0 elsewhere, and where |P| or |dS| is below FLT_MIN (no subnormals; see below). P
// may alias s and dS may alias dp.
void SoftmaxBackwardBlock(int64_t rows, float* s, float* dp, const int64_t* jlo, const int64_t* jhi,
                          const float* lse, const float* Drow) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // P and dS below 2^-126 (FLT_MIN) are taken as 0. Such values change no output: a row's
  // probabilities sum to 1, and dK, dV and dQ are sums of O(1) terms. But on Intel CPUs every
  // FMA of the dK, dV and dQ products that meets a subnormal operand or result takes a microcode
  // assist. ALiBi's distant keys fall in that band (s - lse between -104 and -87), and on an
  // Intel Xeon its backward at T = S = 2048 ran 3x slower than no position (6.6-6.9 s on one
  // thread; 2.3-2.7 s with the flush-to-zero bits set).
  const auto tiny = hn::Set(d, std::numeric_limits<float>::min());
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * kBwdBk;
    float* dr = dp + r * kBwdBk;
    const auto vl = hn::Set(d, lse[r]);
    const auto vD = hn::Set(d, Drow[r]);
    const auto lo1 = hn::Set(di, static_cast<int32_t>(jlo[r] - 1));
    const auto hi = hn::Set(di, static_cast<int32_t>(jhi[r]));
    for (int64_t j0 = 0; j0 < kBwdBk; j0 += N) {
      const auto idx = hn::Iota(di, static_cast<int32_t>(j0));
      const auto vis = hn::RebindMask(d, hn::And(hn::Gt(idx, lo1), hn::Lt(idx, hi)));
      // SoftmaxExp: never subnormal (0 for s - lse <= -87)
      const auto p = hn::IfThenElseZero(vis, SoftmaxExp(d, hn::Sub(hn::LoadU(d, sr + j0), vl)));
      auto ds = hn::Mul(p, hn::Sub(hn::LoadU(d, dr + j0), vD));
      ds = hn::IfThenZeroElse(hn::Lt(hn::Abs(ds), tiny), ds);
      hn::StoreU(p, d, sr + j0);
      hn::StoreU(ds, d, dr + j0);
    }
  }
}

float ExpRow(float* HWY_RESTRICT x, int64_t n, float m) {
  return ExpRowInPlace(x, n, m);
}

// row[j] += src[j] for j < n: one float32 add per element, in vectors, then the tail.
void AddRow(float* HWY_RESTRICT row, const float* HWY_RESTRICT src, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::Add(hn::LoadU(d, row + j), hn::LoadU(d, src + j)), d, row + j);
  for (; j < n; ++j) row[j] += src[j];
}

// FIRE's MLP over n keys: x[j] = psi[j] / pm, acc[j] = b2 + sum_u w2[u] max(0, w1[u] x[j] +
// b1[u]) for u = 0 .. m-1 in order, each operation rounded as the scalar loop rounds it (no fused
// multiply-add; Max(t, 0) gives +0 for t = -0 as std::max(0.0, t) does): the bits of FIRE's
// value() at every key.
void FireMlp(const double* HWY_RESTRICT psi, int64_t n, double pm, const double* HWY_RESTRICT w,
             int64_t m, double* HWY_RESTRICT acc) {
  const hn::ScalableTag<double> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vpm = hn::Set(d, pm), zero = hn::Zero(d), b2 = hn::Set(d, w[3 * m]);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto x = hn::Div(hn::LoadU(d, psi + j), vpm);
    auto a = b2;
    for (int64_t u = 0; u < m; ++u) {
      const auto t = hn::Max(hn::Add(hn::Mul(hn::Set(d, w[u]), x), hn::Set(d, w[m + u])), zero);
      a = hn::Add(a, hn::Mul(hn::Set(d, w[2 * m + u]), t));
    }
    hn::StoreU(a, d, acc + j);
  }
  for (; j < n; ++j) {
    const double x = psi[j] / pm;
    double a = w[3 * m];
    for (int64_t u = 0; u < m; ++u) a += w[2 * m + u] * std::max(0.0, w[u] * x + w[m + u]);
    acc[j] = a;
  }
}

// row[j] += float(c - src[j]): the difference in double, rounded once to float (DemoteTo rounds
// to nearest even, as the cast does), then added: the scalar loop's bits.
void AddDiffRow(float* HWY_RESTRICT row, double c, const double* HWY_RESTRICT src, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  const auto vc = hn::Set(dd, c);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto diff = hn::DemoteTo(df, hn::Sub(vc, hn::LoadU(dd, src + j)));
    hn::StoreU(hn::Add(hn::LoadU(df, row + j), diff), df, row + j);
  }
  for (; j < n; ++j) row[j] += static_cast<float>(c - src[j]);
}

// dst[j] = float(scale * double(src[j])) for j < n, returning the largest (-inf for n = 0): the
// product in double, rounded once (the scalar loop's bits).
float ScaleRowMax(float* HWY_RESTRICT dst, const float* HWY_RESTRICT src, double scale, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  const auto vs = hn::Set(dd, scale);
  auto vm = hn::Set(df, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto x = hn::DemoteTo(df, hn::Mul(vs, hn::PromoteTo(dd, hn::LoadU(df, src + j))));
    hn::StoreU(x, df, dst + j);
    vm = hn::Max(vm, x);
  }
  float m = hn::GetLane(hn::MaxOfLanes(df, vm));
  for (; j < n; ++j) {
    dst[j] = static_cast<float>(scale * double(src[j]));
    m = std::max(m, dst[j]);
  }
  return m;
}

// sum_d a[d] b[d] in double (each product exact) in the dispatched target's double vectors.
double DotF64(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  auto acc0 = hn::Zero(dd), acc1 = hn::Zero(dd);
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    acc0 = hn::MulAdd(hn::PromoteTo(dd, hn::LoadU(df, a + j)),
                      hn::PromoteTo(dd, hn::LoadU(df, b + j)), acc0);
    acc1 = hn::MulAdd(hn::PromoteTo(dd, hn::LoadU(df, a + j + N)),
                      hn::PromoteTo(dd, hn::LoadU(df, b + j + N)), acc1);
  }
  for (; j + N <= n; j += N)
    acc0 = hn::MulAdd(hn::PromoteTo(dd, hn::LoadU(df, a + j)),
                      hn::PromoteTo(dd, hn::LoadU(df, b + j)), acc0);
  double sum = hn::GetLane(hn::SumOfLanes(dd, hn::Add(acc0, acc1)));
  for (; j < n; ++j) sum += double(a[j]) * double(b[j]);
  return sum;
}

// y[j] += a x[j] in double (a fused multiply-add per element).
void AddScaledRow(double* HWY_RESTRICT y, double a, const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  const auto va = hn::Set(dd, a);
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::MulAdd(va, hn::PromoteTo(dd, hn::LoadU(df, x + j)), hn::LoadU(dd, y + j)), dd,
               y + j);
  for (; j < n; ++j) y[j] = std::fma(a, double(x[j]), y[j]);
}

// The largest of x[0 .. n) (n >= 1), in the dispatched target's float32 vectors.
float RowMax(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto vm = hn::Set(df, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + N <= n; j += N) vm = hn::Max(vm, hn::LoadU(df, x + j));
  float m = hn::GetLane(hn::MaxOfLanes(df, vm));
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// row[j] += float(alpha + gamma * p[j]): the product and the sum in double (no fused
// multiply-add, as the scalar loop), rounded once to float, then added: the scalar loop's bits.
void AddLinearRow(float* HWY_RESTRICT row, double alpha, double gamma, const double* HWY_RESTRICT p,
                  int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  const auto va = hn::Set(dd, alpha), vg = hn::Set(dd, gamma);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto b = hn::DemoteTo(df, hn::Add(va, hn::Mul(vg, hn::LoadU(dd, p + j))));
    hn::StoreU(hn::Add(hn::LoadU(df, row + j), b), df, row + j);
  }
  for (; j < n; ++j) row[j] += static_cast<float>(alpha + gamma * p[j]);
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace posenc::detail {
HWY_EXPORT(PackKeys);
HWY_EXPORT(PackBf16);
HWY_EXPORT(TargetIsAvx3);
HWY_EXPORT(WidenRows);
HWY_EXPORT(AttendItems);
HWY_EXPORT(AddDiffRow);
HWY_EXPORT(ScaleRowMax);
HWY_EXPORT(RowMax);
HWY_EXPORT(DotF64);
HWY_EXPORT(AddScaledRow);
HWY_EXPORT(FireMlp);
HWY_EXPORT(AddLinearRow);
HWY_EXPORT(Lanes);
HWY_EXPORT(GemmExported);
HWY_EXPORT(GemmPanelExported);
HWY_EXPORT(PanelWidthExported);
HWY_EXPORT(SoftmaxBackwardBlock);
HWY_EXPORT(ExpRow);
HWY_EXPORT(AddRow);

namespace {

// Split-K merge for item (kv head hk, query block qb): the nch chunk partials of each row in
// chunk order (the bits do not depend on which thread computed which chunk), then the unsplit
// epilogue. With M = max_c m_c and f_c = exp(m_c - M):
//   l = sum_c f_c l_c,  acc = sum_c f_c acc_c,  w = sum_c f_c w_c
//   out = (acc + w a^V) / l,  lse = M + log l   (zeros and -inf when l = 0)
// Each term passes through one more rescale than on the unsplit path, within the forward
// tolerance's one rescale per key block (a chunk is at least one block).
void merge_item(const simd_problem& pr, int64_t hk, int64_t qb, float* out_acc, float* out_w) {
  const auto& p = *pr.p;
  const int64_t Hq = p.Hq, D = p.D, Dp = pr.Dp, C = pr.C, G = pr.pl->group, nch = pr.nch;
  const int64_t i0 = qb * pr.bq, i1 = std::min(p.T, (qb + 1) * pr.bq), nq = i1 - i0;
  const int64_t rows = G * nq, pw = pr.part_row();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float* base = pr.part + (qb * p.Hkv + hk) * nch * pr.rows_max * pw;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r % nq, h = hk * G + r / nq;
    float M = neg_inf;
    for (int64_t c = 0; c < nch; ++c) {
      const float* pc = base + (c * pr.rows_max + r) * pw;
      if (pc[1] != 0.0f) M = std::max(M, pc[0]);
    }
    float* out = p.out + (i * Hq + h) * D;
    if (M == neg_inf) {  // the row sees no key
      for (int64_t e = 0; e < D; ++e) out[e] = 0;
      if (p.lse) p.lse[i * Hq + h] = p.sinks.empty() ? neg_inf : p.sinks[h];
      continue;
    }
    float l = 0;
    std::fill(out_acc, out_acc + Dp, 0.0f);
    std::fill(out_w, out_w + C, 0.0f);
    for (int64_t c = 0; c < nch; ++c) {
      const float* pc = base + (c * pr.rows_max + r) * pw;
      if (pc[1] == 0.0f) continue;  // nothing visible in the chunk (its m may be -inf)
      const float f = std::exp(pc[0] - M);
      l += f * pc[1];
      for (int64_t e = 0; e < Dp; ++e) out_acc[e] += f * pc[2 + e];
      for (int64_t cc = 0; cc < C; ++cc) out_w[cc] += f * pc[2 + Dp + cc];
    }
    float inv = 1.0f / l, lse = 0.0f;
    if (!p.sinks.empty())
      sink_normalise(M, l, p.sinks[h], &inv, &lse);
    else
      lse = M + std::log(l);
    for (int64_t e = 0; e < D; ++e) out[e] = out_acc[e];
    if (pr.rel)
      for (int64_t cc = 0; cc < C; ++cc) {
        const float wc = out_w[cc];
        if (wc == 0.0f) continue;
        const float* av = pr.rel->values + cc * D;
        for (int64_t e = 0; e < D; ++e) out[e] += wc * av[e];
      }
    for (int64_t e = 0; e < D; ++e) out[e] *= inv;
    if (p.lse) p.lse[i * Hq + h] = lse;
  }
}

// The call's problem without hook 1: K and V strides and storage, the scale, the padded row
// width Dp, the key blocks, the query blocks of kSimdRows tile rows, the key-side flags and the
// position terms.
void init_problem(simd_problem& pr, const attention_params<float>& p, const attention_plan& pl,
                  const engine_terms<float>& terms) {
  const int64_t T = p.T, S = p.S, Hkv = p.Hkv, D = p.D;
  pr.p = &p;
  pr.pl = &pl;
  pr.q = p.q;
  pr.qt = p.q_storage;
  pr.q16 = p.q16;
  pr.D2 = (p.D + 1) / 2;
  pr.k = p.k;
  pr.v = p.v;
  pr.kt = pr.vt = p.kv;
  if (p.kv_head_stride > 0) {
    pr.k_ld = pr.v_ld = D;
    pr.k_hs = pr.v_hs = p.kv_head_stride;
    pr.prefetch = POSENC_PF_CONTIG;
    pr.k_blocked = p.k_blocked;
  } else {
    pr.k_ld = pr.v_ld = Hkv * D;
    pr.k_hs = pr.v_hs = D;
  }
  pr.k16 = p.k16;
  pr.v16 = p.v16;
  pr.scale = static_cast<float>(pl.scale);
  const int64_t N = HWY_DYNAMIC_DISPATCH(Lanes)();
  pr.Dp = (D + N - 1) / N * N;
  pr.nkb = (S + kSimdBk - 1) / kSimdBk;
  const int64_t G = pl.group;
  pr.bq = std::max<int64_t>(1, kSimdRows / G);
  pr.nqb = (T + pr.bq - 1) / pr.bq;

  for (int64_t j = 0; j < S; ++j) {
    pr.kpos_contiguous &= pl.kpos[j] == j;
    pr.any_key_pad |= !pl.kvalid[j];
  }
  pr.terms = &terms;
  if (terms.relative) {
    pr.rel = terms.relative.get();
    pr.C = pr.rel->C;
  }
}

// How the call runs, by shape only (the tiling changes no bit).
struct simd_tiling {
  bool pack = false;  // K transposed and V packed once for the whole call (prefill)
  int64_t rows = 0;   // tile rows per item (at most)
  int nth = 1;        // threads
};

// Split-K or packed, the query block size and the thread count; sets pr's bq, nqb, chunk, nch,
// head_fastest, rows_max and pack_local.
simd_tiling plan_tiling(simd_problem& pr, int max_threads) {
  const auto& p = *pr.p;
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D, G = pr.pl->group;
  simd_tiling t;
  t.rows = G * std::min(pr.bq, T);
  // Threads only pay off above ~1M multiply-adds (see attention.cpp).
  const double flops = double(Hq) * double(T) * double(std::max<int64_t>(S, 1)) * double(D);
  const int64_t by_work = std::max<int64_t>(1, static_cast<int64_t>(flops / double(1 << 20)));
  // Split-K (flash-decoding) for decode-like calls: chunks of SplitChunk keys, by shape only.
  // Few tile rows per item (decode with little or no grouping), or few items (decode and short
  // speculative steps with many query heads per kv head).
  const bool split = (t.rows < 16 || Hkv * pr.nqb < kSplitItems) && S > kSplitKeysMin;
  if (split) {
    pr.chunk = SplitChunk(Hkv * pr.nqb, S);
    pr.nch = (S + pr.chunk - 1) / pr.chunk;
  }
  pr.head_fastest = POSENC_HEAD_FAST && pr.nch > 1 && p.kv_head_stride == 0;
  // Packed: K transposed (and V packed) once for the whole call (prefill). Split calls read K in
  // place, each item packing its own blocks when it has kPackRows rows or more.
  t.pack = !split && t.rows >= 16 && S > 0;
  // Packed calls stream every key and value block of a head once per item: larger tiles
  // (more query rows per block read) cut that stream, which on a CPU with little L3 bandwidth
  // per core bounds the block products. By shape only: the tiling changes no bit (each row's
  // key blocks, order and arithmetic are the same in any tile).
  if (t.pack) {
    while (G * pr.bq * 2 <= kPackTileRows && pr.bq < T &&
           Hkv * ((T + 2 * pr.bq - 1) / (2 * pr.bq)) >= kMinPackItems)
      pr.bq *= 2;
    pr.nqb = (T + pr.bq - 1) / pr.bq;
    t.rows = G * std::min(pr.bq, T);
  }
  pr.rows_max = t.rows;
  const int64_t work = Hkv * pr.nqb * pr.nch;
  t.nth = static_cast<int>(std::min<int64_t>({max_threads, work, by_work}));
  pr.pack_local = !t.pack && t.rows >= kPackRows && S > 0;
  return t;
}

// Hook 1's buffers: transformed copies of q and K, or the per-position row tables.
struct hook1_buffers {
  std::vector<float> q_t, k_t, qtab, ktab;
  bool fuse_k = false;  // K's tables applied as the keys are packed (ktab)
};

// A float32 copy of K in token-major order (S, Hkv, D), widened from half-precision storage and
// gathered from head-major or blocked layouts, for hook 1's transformed copy.
void widen_keys(const simd_problem& pr, std::vector<float>& k_t) {
  const auto& p = *pr.p;
  const int64_t S = p.S, Hkv = p.Hkv, D = p.D;
  k_t.resize(static_cast<size_t>(S * Hkv * D));
  if (p.kv_head_stride == 0) {
    HWY_DYNAMIC_DISPATCH(WidenRows)(pr.kt, pr.krow(0, 0), k_t.data(), S * Hkv * D);
  } else if (!pr.k_blocked) {  // gathered into token-major order, the layout tr->apply takes
    for (int64_t j = 0; j < S; ++j)
      for (int64_t hk = 0; hk < Hkv; ++hk) HWY_DYNAMIC_DISPATCH(WidenRows)
    (pr.kt, pr.krow(j, hk), k_t.data() + (j * Hkv + hk) * D, D);
  } else {  // the same from 8-key blocks (k_index), widened exactly
    for (int64_t j = 0; j < S; ++j)
      for (int64_t hk = 0; hk < Hkv; ++hk)
        for (int64_t e = 0; e < D; ++e) {
          const int64_t y = k_index(p, j, hk, e);
          k_t[(j * Hkv + hk) * D + e] =
              pr.kt == kv_storage::f32 ? p.k[y] : half_to_float(pr.kt, p.k16[y]);
        }
  }
}

// Hook 1. With a row form (RoPE): per-position tables, applied to q rows as each item loads
// them and to key rows as they are packed, or, on the decode path, which reads K in place, as
// each block's rows are read; no transformed copy of q or K. Without one: transformed copies.
void prepare_transform(simd_problem& pr, const engine_terms<float>& terms, bool pack,
                       hook1_buffers& b) {
  const auto& p = *pr.p;
  const auto& pl = *pr.pl;
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const qk_transform* tr = terms.transform.get();
  const int64_t Rt = tr ? tr->row_table_size() : 0;
  const bool map_k = tr && !tr->keys_transformed && S > 0;
  auto fill_tables = [&](std::vector<float>& tab, const std::vector<int64_t>& pos, bool key) {
    tab.resize(static_cast<size_t>(static_cast<int64_t>(pos.size()) * Rt));
    parallel_for(
        static_cast<int64_t>(pos.size()),
        [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) tr->fill_row_table(t, pos[t], key, tab.data() + t * Rt);
        },
        16);
  };
  if (tr && Rt > 0) {
    pr.tr = tr;
    pr.Rt = Rt;
    fill_tables(b.qtab, pl.qpos_safe, false);
    pr.qtab = b.qtab.data();
  } else if (tr) {
    if (pr.q16) {
      b.q_t.resize(static_cast<size_t>(T * Hq * D));
      HWY_DYNAMIC_DISPATCH(WidenRows)(pr.qt, pr.q16, b.q_t.data(), T * Hq * D);
    } else {
      b.q_t.assign(p.q, p.q + T * Hq * D);
    }
    tr->apply(pl.qpos_safe, b.q_t.data(), T, Hq, D, false, false);
    pr.q = b.q_t.data();
    pr.q16 = nullptr;
    pr.qt = kv_storage::f32;
  }
  b.fuse_k = map_k && Rt > 0;
  if (b.fuse_k) {
    fill_tables(b.ktab, pl.kpos_safe, true);
    if (!pack) pr.ktab = b.ktab.data();  // applied per block: pack_local's packing, decode's rows
  } else if (map_k) {                    // a float32 copy, widened from half-precision storage
    widen_keys(pr, b.k_t);
    pr.k_ld = Hkv * D;
    pr.k_hs = D;
    pr.k_blocked = false;
    tr->apply(pl.kpos_safe, b.k_t.data(), S, Hkv, D, true, false);
    pr.k = b.k_t.data();
    pr.kt = kv_storage::f32;
  }
}

// The packed arrays of a packed call, both in huge pages (the block products stream a new
// 4 KiB page every 1024 floats of them): the transposed key blocks kT (Hkv, nkb, D, Bk), one
// pass over K shared by every query block (decode-like calls read K in place instead), and the
// value rows vP (Hkv, S, vb_row(Dp)), which every query block of a head reads (per-item packing
// copied them once per query block, in the (S, Hkv, D) layout from rows a page apart).
void pack_kv(simd_problem& pr, const engine_terms<float>& terms, const hook1_buffers& b,
             page_buffer<float>& kT, page_buffer<float>& vP, page_buffer<uint16_t>& kv16) {
  const int64_t S = pr.p->S, Hkv = pr.p->Hkv, D = pr.p->D;
  const qk_transform* tr = terms.transform.get();
  const int64_t Rt = tr ? tr->row_table_size() : 0;
  if (pr.bf16) {  // bfloat16 pairs for vdpbf16ps: kT16 then vP16 in one buffer
    const int64_t kn = Hkv * pr.nkb * pr.D2 * pr.bk * 2, vn = Hkv * pr.nkb * pr.bk * pr.Dp;
    // Up to kKeptBytes, kept by the calling thread for its next call (PackBf16 writes every
    // element, padding included): a fresh buffer per call cost its page faults and first
    // touch, 4-8% of a T = S = 2048 prefill (8 MiB; perf on a Zen 5 EPYC). Larger calls, whose
    // O(S^2) work dwarfs the O(S) first touch, allocate per call and keep nothing.
    constexpr size_t kKeptBytes = size_t{64} << 20;
    static thread_local page_buffer<uint16_t> kept;
    const size_t n = static_cast<size_t>(kn + vn);
    page_buffer<uint16_t>& buf = n * sizeof(uint16_t) <= kKeptBytes ? kept : kv16;
    if (buf.size() < n) buf = page_buffer<uint16_t>(n);
    uint16_t* k16 = buf.data();
    uint16_t* v16 = buf.data() + kn;
    parallel_for(Hkv * pr.nkb, [&](int64_t b0, int64_t e) {
      HWY_DYNAMIC_DISPATCH(PackBf16)
      (pr, k16, v16, b0, e, b.fuse_k ? tr : nullptr, b.fuse_k ? b.ktab.data() : nullptr, Rt);
    });
    pr.kT16 = k16;
    pr.vP16 = v16;
    return;
  }
  kT = page_buffer<float>(static_cast<size_t>(Hkv * pr.nkb * D * kSimdBk));
  parallel_for(Hkv * pr.nkb, [&](int64_t b0, int64_t e) {
    HWY_DYNAMIC_DISPATCH(PackKeys)
    (pr, kT.data(), b0, e, b.fuse_k ? tr : nullptr, b.fuse_k ? b.ktab.data() : nullptr, Rt);
  });
  pr.kT = kT.data();
  const int64_t ldv = vb_row(pr.Dp);
  vP = page_buffer<float>(static_cast<size_t>(Hkv * S * ldv));
  parallel_for(
      Hkv * S,
      [&](int64_t b0, int64_t e) {
        for (int64_t x = b0; x < e; ++x) {
          const int64_t hk = x / S, j = x % S;
          float* dst = vP.data() + x * ldv;
          HWY_DYNAMIC_DISPATCH(WidenRows)(pr.vt, pr.vrow(j, hk), dst, D);  // padding: zero
        }
      },
      64);
  pr.vP = vP.data();
}

// Per-thread scratch for items of up to `rows` tile rows, every buffer zeroed as if new, in
// `scratch` (the calling thread's, kept between calls: its memory is reused rather than
// allocated, faulted in and given back each call, which cost a decode step in cache about 30% of
// its time; docs/decisions.md, "Decode: key pairs in 16-lane vectors"). A buffer not needed is
// emptied but keeps its capacity.
void make_scratch(const simd_problem& pr, int64_t rows, int nth,
                  std::vector<simd_scratch>& scratch) {
  const int64_t D = pr.p->D;
  scratch.resize(static_cast<size_t>(nth));
  auto zeroed = [](auto& v, int64_t n) { v.assign(static_cast<size_t>(n), 0); };
  for (auto& sc : scratch) {
    zeroed(sc.qs, rows * D);
    zeroed(sc.qc, pr.kT || pr.pack_local ? rows * ((D + kAChunk - 1) / kAChunk) * kAChunk : 0);
    zeroed(sc.s, rows * pr.bk);
    zeroed(sc.acc, rows * pr.Dp);
    zeroed(sc.m, rows);
    zeroed(sc.l, rows);
    zeroed(sc.beta, rows);
    zeroed(sc.kadd, pr.bk);
    zeroed(sc.qa, rows * pr.C);
    zeroed(sc.w, rows * pr.C);
    zeroed(sc.c, pr.bk);
    // Zero once: the packing writes columns [0, D) only, so the padding to Dp stays zero.
    zeroed(sc.vb, kSimdBk * vb_row(pr.Dp));
    zeroed(sc.kb, pr.pack_local ? D * kSimdBk : 0);
    zeroed(sc.krows, pr.pack_local ? 8 * D : 0);
    zeroed(sc.krot, pr.ktab && !pr.kT && !pr.pack_local ? pr.bk * D : 0);
    zeroed(sc.qb, pr.kT16 ? rows * 2 * pr.D2 : 0);
    zeroed(sc.pb, pr.kT16 ? rows * pr.bk : 0);
  }
}

}  // namespace

void attention_simd_f32(const attention_params<float>& p, const attention_plan& pl,
                        const engine_terms<float>& terms, int max_threads) {
  simd_problem pr;
  init_problem(pr, p, pl, terms);
  const simd_tiling t = plan_tiling(pr, max_threads);
  const int64_t Hkv = p.Hkv;
  // The split-K partial states (zero: a chunk no item visits reads as empty) and the threads'
  // scratch, kept by the calling thread for its next call up to kKeptPart floats.
  constexpr size_t kKeptPart = size_t{16} << 20;
  thread_local std::vector<float> part_kept;
  thread_local std::vector<simd_scratch> scratch_kept;
  std::vector<float> part_big;
  if (pr.nch > 1) {
    const size_t n = static_cast<size_t>(Hkv * pr.nqb * pr.nch * t.rows * pr.part_row());
    std::vector<float>& part = n <= kKeptPart ? part_kept : part_big;
    part.assign(n, 0.0f);
    pr.part = part.data();
  }
  hook1_buffers h1;
  prepare_transform(pr, terms, t.pack, h1);
  pr.bf16 = t.pack && p.products == attention_products::bf16 && attention_bf16_native();
  if (pr.bf16) {
    pr.bk = kBf16Bk;
    pr.nkb = (p.S + kBf16Bk - 1) / kBf16Bk;
  }
  page_buffer<float> kT, vP;
  page_buffer<uint16_t> kv16;  // bfloat16 products above the kept size
  if (t.pack) pack_kv(pr, terms, h1, kT, vP, kv16);

  std::vector<simd_scratch>& scratch = scratch_kept;
  make_scratch(pr, t.rows, t.nth, scratch);
  const int nth = t.nth;
  std::atomic<int64_t> next{0};
  parallel_for(nth, [&](int64_t t0, int64_t t1) {
    for (int64_t th = t0; th < t1; ++th) HWY_DYNAMIC_DISPATCH(AttendItems)(pr, scratch[th], &next);
  });
  if (pr.nch > 1) {
    const int64_t groups = Hkv * pr.nqb;
    // A thread's acc (rows * Dp >= Dp) and w (rows * C >= C) scratch holds one merged row.
    parallel_for(nth, [&](int64_t t0, int64_t t1) {
      for (int64_t th = t0; th < t1; ++th) {
        const auto [b, e] = thread_range(groups, static_cast<int>(th), nth);
        for (int64_t g = b; g < e; ++g)
          merge_item(pr, g % Hkv, g / Hkv, scratch[th].acc.data(), scratch[th].w.data());
      }
    });
  }
}

bool attention_bf16_native_impl() {
  static const bool ok = bf16_dot_cpu() && HWY_DYNAMIC_DISPATCH(TargetIsAvx3)();
  return ok;
}

void gemm_f32(int64_t rows, int64_t ncols, const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc, int64_t K, const float* beta, int64_t ak) {
  if (rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmExported)(rows, ncols, A, lda, B, ldb, C, ldc, K, beta, ak);
}

void softmax_backward_block_f32(int64_t rows, float* s, float* dp, const int64_t* jlo,
                                const int64_t* jhi, const float* lse, const float* Drow) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardBlock)(rows, s, dp, jlo, jhi, lse, Drow);
}

void gemm_f32_panel(int64_t rows, int64_t ncols, const float* A, int64_t lda, const float* B,
                    float* C, int64_t ldc, int64_t K, const float* beta) {
  if (rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmPanelExported)(rows, ncols, A, lda, B, C, ldc, K, beta);
}

int64_t gemm_panel_width() {
  return HWY_DYNAMIC_DISPATCH(PanelWidthExported)();
}

float exp_row_f32(float* x, int64_t n, float m) {
  return n > 0 ? HWY_DYNAMIC_DISPATCH(ExpRow)(x, n, m) : 0.0f;
}

void add_row_f32(float* row, const float* src, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AddRow)(row, src, n);
}

void add_diff_row_f32(float* row, double c, const double* src, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AddDiffRow)(row, c, src, n);
}

float scale_row_max_f32(float* dst, const float* src, double scale, int64_t n) {
  return n > 0 ? HWY_DYNAMIC_DISPATCH(ScaleRowMax)(dst, src, scale, n)
               : -std::numeric_limits<float>::infinity();
}

void add_scaled_row_f64(double* y, double a, const float* x, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AddScaledRow)(y, a, x, n);
}

double dot_f64(const float* a, const float* b, int64_t n) {
  return n > 0 ? HWY_DYNAMIC_DISPATCH(DotF64)(a, b, n) : 0.0;
}

float row_max_f32(const float* x, int64_t n) {
  return n > 0 ? HWY_DYNAMIC_DISPATCH(RowMax)(x, n) : -std::numeric_limits<float>::infinity();
}

void fire_mlp_f64(const double* psi, int64_t n, double pm, const double* w, int64_t m,
                  double* acc) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(FireMlp)(psi, n, pm, w, m, acc);
}

void add_linear_row_f32(float* row, double alpha, double gamma, const double* p, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AddLinearRow)(row, alpha, gamma, p, n);
}

}  // namespace posenc::detail
#endif  // HWY_ONCE
