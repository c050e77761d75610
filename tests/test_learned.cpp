// Learned absolute table: reproducible N(0, 0.02) initialisation, lookup and the error past the
// last row, the case table (lookup, h = E + P and the backward against their formulas and finite
// differences), backward (accumulating, adjoint identity), and the checksummed file
// format (round trip, golden bytes, every kind of damage is an io_error naming the path).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "case_tables.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/learned.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/learned_cases.hpp"
#include "test_support.hpp"

using namespace posenc;

namespace {

template <typename E, typename F>
void expect_throw_msg(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string m = e.what();
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m << " lacks " << n;
  }
}

void write_bytes(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST(LearnedInit, ReproducibleAndSeedDependent) {
  const auto a = learned_init(100, 16, 42), b = learned_init(100, 16, 42);
  const auto c = learned_init(100, 16, 43);
  EXPECT_EQ(a.rows, 100);
  EXPECT_EQ(a.width, 16);
  ASSERT_EQ(a.weights.size(), 1600u);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_NE(a.weights, c.weights);
  // The documented stream: entry i is float(0.02 * rng(42).normal()), drawn row-major.
  rng g(42);
  for (size_t i = 0; i < 1600; ++i)
    ASSERT_EQ(a.weights[i], static_cast<float>(0.02 * g.normal())) << i;
  // stddev 0 gives zeros.
  const auto z = learned_init(3, 3, 1, 0.0);
  for (float v : z.weights) EXPECT_EQ(v, 0.0f);
}

TEST(LearnedInit, Moments) {
  const auto t = learned_init(1024, 64, 9);
  double s = 0, s2 = 0;
  for (float v : t.weights) {
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(t.weights.size());
  // Standard errors for n = 65536 draws of N(0, 0.02^2): mean 0.02 / sqrt(n) = 7.8e-5,
  // stddev 0.02 / sqrt(2n) = 5.5e-5; allow 5 sigma.
  EXPECT_NEAR(s / n, 0.0, 5 * 7.9e-5);
  EXPECT_NEAR(std::sqrt(s2 / n), 0.02, 5 * 5.6e-5);
}

TEST(LearnedInit, BadArguments) {
  expect_throw_msg<invalid_argument>([] { learned_init(0, 4, 1); }, {"rows", "0"});
  expect_throw_msg<invalid_argument>([] { learned_init(4, -1, 1); }, {"width", "-1"});
  expect_throw_msg<invalid_argument>([] { learned_init(4, 4, 1, -0.1); }, {"stddev"});
  expect_throw_msg<invalid_argument>([] { learned_init(4, 4, 1, NAN); }, {"stddev"});
  // 2^31 x 2^31 floats overflows the cap before anything is allocated.
  expect_throw_msg<invalid_argument>([] { learned_init(int64_t{1} << 31, int64_t{1} << 31, 1); },
                                     {"learned table"});
}

// The case table (include/posenc/verify/learned_cases.hpp), every case of its full list:
// lookup and add_positions (out of place and in place) bit for bit against the formulas, the
// backward within its float accumulation bound, and the backward against finite differences in
// double with the tolerance derived there.
TEST(LearnedLookup, CaseTable) {
  int checked = 0, graded = 0;
  test::run_cases(
      learned_cases::full_cases(), [](const learned_cases::spec&) { return true; },
      [&](const learned_cases::spec& c) {
        auto rs = learned_cases::run_case(c);  // not const: the return moves it
        for (const auto& r : rs) ++(r.name.ends_with("/grad") ? graded : checked);
        return rs;
      });
  EXPECT_EQ(checked, 7);
  EXPECT_EQ(graded, 5);
}

TEST(LearnedLookup, PastTheLastRowIsAnError) {
  const auto t = learned_init(1024, 8, 1);
  std::vector<int64_t> pos = {5, 1024};
  std::vector<float> out(16);
  try {
    learned_lookup(t, pos, out);
    ADD_FAILURE() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "position 1024 is outside the learned table: it has 1024 rows (positions "
                 "0..1023); no embedding exists there");
  }
  pos = {-1, 0};
  expect_throw_msg<invalid_argument>([&] { learned_lookup(t, pos, out); }, {"positions[0]", "-1"});
  pos = {0, 1};
  std::vector<float> small(15);
  expect_throw_msg<invalid_argument>([&] { learned_lookup(t, pos, small); }, {"out", "16", "15"});
  learned_table broken{4, 4, std::vector<float>(15)};
  expect_throw_msg<invalid_argument>([&] { learned_lookup(broken, pos, out); }, {"weights"});
}

TEST(LearnedBackward, AccumulatesRepeatedPositions) {
  learned_table g{4, 2, std::vector<float>(8, 1.0f)};
  const std::vector<int64_t> pos = {2, 0, 2};
  const std::vector<float> go = {1, 2, 10, 20, 100, 200};
  learned_lookup_backward(go, pos, g);
  // Row 2 gets 1 + 1 + 100 and 1 + 2 + 200; row 0 gets 1 + 10 and 1 + 20; others unchanged.
  EXPECT_EQ(g.weights, (std::vector<float>{11, 21, 1, 1, 102, 203, 1, 1}));
  const std::vector<int64_t> bad = {4};
  const std::vector<float> go1 = {1, 1};
  expect_throw_msg<invalid_argument>([&] { learned_lookup_backward(go1, bad, g); },
                                     {"position 4", "4 rows"});
  const std::vector<int64_t> one = {1};
  expect_throw_msg<invalid_argument>([&] { learned_lookup_backward(go, one, g); },
                                     {"grad_out", "2", "6"});
}

RC_GTEST_PROP(LearnedProps, BackwardIsTheAdjointOfLookup, ()) {
  const int64_t rows = *rc::gen::inRange<int64_t>(1, 40);
  const int64_t width = *rc::gen::inRange<int64_t>(1, 17);
  const auto seed = *rc::gen::arbitrary<uint64_t>();
  const auto t = learned_init(rows, width, seed, 1.0);
  const auto pos = *rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(0, rows));
  rng g(seed ^ 0x9E37u);
  std::vector<float> go(pos.size() * static_cast<size_t>(width)), look(go.size());
  for (auto& v : go) v = static_cast<float>(g.normal());
  learned_lookup(t, pos, look);
  learned_table grad{rows, width, std::vector<float>(t.weights.size(), 0.0f)};
  learned_lookup_backward(go, pos, grad);
  double lhs = 0, rhs = 0, abs_sum = 0;
  for (size_t i = 0; i < look.size(); ++i) {
    lhs += static_cast<double>(look[i]) * go[i];
    abs_sum += std::abs(static_cast<double>(look[i]) * go[i]);
  }
  for (size_t i = 0; i < t.weights.size(); ++i)
    rhs += static_cast<double>(t.weights[i]) * grad.weights[i];
  // Float accumulation of <= N terms per grad entry: <= N 2^-24 abs_sum; double sums: 2^-45.
  const double tol = abs_sum * (static_cast<double>(pos.size()) * 0x1.0p-24 + 0x1.0p-40) + 1e-30;
  RC_ASSERT(std::abs(lhs - rhs) <= tol);
}

