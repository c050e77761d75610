// Sandwich (Chi et al. 2023): a score bias reached by name (named_schemes.hpp), its one
// parameter d' = sandwich_dim; the formula is the family file's (posenc/encodings/sandwich.hpp).
#include "named_schemes.hpp"
#include "posenc/encodings/sandwich.hpp"

namespace posenc::detail {
namespace {

int64_t dim(std::span<const double> a) {
  return static_cast<int64_t>(a[0]);
}

}  // namespace

extern const named_bias sandwich_bias_decl;
const named_bias sandwich_bias_decl = {
    [](std::span<const double> a, int64_t) { sandwich_check_dim(a[0]); },
    [](std::span<const double> a, int64_t h, int64_t Hq, int64_t qp, int64_t kp) {
      return sandwich_bias(h, Hq, qp, kp, dim(a));
    },
    // |bias_h| <= d' / r_h: the inner product lies in [-d'/2, d'/2].
    [](std::span<const double> a, int64_t h, int64_t Hq) {
      return double(dim(a)) / sandwich_ratio(h, Hq);
    },
    [](std::span<const double> a, int64_t Hq, int64_t lo, int64_t hi, double* out) {
      const auto t = sandwich_bias_table(Hq, lo, hi, dim(a));
      for (size_t i = 0; i < t.size(); ++i) out[i] = t[i];
    },
};

}  // namespace posenc::detail
