// posenc/positions/positions.hpp: the single owner of "which position is this token".
//
// Every position scheme (sinusoidal and learned tables, RoPE, ALiBi, T5, Shaw) consumes integer
// position ids; this layer derives them from how the tokens arrived:
//
//   fresh sequence           p_t = start + t                        t = 0..T-1
//   continuation after P     p_t = P + t        (generation with a KV cache: the seeds warn that
//                                                resetting new tokens to 0 changes their relation
//                                                to cached keys)
//   padded batch (B, T)      real tokens of each row get start, start+1, ... in order, pad slots
//                            get pad_position (-1); a pad never consumes or shifts a position, so
//                            left padding, right padding and interior holes all give the same ids
//                            to the real tokens as the unpadded row
//   packed documents         positions restart at `start` in each document (cu_seqlens or
//                            per-token document ids); start = padding_idx + 1 reproduces RoBERTa
//
// All functions validate their arguments at this boundary and throw posenc::invalid_argument
// naming the argument; none of them guesses.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace posenc {

// Position id given to padding slots. Never a valid position (all real ids are >= 0), so any
// consumer that sees it knows the slot carries no meaningful position.
inline constexpr int64_t pad_position = -1;

// Fresh sequence: (T,) ids start, start+1, ..., start+T-1.
// Requires T >= 0, start >= 0 and start + T <= 2^62 (so differences of ids never overflow).
std::vector<int64_t> positions_fresh(int64_t T, int64_t start = 0);

// Continuation after a cached prefix of length P: (T,) ids P, P+1, ..., P+T-1.
// Same as positions_fresh(T, P); named separately so call sites say what they mean.
std::vector<int64_t> positions_continuation(int64_t prefix_len, int64_t T);

// Padded batch: mask is (B, T) row-major, nonzero = real token, 0 = pad. Returns (B, T) ids:
// the k-th real token of a row (k = 0, 1, ...) gets start + k; pad slots get pad_position.
//   mask [0 0 1 1 1]  ->  [-1 -1 0 1 2]     (left padded)
//   mask [1 1 1 0 0]  ->  [ 0  1 2 -1 -1]   (right padded)
// Requires mask.size() == B * T, B >= 0, T >= 0, start >= 0.
std::vector<int64_t> positions_from_mask(std::span<const uint8_t> mask, int64_t B, int64_t T,
                                         int64_t start = 0);

// Validates cu_seqlens (cumulative document lengths, e.g. 0,5,12): at least one entry, first 0,
// non-decreasing, last == total. Empty documents are allowed. `arg` names the argument in errors.
void validate_cu_seqlens(std::span<const int64_t> cu_seqlens, int64_t total,
                         const char* arg = "cu_seqlens");

// Per-token document ids (total,) from cu_seqlens: token t belongs to document d when
// cu[d] <= t < cu[d+1]. Validates as above with total = cu_seqlens.back().
std::vector<int64_t> doc_ids_from_cu_seqlens(std::span<const int64_t> cu_seqlens);

// Packed documents from cu_seqlens: ids restart at `start` at every document boundary.
//   cu_seqlens 0,3,5, start 0  ->  [0 1 2 0 1]
//   cu_seqlens 0,3,5, start 2  ->  [2 3 4 2 3]   (RoBERTa: padding_idx 1, start = 2)
std::vector<int64_t> positions_packed(std::span<const int64_t> cu_seqlens, int64_t start = 0);

// Packed documents from per-token document ids: a new document starts wherever the id differs
// from the previous token's id (ids need not be sorted or distinct across non-adjacent runs,
// matching position-reset packing). Ids must be >= 0 (a negative id is rejected rather than
// silently treated as padding).
//   doc_ids [7 7 7 2 2]  ->  [0 1 2 0 1]
std::vector<int64_t> positions_packed_from_doc_ids(std::span<const int64_t> doc_ids,
                                                   int64_t start = 0);

// M-RoPE position ids (Wang et al. 2024, "Qwen2-VL", section 2.1; the convention of
// transformers' get_rope_index) for a sequence of text runs and images. Each segment is
// `text` text tokens followed by an image of grid (t, h, w) tokens (t = 0: no image; the grid is
// in language-model tokens, i.e. after the vision merger). With `next` = start, then one past
// the largest id so far:
//   a text token gets (next, next, next) and next += 1;
//   image token (a, b, c) (a-major, then b, then c) gets (next + a, next + b, next + c), and
//   then next += max(h, w) (rule transformers_v5, the default) or max(t, h, w) (rule
//   transformers_v4).
// The two rules differ only for a video whose temporal extent t exceeds max(h, w): transformers
// 4.x started the text after it one past its largest id, next + max(t, h, w); transformers 5
// (PR #43972; main c49429ed, 2026-08) advances by max(h, w) only, so the temporal ids of such a
// video overlap the text after it. Images (t = 1) get the same ids under both.
// Returns (3, n) row-major: row 0 temporal, 1 height, 2 width, n = sum of text + t h w.
//   segments {text 2, image (1, 2, 3)}, {text 1}  ->
//     t: 0 1 2 2 2 2 2 2 5
//     h: 0 1 2 2 2 3 3 3 5
//     w: 0 1 2 3 4 2 3 4 5
// Requires text >= 0, t, h, w >= 0 and all three 0 or all three >= 1, start >= 0, and at most
// 2^31 tokens in all.
struct mrope_segment {
  int64_t text = 0;             // text tokens before the image
  int64_t t = 0, h = 0, w = 0;  // image grid (0, 0, 0: none)
};
enum class mrope_rule { transformers_v5, transformers_v4 };
const char* mrope_rule_name(mrope_rule r);  // "transformers_v5", "transformers_v4"
// Parses a rule name ("transformers_v5" or "v5", "transformers_v4" or "v4"); arg names it in
// the error.
mrope_rule mrope_rule_from_name(const std::string& name, const char* arg);
std::vector<int64_t> positions_mrope(std::span<const mrope_segment> segments, int64_t start = 0,
                                     mrope_rule rule = mrope_rule::transformers_v5);

// Validates caller-given position ids: (n,) with every id >= 0 or (if allow_pad) == pad_position,
// and |id| <= 2^62. `arg` names the argument in errors.
void validate_positions(std::span<const int64_t> positions, int64_t n, const char* arg,
                        bool allow_pad = false);

}  // namespace posenc
