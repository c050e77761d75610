// M-RoPE (Wang et al. 2024, "Qwen2-VL", section 2.1): three position ids per token, the rotary
// pairs split between them. Built on rope_apply: each component's pairs are taken from a copy
// rotated at that component's ids, so every pair gets exactly the 1-D kernel's arithmetic.
#include <algorithm>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/encodings/rope.hpp"

namespace posenc {

std::vector<int> mrope_components(std::span<const int64_t> section, bool interleaved,
                                  int64_t half) {
  if (section.size() != 3)
    fail("mrope_section must have 3 entries (temporal, height, width), got {}", section.size());
  int64_t sum = 0;
  for (size_t c = 0; c < 3; ++c) {
    if (section[c] < 0 || section[c] > half)
      fail("mrope_section[{}] must be in [0, rotary_dim / 2 = {}], got {}", c, half, section[c]);
    sum += section[c];
  }
  if (sum != half)
    fail("mrope_section must sum to rotary_dim / 2 = {}, got {} + {} + {} = {}", half, section[0],
         section[1], section[2], sum);
  std::vector<int> comp(static_cast<size_t>(half), 0);
  if (!interleaved) {
    for (int64_t i = section[0]; i < section[0] + section[1]; ++i) comp[i] = 1;
    for (int64_t i = section[0] + section[1]; i < half; ++i) comp[i] = 2;
    return comp;
  }
  // Qwen3-VL: height at 1, 4, 7, ... (s_h pairs), width at 2, 5, 8, ... (s_w pairs).
  for (int c = 1; c <= 2; ++c) {
    const int64_t last = 3 * (section[c] - 1) + c;
    if (section[c] > 0 && last >= half)
      fail(
          "mrope_section[{}] = {} does not fit the interleaved layout: its last pair would be "
          "{}, but rotary_dim / 2 = {}",
          c, section[c], last, half);
    for (int64_t k = 0; k < section[c]; ++k) comp[3 * k + c] = c;
  }
  return comp;
}

namespace {

template <typename Real>
void mrope_apply_impl(const rope_freqs& f, std::span<const int> component, rope_layout layout,
                      rope_angle angle, std::span<const int64_t> positions, Real* x, int64_t T,
                      int64_t H, int64_t D, bool inverse) {
  rope_validate(f);
  const int64_t half = f.rotary_dim / 2, R = f.rotary_dim;
  if (T < 0 || H < 0 || D < R)
    fail(
        "mrope_apply: x must have shape (T, H, D) with T, H >= 0 and D >= rotary_dim = {}, got "
        "({}, {}, {})",
        R, T, H, D);
  if (static_cast<int64_t>(component.size()) != half)
    fail("mrope_apply: component must have rotary_dim / 2 = {} entries, got {}", half,
         component.size());
  for (size_t i = 0; i < component.size(); ++i)
    if (component[i] < 0 || component[i] > 2)
      fail("mrope_apply: component[{}] must be 0, 1 or 2, got {}", i, component[i]);
  if (static_cast<int64_t>(positions.size()) != 3 * T)
    fail("mrope_apply: positions must have shape (3, T) = (3, {}), got {} entries", T,
         positions.size());
  const size_t n = static_cast<size_t>(T * H * D);
  if (n == 0) return;
  if (!x) fail("mrope_apply: x is null");
  const std::vector<Real> in(x, x + n);
  std::vector<Real> y;
  for (int c = 0; c < 3; ++c) {
    if (std::find(component.begin(), component.end(), c) == component.end()) continue;
    y = in;
    rope_apply(f, layout, angle, positions.subspan(static_cast<size_t>(c * T), T), y.data(), T, H,
               D, inverse);
    // Pair i lives in channels (i, i + R/2) (half) or (2i, 2i + 1) (interleaved).
    for (int64_t r = 0; r < T * H; ++r) {
      Real* xo = x + r * D;
      const Real* yo = y.data() + r * D;
      for (int64_t i = 0; i < half; ++i) {
        if (component[i] != c) continue;
        const int64_t a = layout == rope_layout::half ? i : 2 * i;
        const int64_t b = layout == rope_layout::half ? i + half : 2 * i + 1;
        xo[a] = yo[a];
        xo[b] = yo[b];
      }
    }
  }
}

}  // namespace

void mrope_apply(const rope_freqs& f, std::span<const int> component, rope_layout layout,
                 rope_angle angle, std::span<const int64_t> positions, float* x, int64_t T,
                 int64_t H, int64_t D, bool inverse) {
  mrope_apply_impl(f, component, layout, angle, positions, x, T, H, D, inverse);
}
void mrope_apply(const rope_freqs& f, std::span<const int> component, rope_layout layout,
                 rope_angle angle, std::span<const int64_t> positions, double* x, int64_t T,
                 int64_t H, int64_t D, bool inverse) {
  mrope_apply_impl(f, component, layout, angle, positions, x, T, H, D, inverse);
}

}  // namespace posenc
