// posenc/encodings/learned.hpp: a learned absolute position table.
//
// BERT / GPT-2 style: a trainable matrix P of shape (N, d); position i reads row i, and the
// model input is h_i = E(token_i) + P(i) (added, not concatenated, so the width stays d and
// position and content share the same channels). There is no row for i >= N: a learned table
// cannot say anything about positions it never had a row for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc {

struct learned_table {
  int64_t rows = 0, width = 0;
  std::vector<float> weights;  // (rows, width) row-major, width contiguous
};

// Largest rows * width accepted by learned_init / learned_load is bounded by max_alloc_bytes.
// rows >= 1, width >= 1, stddev finite and >= 0 (else invalid_argument naming the argument).
// Entries are N(0, stddev^2) drawn in row-major order from posenc::rng(seed).normal(): the same
// seed gives the same table on every run and platform.
learned_table learned_init(int64_t rows, int64_t width, uint64_t seed, double stddev = 0.02);

// out[n, :] = t.weights[positions[n], :]. out: (N, width), N = positions.size().
// Throws invalid_argument: a negative position, or one >= rows ("position 1024 is outside the
// learned table: it has 1024 rows (positions 0..1023); no embedding exists there"), or
// out.size() != N * width, or a table whose weights.size() != rows * width.
void learned_lookup(const learned_table& t, std::span<const int64_t> positions,
                    std::span<float> out);
// Backward of learned_lookup: forward is `out[n, :] = P[positions[n], :]`, so
// dP[positions[n], :] += grad_out[n, :] (accumulates; repeated positions sum). grad_out:
// (N, width). grad_table must have the shape of the table (rows, width). Same errors.
void learned_lookup_backward(std::span<const float> grad_out, std::span<const int64_t> positions,
                             learned_table& grad_table);

// h_i = E(token_i) + P(pos_i). token_embeddings, out: (N, width); out may alias
// token_embeddings. Errors as learned_lookup plus size mismatch of token_embeddings.
void add_positions(std::span<const float> token_embeddings, const learned_table& t,
                   std::span<const int64_t> positions, std::span<float> out);

// File format (little-endian), written atomically:
//   offset 0   8 bytes  magic "PSNCLRN\0"
//          8   u32      version (1)
//         12   u32      dtype (1 = float32)
//         16   i64      rows
//         24   i64      width
//         32   u32      CRC-32 (posenc::crc32) of the payload
//         36   u32      CRC-32 of bytes 0..35 (the header itself)
//         40   payload  rows * width float32, row-major
// Total size is exactly 40 + 4 * rows * width.
inline constexpr uint32_t learned_file_version = 1;
void learned_save(const std::string& path, const learned_table& t);
// Throws io_error naming the path and what is wrong: unreadable, shorter than the header, bad
// magic, unsupported version or dtype, header checksum mismatch, non-positive or oversized
// shape, size not matching the shape (truncated or trailing bytes), payload checksum mismatch.
learned_table learned_load(const std::string& path);
// The same format in memory; `name` is used in error messages in place of the path.
std::vector<std::byte> learned_serialize(const learned_table& t);
learned_table learned_parse(std::span<const std::byte> bytes, const std::string& name);

}  // namespace posenc
