// Core layer: errors, .npy round trips and malformed files, CRC-32, RNG determinism, thread
// ranges, and the CLI's handling of malformed command lines.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "test_support.hpp"

using namespace posenc;

TEST(Crc32, KnownVector) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(std::as_bytes(std::span(s, 9))), 0xCBF43926u);
}

TEST(Rng, DeterministicAndNormalMoments) {
  rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(), b.next());
  EXPECT_NE(a.next(), c.next());
  rng r(7);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    s += x;
    s2 += x * x;
  }
  // Standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032; allow 5 sigma.
  EXPECT_NEAR(s / n, 0.0, 5 * 0.0023);
  EXPECT_NEAR(s2 / n, 1.0, 5 * 0.0032);
}

TEST(Threads, RangesCoverExactlyOnce) {
  for (int64_t n : {0, 1, 5, 17, 1000}) {
    for (int nth : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int i = 0; i < nth; ++i) {
        auto [b, e] = thread_range(n, i, nth);
        EXPECT_EQ(b, next);
        EXPECT_LE(e - b, n / nth + 1);
        next = e;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(Npy, RoundTripEveryDtype) {
  test::temp_dir d;
  auto a = make_npy<double>({2, 3});
  for (int i = 0; i < 6; ++i) a.as<double>()[i] = i * 0.5 - 1;
  write_npy(d.file("a.npy"), a);
  auto b = read_npy(d.file("a.npy"));
  EXPECT_EQ(b.type, dtype::f64);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(a.data.data(), b.data.data(), a.data.size()), 0);
  auto p = make_npy<int64_t>({4});
  for (int i = 0; i < 4; ++i) p.as<int64_t>()[i] = 1000000000000LL * i;
  write_npy(d.file("p.npy"), p);
  EXPECT_EQ(read_npy(d.file("p.npy")).to_i64(),
            (std::vector<int64_t>{0, 1000000000000LL, 2000000000000LL, 3000000000000LL}));
  auto m = make_npy<bool>({3});
  m.as<bool>()[1] = true;
  write_npy(d.file("m.npy"), m);
  EXPECT_EQ(read_npy(d.file("m.npy")).to_i64(), (std::vector<int64_t>{0, 1, 0}));
  auto f = make_npy<float>({});
  f.as<float>()[0] = 2.5f;
  write_npy(d.file("f.npy"), f);
  EXPECT_EQ(read_npy(d.file("f.npy")).to_f64(), std::vector<double>{2.5});
  // The header is padded so the data starts at a multiple of 64 bytes (format 1.0).
  EXPECT_EQ(read_file(d.file("a.npy")).size() % 64, 48u % 64);
}

TEST(Npy, MalformedFilesAreClearErrors) {
  test::temp_dir d;
  auto a = make_npy<float>({4, 2});
  auto bytes = serialize_npy(a);
  auto expect_error = [&](const std::vector<std::byte>& b, const std::string& needle) {
    try {
      parse_npy(b, "x.npy");
      FAIL() << "no error for " << needle;
    } catch (const io_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto trunc = bytes;
  trunc.resize(trunc.size() - 3);
  expect_error(trunc, "data: truncated, shape (4, 2) needs 32 bytes, the file has 29");
  auto magic = bytes;
  magic[1] = std::byte{'X'};
  expect_error(magic, "wrong magic");
  auto extra = bytes;
  extra.push_back(std::byte{0});
  expect_error(extra, "trailing");
  std::string h(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = h;
    s.replace(s.find(from), from.size(), to);
    std::vector<std::byte> b(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    return b;
  };
  expect_error(replace("<f4", ">f4"), "unsupported dtype");
  expect_error(replace("False", "True "), "Fortran");
  expect_error(std::vector<std::byte>(5), "wrong magic");
  EXPECT_THROW(read_npy(d.file("missing.npy")), io_error);
}

// numpy.lib.format's header, and nothing else: each file below is refused with the reason, where
// an earlier, regex-based reader took a first match and went on. Replacements are padded with
// spaces to the replaced length, so that the header length field stays right.
TEST(Npy, HeadersNumPyRefusesAreRefused) {
  const auto bytes = serialize_npy(make_npy<float>({4, 2}));
  const std::string h(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto with = [&](const std::string& from, std::string to) {
    std::string s = h;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    to.resize(from.size(), ' ');
    s.replace(at, from.size(), to);
    std::vector<std::byte> b(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    return b;
  };
  auto refused = [&](const std::vector<std::byte>& b, const std::string& needle) {
    try {
      parse_npy(b, "x.npy");
      ADD_FAILURE() << "accepted, expected " << needle;
    } catch (const io_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      for (const char ch : m) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << m;
    }
  };
  EXPECT_EQ(parse_npy(bytes, "x.npy").shape, (std::vector<int64_t>{4, 2}));
  refused(with("), }", "), "), "a key as a quoted string, found the end");  // no closing brace
  refused(with("'fortran_order': False", "'descr': '<f8',"), "key 'descr' given twice");
  auto v11 = bytes;
  v11[7] = std::byte{1};
  refused(v11, "unsupported format version 1.1");
  refused(with("'fortran_order'", std::string("'fortran") + '\0' + "order'"),
          "a key of printable characters, found '\\x00order\\x27");
  refused(with("'fortran_order': False", "'fortran_order': 0"), "True or False");
  refused(with("'descr'", "'dtype'"), "unknown key 'dtype'");
  refused(with("(4, 2)", "[4, 2]"), "the value of 'shape' as a tuple");
  refused(with("(4, 2)", "(8)"), "a one-entry shape written (n,)");
  refused(with("(4, 2)", "(4 2)"), "',' between the entries of 'shape'");
  refused(with("'descr': '<f4', ", "'shape': (8,), "), "key 'shape' given twice");
}

TEST(Errors, CheckedBytes) {
  EXPECT_EQ(checked_bytes("t", 10, 10, 1, 8), 800u);
  EXPECT_THROW(checked_bytes("t", 1ull << 40, 1ull << 40, 1, 8), invalid_argument);
  EXPECT_THROW(checked_bytes("t", 1ull << 30, 16, 1, 8), invalid_argument);
}

TEST(Cli, MalformedCommandLinesExit2) {
  auto r = test::run_cli({"--no-such-option"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("error"), std::string::npos);
  r = test::run_cli({"no-such-command"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = test::run_cli({});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = test::run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("check"), std::string::npos);
}
