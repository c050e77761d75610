// Axial RoPE (posenc/encodings/axial_rope.hpp): each convention's per-pair frequencies and
// sections over M-RoPE's components.
#include "posenc/encodings/axial_rope.hpp"

#include <cmath>

#include "posenc/core/error.hpp"

namespace posenc {

axial_rope axial_rope_2d(int64_t head_dim, double theta, rope_layout layout) {
  if (head_dim < 4 || head_dim % 4 != 0 || head_dim > (int64_t{1} << 20))
    fail("axial_rope_2d: head_dim must be a multiple of 4 in [4, 2^20], got {}", head_dim);
  if (!(theta > 1) || !std::isfinite(theta))
    fail("axial_rope_2d: theta must be finite and > 1, got {}", theta);
  axial_rope a;
  a.axes = 2;
  a.layout = layout;
  const int64_t q = head_dim / 4;
  a.section = {0, q, q};
  a.freqs.head_dim = a.freqs.rotary_dim = head_dim;
  a.freqs.inv_freq.resize(static_cast<size_t>(2 * q));
  const double D = static_cast<double>(head_dim);
  for (int64_t i = 0; i < q; ++i) {
    a.freqs.inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(2 * i) / D);          // rows
    a.freqs.inv_freq[q + i] = std::pow(theta, -2.0 * static_cast<double>(2 * i + 1) / D);  // cols
  }
  return a;
}

axial_rope axial_rope_nd(std::span<const int64_t> axes_dim, std::span<const double> theta) {
  const size_t n = axes_dim.size();
  if (n < 1 || n > 3)
    fail("axial_rope_nd: axes_dim must have 1 to 3 entries (M-RoPE's components), got {}", n);
  if (theta.size() != 1 && theta.size() != n)
    fail("axial_rope_nd: theta must have 1 entry or one per axis ({}), got {}", n, theta.size());
  axial_rope a;
  a.axes = static_cast<int64_t>(n);
  a.layout = rope_layout::interleaved;
  int64_t D = 0;
  for (size_t k = 0; k < n; ++k) {
    if (axes_dim[k] < 2 || axes_dim[k] % 2 != 0 || axes_dim[k] > (int64_t{1} << 20))
      fail("axial_rope_nd: axes_dim[{}] must be even and in [2, 2^20], got {}", k, axes_dim[k]);
    const double t = theta[theta.size() == 1 ? 0 : k];
    if (!(t > 1) || !std::isfinite(t))
      fail("axial_rope_nd: theta[{}] must be finite and > 1, got {}", theta.size() == 1 ? 0 : k, t);
    a.section[k] = axes_dim[k] / 2;
    for (int64_t i = 0; i < axes_dim[k] / 2; ++i)
      a.freqs.inv_freq.push_back(
          std::pow(t, -2.0 * static_cast<double>(i) / static_cast<double>(axes_dim[k])));
    D += axes_dim[k];
  }
  a.freqs.head_dim = a.freqs.rotary_dim = D;
  return a;
}

std::vector<int64_t> axial_grid_ids(int64_t rows, int64_t cols, int64_t frame) {
  if (rows < 1 || cols < 1 || rows > (int64_t{1} << 24) || cols > (int64_t{1} << 24))
    fail("axial_grid_ids: rows and cols must be in [1, 2^24], got {} and {}", rows, cols);
  if (frame < 0 || frame > (int64_t{1} << 62))
    fail("axial_grid_ids: frame must be in [0, 2^62], got {}", frame);
  const int64_t n = rows * cols;
  std::vector<int64_t> ids(static_cast<size_t>(3 * n));
  for (int64_t p = 0; p < n; ++p) {
    ids[p] = frame;
    ids[n + p] = p / cols;
    ids[2 * n + p] = p % cols;
  }
  return ids;
}

std::vector<int> axial_components(const axial_rope& a) {
  std::vector<int> c;
  for (int k = 0; k < 3; ++k) c.insert(c.end(), static_cast<size_t>(a.section[k]), k);
  return c;
}

}  // namespace posenc
