// ALiBi (Press et al. 2022): score bias -m_h (i - j), Press's slopes for H heads, fixed (not
// trained; the engine can return their gradient for learned-slope variants).
#include "hooks.hpp"
#include "posenc/encodings/alibi.hpp"

namespace posenc::detail {
namespace {

template <typename S>
class alibi_hook final : public position_hook<S> {
 public:
  explicit alibi_hook(int64_t H) : slopes_(alibi_slopes(H)) {}
  pos_scheme scheme() const override { return pos_scheme::alibi; }
  attention_position<S> attention(const S* const*) const override {
    attention_position<S> p;
    p.alibi = slopes_;
    return p;
  }

 private:
  std::vector<double> slopes_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_alibi_hook(const position_options&,
                                                  const position_shape& shape) {
  return std::make_unique<alibi_hook<S>>(shape.n_heads);
}
POSENC_INSTANTIATE_HOOK(alibi)

}  // namespace posenc::detail
