// posenc bench cases for RoPE (issue 5): rope_apply_qk in place on q and k of shape (T, H, D),
// exact angles, both layouts, at T = 4096 (128 MiB of q and k), T = 32768 (1 GiB: DRAM) and
// T = 1 (decode). Bytes counted: q and k each read once and written once, 2 x 2 x T H D x 4.
// Validation: sampled tokens against the binary128 rope_apply_reference before timing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/rope.hpp"

namespace posenc::cli {
namespace {

struct rope_data {
  int64_t T, H, D;
  rope_layout layout;
  rope_freqs f;
  std::vector<int64_t> pos;
  std::vector<float> q, k;
};

// Float rotation error per element: cos and sin rounded to float (2^-24 relative each), two
// products and a sum (or one FMA and a product) in float: |y - exact| <= 4 * 2^-24 (|u| + |v|)
// (a = 1). Checked with 5 * 2^-24 (|u| + |v|) per element, the bound tests/test_rope uses.
std::string validate_rope(rope_data& d) {
  const int64_t T = d.T, H = d.H, D = d.D, HD = H * D;
  std::vector<int64_t> sample = {0, T / 3, T / 2, T - 1};
  std::sort(sample.begin(), sample.end());
  sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
  const int64_t ns = static_cast<int64_t>(sample.size());
  std::vector<int64_t> sp(sample.size());
  std::vector<double> xq(ns * HD), xk(ns * HD), yq(ns * HD), yk(ns * HD);
  for (int64_t j = 0; j < ns; ++j) {
    sp[j] = d.pos[sample[j]];
    for (int64_t e = 0; e < HD; ++e) {
      xq[j * HD + e] = d.q[sample[j] * HD + e];
      xk[j * HD + e] = d.k[sample[j] * HD + e];
    }
  }
  rope_apply_reference(d.f, d.layout, sp, xq.data(), yq.data(), ns, H, D);
  rope_apply_reference(d.f, d.layout, sp, xk.data(), yk.data(), ns, H, D);
  rope_apply_qk(d.f, d.layout, rope_angle::exact, d.pos, d.q.data(), H, d.k.data(), H, T, D);
  double worst = 0;  // error / bound, must stay <= 1
  for (int64_t j = 0; j < ns; ++j)
    for (int64_t e = 0; e < HD; ++e) {
      const double m = 2.0 * 0x1p-24 * 5;  // 5 * 2^-24 * (|u| + |v|), |u|, |v| < 1
      worst = std::max(worst, std::fabs(d.q[sample[j] * HD + e] - yq[j * HD + e]) / m);
      worst = std::max(worst, std::fabs(d.k[sample[j] * HD + e] - yk[j * HD + e]) / m);
    }
  if (!(worst <= 1))
    return "rope_apply_qk differs from rope_apply_reference by " + std::to_string(worst) +
           " x the float bound 5 * 2^-24 (|u| + |v|)";
  return "";
}

bench_case make_rope(const bench_options& o, const std::string& name, int64_t T, rope_layout l) {
  auto d = std::make_shared<rope_data>();
  d->T = o.quick ? std::min<int64_t>(T, 64) : T;
  d->H = 32;
  d->D = 128;
  d->layout = l;
  rope_config c;
  c.head_dim = c.rotary_dim = d->D;
  c.theta = 10000;
  d->f = rope_frequencies(c);
  d->pos.resize(static_cast<size_t>(d->T));
  for (int64_t t = 0; t < d->T; ++t) d->pos[t] = t;
  const size_t n = static_cast<size_t>(d->T * d->H * d->D);
  d->q.resize(n);
  d->k.resize(n);
  bench_fill(d->q, 1);
  bench_fill(d->k, 2);
  bench_case bc;
  bc.name = name;
  const double tensor_bytes = static_cast<double>(n) * sizeof(float);
  bc.bytes = 2 * 2 * tensor_bytes;  // q and k, each read and written once
  // T = 4096: 128 MiB of q and k, compared with a copy probe over the same footprint.
  // T = 32768 (1 GiB) and T = 1 (32 KiB, cache resident: its fraction of the DRAM probe exceeds 1
  // and says only that decode is not memory bound) use the DRAM probe.
  if (T == 4096) bc.footprint_bytes = 2 * tensor_bytes;
  bc.validate = [d] { return validate_rope(*d); };
  bc.run = [d] {
    rope_apply_qk(d->f, d->layout, rope_angle::exact, d->pos, d->q.data(), d->H, d->k.data(), d->H,
                  d->T, d->D);
  };
  bc.note = "rope_apply_qk in place, float32, exact angles, q and k (T=" + std::to_string(d->T) +
            ", H=32, D=128), layout " + rope_layout_name(l) +
            "; bytes = q and k read + written; cos/sin once per token";
  return bc;
}

bool add(int order, int64_t T, rope_layout l) {
  const std::string name =
      "rope/T=" + std::to_string(T) + "/H=32/D=128/layout=" + rope_layout_name(l);
  return register_bench_case(
      {order, name, [name, T, l](const bench_options& o) { return make_rope(o, name, T, l); }});
}

const bool registered =
    add(10, 4096, rope_layout::half) && add(11, 4096, rope_layout::interleaved) &&
    add(12, 32768, rope_layout::half) && add(13, 32768, rope_layout::interleaved) &&
    add(14, 1, rope_layout::half) && add(15, 1, rope_layout::interleaved);

}  // namespace
}  // namespace posenc::cli
