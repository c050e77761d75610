// A learned absolute position table at the input (BERT, GPT-2): x_0 = E[token] + P[pos], P of
// shape (max_positions, C). A position past the last row has no embedding: reported, never
// clamped.
#include <algorithm>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

template <typename S>
class learned_hook final : public position_hook<S> {
 public:
  learned_hook(int64_t rows, int64_t C) : rows_(rows), C_(C) {}
  pos_scheme scheme() const override { return pos_scheme::learned; }
  std::vector<position_tensor> tensors() const override {
    return {{"pos_emb", rows_, C_, false, true}};
  }
  std::string undefined_reason(std::span<const int64_t> pos) const override {
    int64_t mx = -1;
    for (int64_t p : pos) mx = std::max(mx, p);
    if (mx < rows_) return "";
    return fmt::format(
        "no defined position: position {} has no row in the learned table ({} rows, positions "
        "0..{})",
        mx, rows_, rows_ - 1);
  }
  // forward: x[n, :] += P[pos[n], :]
  void input_forward(std::span<const int64_t> pos, const S* const* t, S* x) const override {
    for (size_t n = 0; n < pos.size(); ++n) {
      const S* row = t[0] + pos[n] * C_;
      for (int64_t c = 0; c < C_; ++c) x[n * C_ + c] += row[c];
    }
  }
  // backward of `x[n, :] += P[pos[n], :]`: dP[pos[n], :] += dx[n, :], rows in order n = 0..N-1
  void input_backward(std::span<const int64_t> pos, const S* dx, S* const* dt) const override {
    for (size_t n = 0; n < pos.size(); ++n) {
      S* row = dt[0] + pos[n] * C_;
      for (int64_t c = 0; c < C_; ++c) row[c] += dx[n * C_ + c];
    }
  }

 private:
  int64_t rows_, C_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_learned_hook(const position_options& o,
                                                    const position_shape& shape) {
  if (o.max_positions < 1 || o.max_positions > (1 << 24))
    fail("max_positions must be in [1, 2^24], got {}", o.max_positions);
  return std::make_unique<learned_hook<S>>(o.max_positions, shape.d_model);
}

// What the declaration of learned points at (schemes.cpp; hooks.hpp, scheme_impl).
extern const scheme_impl learned_impl;
const scheme_impl learned_impl = {POSENC_BOTH(make_learned_hook)};

}  // namespace posenc::detail
