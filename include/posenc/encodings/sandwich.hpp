// posenc/encodings/sandwich.hpp: Sandwich (Chi et al. 2023, "Dissecting Transformer Length
// Extrapolation via the Lens of Receptive Field Analysis", ACL 2023, sec. 5), a parameter-free
// relative score bias made of the sinusoidal embedding (Vaswani et al. 2017).
//
// With p_m the sinusoidal embedding of dimension d' at position m, frequencies
// w_i = 10000^(-2i / d') for i = 1 .. d'/2, the inner product of two embeddings depends on the
// offset alone (the seeds' property of sinusoidal tables: sin a sin b + cos a cos b = cos(a - b)):
//   p_m . p_n = sum_{i=1}^{d'/2} cos((m - n) w_i)
// Sandwich adds it to the attention scores, shifted so that offset 0 gets 0, and compressed per
// head with ALiBi's ratios (head h = 0 .. H-1 of H):
//   bias_h(m, n) = (p_m . p_n - d'/2) / r_h,   r_h = 8 (h + 1) / H
// so that -d' / r_h <= bias_h <= 0, with 0 at offset 0; symmetric in m and n (cos is even).
// The frequency index runs from 1 to d'/2 as in NeMo's SandwichRelativePositionEmbedding (held
// against it: tests/golden/nemo/sandwich.json); an earlier NeMo version summed the angles
// (m - n) w_i without the cosine, which is neither bounded nor symmetric: posenc checks both.
#pragma once

#include <cstdint>
#include <vector>

namespace posenc {

// p_m . p_n for m - n = offset, in double: each angle offset * w_i rounded once (offset is exact
// as a double up to 2^53), then cos. dim = d', even, in [2, 2^20].
double sandwich_inner(int64_t offset, int64_t dim);
// r_h = 8 (h + 1) / H.
double sandwich_ratio(int64_t h, int64_t H);
// bias_h(qpos, kpos) = (sandwich_inner(kpos - qpos, dim) - dim / 2) / r_h.
double sandwich_bias(int64_t h, int64_t H, int64_t qpos, int64_t kpos, int64_t dim);
// The bias of every head at offsets lo .. hi (hi >= lo), (H, hi - lo + 1) row-major, with the bits
// of sandwich_bias (the inner product is computed once per offset and shared by the heads).
std::vector<double> sandwich_bias_table(int64_t H, int64_t lo, int64_t hi, int64_t dim);
// Throws invalid_argument naming sandwich_dim unless dim is even and in [2, 2^20].
void sandwich_check_dim(double dim);

}  // namespace posenc
