// Axial RoPE (posenc/encodings/axial_rope.hpp): Pixtral's 2-D and FLUX's N-axis conventions
// against rotations written here from their definitions, through mrope_apply and through the
// engine's M-RoPE hook; grid ids; errors naming the argument.
#include <gtest/gtest.h>

#include <cmath>

#include "posenc/attention/attention.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/axial_rope.hpp"

using namespace posenc;

namespace {

std::vector<double> normals(size_t n, uint64_t seed) {
  rng r(seed);
  std::vector<double> x(n);
  for (auto& e : x) e = r.normal();
  return x;
}

// Turns pair (u, v) = (x[a], x[b]) by angle t.
void turn(double* x, int64_t a, int64_t b, double t) {
  const double u = x[a], v = x[b];
  x[a] = u * std::cos(t) - v * std::sin(t);
  x[b] = v * std::cos(t) + u * std::sin(t);
}

}  // namespace

// Pixtral: pairs (x[i], x[i + D/2]); the first D/4 by the row at theta^(-2 (2i) / D), the last
// D/4 by the column at theta^(-2 (2i + 1) / D).
TEST(AxialRope, PixtralTwoDimensional) {
  const int64_t D = 16, H = 2, rows = 3, cols = 4, n = rows * cols;
  const axial_rope a = axial_rope_2d(D, 10000);
  EXPECT_EQ(a.section, (std::array<int64_t, 3>{0, 4, 4}));
  EXPECT_EQ(a.layout, rope_layout::half);
  const auto ids = axial_grid_ids(rows, cols);
  ASSERT_EQ(ids.size(), static_cast<size_t>(3 * n));
  EXPECT_EQ(ids[n + 5], 1);      // patch 5: row 1
  EXPECT_EQ(ids[2 * n + 5], 1);  // column 1
  auto x = normals(static_cast<size_t>(n * H * D), 1);
  auto want = x;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t h = 0; h < H; ++h) {
      double* w = want.data() + (p * H + h) * D;
      const int64_t row = p / cols;  // the patch's row in the grid
      for (int64_t i = 0; i < D / 4; ++i) {
        turn(w, i, i + D / 2, double(row) * std::pow(10000.0, -2.0 * (2 * i) / D));
        turn(w, D / 4 + i, D / 4 + i + D / 2,
             double(p % cols) * std::pow(10000.0, -2.0 * (2 * i + 1) / D));
      }
    }
  mrope_apply(a.freqs, axial_components(a), a.layout, rope_angle::exact, ids, x.data(), n, H, D);
  for (size_t e = 0; e < x.size(); ++e) ASSERT_NEAR(x[e], want[e], 1e-14) << e;
}

// FLUX: axes_dim (4, 6, 6), interleaved pairs in channel order, axis a at theta^(-2i / dim_a).
TEST(AxialRope, FluxAxesDim) {
  const std::vector<int64_t> dims = {4, 6, 6};
  const std::vector<double> theta = {10000};
  const axial_rope a = axial_rope_nd(dims, theta);
  EXPECT_EQ(a.freqs.head_dim, 16);
  EXPECT_EQ(a.section, (std::array<int64_t, 3>{2, 3, 3}));
  const int64_t D = 16, H = 1, n = 6;
  const auto ids = axial_grid_ids(2, 3, 5);
  auto x = normals(static_cast<size_t>(n * H * D), 2);
  auto want = x;
  for (int64_t p = 0; p < n; ++p) {
    double* w = want.data() + p * D;
    int64_t pair = 0;
    for (int64_t ax = 0; ax < 3; ++ax)
      for (int64_t i = 0; i < dims[ax] / 2; ++i, ++pair)
        turn(w, 2 * pair, 2 * pair + 1,
             double(ids[ax * n + p]) * std::pow(10000.0, -2.0 * i / double(dims[ax])));
  }
  mrope_apply(a.freqs, axial_components(a), a.layout, rope_angle::exact, ids, x.data(), n, H, D);
  for (size_t e = 0; e < x.size(); ++e) ASSERT_NEAR(x[e], want[e], 1e-13) << e;
}

// The engine's M-RoPE hook with axial frequencies: the same as attention on q and k rotated
// by mrope_apply first (the patches of a 3 x 3 image attending to each other).
TEST(AxialRope, EngineHookEqualsRotatingFirst) {
  const axial_rope a = axial_rope_2d(8, 100);
  const int64_t n = 9, H = 2, D = 8;
  const auto ids = axial_grid_ids(3, 3);
  auto q = normals(static_cast<size_t>(n * H * D), 3), k = normals(q.size(), 4),
       v = normals(q.size(), 5);
  std::vector<double> o1(q.size()), o2(q.size());
  attention_params<double> p;
  p.T = p.S = n, p.Hq = p.Hkv = H, p.D = D;
  p.k = k.data(), p.v = v.data(), p.q = q.data(), p.out = o1.data();
  p.pos.named = {mrope_scheme(a.freqs, a.section, false, a.layout, rope_angle::exact, ids, ids)};
  attention_forward(p);
  auto qr = q, kr = k;
  const auto comp = axial_components(a);
  mrope_apply(a.freqs, comp, a.layout, rope_angle::exact, ids, qr.data(), n, H, D);
  mrope_apply(a.freqs, comp, a.layout, rope_angle::exact, ids, kr.data(), n, H, D);
  attention_params<double> r;
  r.T = r.S = n, r.Hq = r.Hkv = H, r.D = D;
  r.q = qr.data(), r.k = kr.data(), r.v = v.data(), r.out = o2.data();
  attention_forward(r);
  for (size_t e = 0; e < o1.size(); ++e) ASSERT_NEAR(o1[e], o2[e], 1e-13) << e;
}

TEST(AxialRope, BadArgumentsNameThemselves) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { axial_rope_2d(10, 10000); }).find("head_dim"), std::string::npos);
  EXPECT_NE(message([] { axial_rope_2d(16, 1); }).find("theta"), std::string::npos);
  const std::vector<int64_t> four = {2, 2, 2, 2}, odd = {4, 5};
  const std::vector<double> t1 = {10000}, t3 = {1e4, 1e4, 1e4};
  EXPECT_NE(message([&] { axial_rope_nd(four, t1); }).find("1 to 3"), std::string::npos);
  EXPECT_NE(message([&] { axial_rope_nd(odd, t1); }).find("axes_dim[1]"), std::string::npos);
  const std::vector<int64_t> two = {4, 4};
  EXPECT_NE(message([&] { axial_rope_nd(two, t3); }).find("theta"), std::string::npos);
  EXPECT_NE(message([] { axial_grid_ids(0, 3); }).find("rows"), std::string::npos);
}