TEST(LearnedAdd, BadArguments) {
  const auto t = learned_init(8, 4, 3);
  const std::vector<int64_t> pos = {7, 1};
  std::vector<float> e = {1, 2, 3, 4, 5, 6, 7, 8}, h(8);  // values: the case table
  const std::vector<int64_t> far = {8, 0};
  expect_throw_msg<invalid_argument>([&] { add_positions(e, t, far, h); }, {"8 rows"});
  std::vector<float> small(7);
  expect_throw_msg<invalid_argument>([&] { add_positions(small, t, pos, h); },
                                     {"token_embeddings"});
}

TEST(LearnedFile, RoundTripIsBitExact) {
  test::temp_dir d;
  const auto t = learned_init(37, 5, 77);
  learned_save(d.file("p.bin"), t);
  const auto back = learned_load(d.file("p.bin"));
  EXPECT_EQ(back.rows, 37);
  EXPECT_EQ(back.width, 5);
  EXPECT_EQ(back.weights, t.weights);
  EXPECT_EQ(read_file(d.file("p.bin")).size(), 40u + 4u * 37u * 5u);
}

TEST(LearnedFile, GoldenBytes) {
  // A 1 x 2 table {1.0, -2.5}. Checksums from python3's zlib.crc32:
  //   payload  struct.pack('<ff', 1.0, -2.5)                       -> 0x560302f4
  //   header   b'PSNCLRN\0' + pack('<IIqq', 1, 1, 1, 2) + pack('<I', 0x560302f4) -> 0xb800187f
  const learned_table t{1, 2, {1.0f, -2.5f}};
  const auto b = learned_serialize(t);
  ASSERT_EQ(b.size(), 48u);
  EXPECT_EQ(std::memcmp(b.data(), "PSNCLRN\0", 8), 0);
  auto u32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, b.data() + off, 4);
    return v;
  };
  auto i64 = [&](size_t off) {
    int64_t v;
    std::memcpy(&v, b.data() + off, 8);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);   // version
  EXPECT_EQ(u32(12), 1u);  // float32
  EXPECT_EQ(i64(16), 1);
  EXPECT_EQ(i64(24), 2);
  EXPECT_EQ(u32(32), 0x560302f4u);
  EXPECT_EQ(u32(36), 0xb800187fu);
  float w[2];
  std::memcpy(w, b.data() + 40, 8);
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[1], -2.5f);
}

TEST(LearnedFile, DamageIsAnIoErrorNamingThePath) {
  test::temp_dir d;
  const auto t = learned_init(6, 3, 2);
  const auto good = learned_serialize(t);
  const std::string path = d.file("table.bin");
  auto check = [&](const std::vector<std::byte>& bytes, std::vector<std::string> needles) {
    write_bytes(path, bytes);
    needles.push_back(path);
    expect_throw_msg<io_error>([&] { learned_load(path); }, needles);
  };
  auto truncated = good;
  truncated.resize(good.size() - 4);
  check(truncated, {"truncated"});
  auto tiny = good;
  tiny.resize(20);
  check(tiny, {"truncated", "header"});
  auto trailing = good;
  trailing.push_back(std::byte{0});
  check(trailing, {"trailing"});
  auto magic = good;
  magic[0] = std::byte{'X'};
  check(magic, {"magic"});
  auto version = good;
  version[8] = std::byte{2};
  check(version, {"version 2"});
  auto payload = good;
  payload[45] ^= std::byte{1};
  check(payload, {"payload checksum"});
  auto header = good;
  header[20] ^= std::byte{1};  // rows field
  check(header, {"header checksum"});
  expect_throw_msg<io_error>([&] { learned_load(d.file("missing.bin")); }, {"missing.bin"});
  // A failed save leaves no file (the directory does not exist).
  EXPECT_THROW(learned_save(d.file("no/such/dir/t.bin"), t), io_error);
}

TEST(LearnedChecks, AllPass) {
  const auto checks = learned_checks();
  EXPECT_GE(checks.size(), 4u);
  for (const auto& c : checks) {
    EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
    EXPECT_EQ(c.group, "learned");
  }
}
