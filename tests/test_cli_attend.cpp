// `posenc attend` end to end: the binary reads .npy files, writes O.npy in Q's dtype, and its
// output matches an independent naive implementation written here from the formulas
// (softmax(q k^T * scale + bias) v; ALiBi slopes of Press et al. 2022; RoPE of Su et al. 2021
// in the half layout). Bad inputs exit 2 with a message and no output file.
//
// Tolerance: float32 inputs, output rounded once to float32 by the binary after float
// arithmetic; with |q|, |k| <= ~3 sqrt(D), D = 8, S = 6 the score error is below
// (D + 10) 2^-24 * 10 ~ 1e-5 and the output error below 1e-4 * max|v|; we use 1e-4 absolute.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "posenc/core/half.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/core/rng.hpp"
#include "test_gguf_writer.hpp"
#include "test_support.hpp"

using namespace posenc;
using json = nlohmann::json;

namespace {

constexpr int64_t T = 4, S = 6, Hq = 2, Hkv = 1, D = 8;

struct inputs {
  test::temp_dir dir;
  std::vector<double> q, k, v;
  inputs(dtype t = dtype::f32) {
    rng r(7);
    q.resize(T * Hq * D), k.resize(S * Hkv * D), v.resize(S * Hkv * D);
    for (auto* x : {&q, &k, &v})
      for (auto& e : *x) e = r.normal();
    write("q.npy", q, {T, Hq, D}, t);
    write("k.npy", k, {S, Hkv, D}, t);
    write("v.npy", v, {S, Hkv, D}, t);
  }
  void write(const std::string& name, std::vector<double>& x, const std::vector<int64_t>& shape,
             dtype t) {
    if (t == dtype::f32) {
      auto a = make_npy<float>(shape);
      for (size_t i = 0; i < x.size(); ++i) {
        a.as<float>()[i] = static_cast<float>(x[i]);
        x[i] = a.as<float>()[i];  // the naive side sees the same rounded inputs
      }
      write_npy(dir.file(name), a);
    } else {
      auto a = make_npy<double>(shape);
      std::copy(x.begin(), x.end(), a.as<double>());
      write_npy(dir.file(name), a);
    }
  }
  std::vector<std::string> base() const {
    return {"attend",
            "--q",
            dir.file("q.npy"),
            "--k",
            dir.file("k.npy"),
            "--v",
            dir.file("v.npy"),
            "--out",
            dir.file("o.npy"),
            "--format",
            "json"};
  }
};

// Naive attention from the formulas, double. rope: rotate q and k in the half layout with
// theta = 10000 at positions (queries at S - T + i, keys at j). slopes: ALiBi, causal form.
std::vector<double> naive(const inputs& in, bool causal, const std::vector<double>& slopes,
                          bool rope) {
  auto q = in.q, k = in.k;
  if (rope) {
    auto rot = [](double* x, int64_t pos) {
      for (int64_t i = 0; i < D / 2; ++i) {
        const double w = std::pow(10000.0, -2.0 * i / D), a = pos * w;
        const double u = x[i], v = x[i + D / 2];
        x[i] = u * std::cos(a) - v * std::sin(a);
        x[i + D / 2] = v * std::cos(a) + u * std::sin(a);
      }
    };
    for (int64_t i = 0; i < T; ++i)
      for (int64_t h = 0; h < Hq; ++h) rot(&q[(i * Hq + h) * D], S - T + i);
    for (int64_t j = 0; j < S; ++j) rot(&k[j * D], j);
  }
  std::vector<double> out(T * Hq * D, 0.0);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(S, -INFINITY);
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        if (causal && j > S - T + i) continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[(i * Hq + h) * D + d] * k[j * D + d];
        s[j] = dot / std::sqrt(double(D));
        if (!slopes.empty()) s[j] -= slopes[h] * double((S - T + i) - j);
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (auto& x : s) l += (x = std::exp(x - m));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t d = 0; d < D; ++d) out[(i * Hq + h) * D + d] += s[j] / l * in.v[j * D + d];
    }
  return out;
}

double max_diff(const npy_array& o, const std::vector<double>& ref) {
  const auto x = o.to_f64();
  double m = 0;
  for (size_t i = 0; i < ref.size(); ++i) m = std::max(m, std::abs(x[i] - ref[i]));
  return m;
}

}  // namespace

TEST(CliAttend, MatchesNaiveFormula) {
  inputs in;
  auto args = in.base();
  args.push_back("--causal");
  auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["shape"], json({T, Hq, D}));
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_EQ(j["implementation"], "tiled");
  EXPECT_EQ(j["fully_masked_rows"], 0);
  const auto o = read_npy(in.dir.file("o.npy"));
  EXPECT_EQ(o.type, dtype::f32);
  EXPECT_EQ(o.shape, (std::vector<int64_t>{T, Hq, D}));
  EXPECT_LE(max_diff(o, naive(in, true, {}, false)), 1e-4);
}

TEST(CliAttend, AlibiAndRopeMatchNaiveFormula) {
  inputs in;
  // Press et al. 2022 slopes for 2 heads, max_bias 8: 2^(-8/2 * h), h = 1, 2.
  const std::vector<double> slopes = {1.0 / 16, 1.0 / 256};
  auto args = in.base();
  for (const char* a : {"--causal", "--alibi"}) args.push_back(a);
  auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["schemes"], json({"alibi"}));
  EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), naive(in, true, slopes, false)), 1e-4);

  args = in.base();
  for (const char* a : {"--causal", "--rope", "--layout", "half"}) args.push_back(a);
  r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), naive(in, true, {}, true)), 1e-4);
  // The interleaved layout pairs different channels: a different answer.
  args = in.base();
  for (const char* a : {"--causal", "--rope", "--layout", "interleaved"}) args.push_back(a);
  r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(max_diff(read_npy(in.dir.file("o.npy")), naive(in, true, {}, true)), 1e-3);
}

TEST(CliAttend, Float64KeepsDtypeAndWritesLse) {
  inputs in(dtype::f64);
  auto args = in.base();
  args.push_back("--lse-out");
  args.push_back(in.dir.file("lse.npy"));
  auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto o = read_npy(in.dir.file("o.npy"));
  EXPECT_EQ(o.type, dtype::f64);
  // double throughout: error ~ (D + S) 2^-53 * 10, far below 1e-12.
  EXPECT_LE(max_diff(o, naive(in, false, {}, false)), 1e-12);
  const auto l = read_npy(in.dir.file("lse.npy"));
  EXPECT_EQ(l.shape, (std::vector<int64_t>{T, Hq}));
}

TEST(CliAttend, KeyPaddingPositionsAndReferenceSwitch) {
  inputs in;
  auto m = make_npy<bool>({S});
  for (int j = 0; j < S; ++j) m.as<bool>()[j] = j != 2;
  write_npy(in.dir.file("m.npy"), m);
  auto p = make_npy<int64_t>({T});
  for (int i = 0; i < T; ++i) p.as<int64_t>()[i] = 100 + i;
  write_npy(in.dir.file("qp.npy"), p);
  auto args = in.base();
  args.insert(args.end(), {"--key-padding", in.dir.file("m.npy"), "--q-positions",
                           in.dir.file("qp.npy"), "--alibi", "--window", "3"});
  auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto tiled = read_npy(in.dir.file("o.npy")).to_f64();
  ::setenv("POSENC_REFERENCE", "1", 1);
  r = test::run_cli(args);
  ::unsetenv("POSENC_REFERENCE");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["implementation"], "reference");
  const auto ref = read_npy(in.dir.file("o.npy")).to_f64();
  double m2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) m2 = std::max(m2, std::abs(ref[i] - tiled[i]));
  EXPECT_LE(m2, 1e-4);
}

TEST(CliAttend, BadInputsExit2WithoutOutput) {
  inputs in;
  {
    std::ofstream f(in.dir.file("bad.npy"), std::ios::binary);
    f << "not an npy file";
  }
  auto v2 = make_npy<float>({S, Hkv, D + 1});
  write_npy(in.dir.file("v2.npy"), v2);
  auto tt = make_npy<float>({32, Hq + 1});
  write_npy(in.dir.file("t5.npy"), tt);
  auto m = make_npy<uint8_t>({S});
  m.as<uint8_t>()[0] = 2;
  write_npy(in.dir.file("m.npy"), m);
  auto pf = make_npy<float>({T});
  write_npy(in.dir.file("pf.npy"), pf);
  auto k3 = make_npy<float>({S, 3, D});
  write_npy(in.dir.file("k3.npy"), k3);
  auto z = make_npy<float>({5, 0, 8});  // no heads: an empty model, not a shape
  write_npy(in.dir.file("z.npy"), z);
  struct bad {
    std::vector<std::string> extra;
    std::string msg;
  };
  const std::vector<bad> cases = {
      {{"--q", in.dir.file("bad.npy")}, "bad.npy"},
      {{"--v", in.dir.file("v2.npy")}, "--v must have the shape of --k"},
      {{"--k", in.dir.file("k3.npy"), "--v", in.dir.file("k3.npy")}, "multiple of --k heads"},
      {{"--q", in.dir.file("z.npy"), "--k", in.dir.file("z.npy"), "--v", in.dir.file("z.npy")},
       "--q has shape (5, 0, 8): its heads Hq and head dim D must be >= 1 (T may be 0)"},
      {{"--t5-table", in.dir.file("t5.npy")}, "--t5-table must have shape (num_buckets, Hq)"},
      {{"--key-padding", in.dir.file("m.npy")}, "--key-padding must hold 0 (pad) or 1"},
      {{"--q-positions", in.dir.file("pf.npy")}, "--q-positions must be int64"},
      {{"--cu-seqlens", "0,2,5"}, "--cu-seqlens must end at the number of tokens 6"},
      {{"--rope"}, "--layout"},
      {{"--rope", "--layout", "diagonal"}, "diagonal"},
      {{"--shaw-clip", "2"}, "--shaw-keys"},
      {{"--window", "-2"}, "--window"},
      {{"--alibi", "--alibi-max-bias", "-1"}, "alibi_max_bias must be finite and > 0"},
      {{"--alibi-convention", "mpt"}, "--alibi-convention needs --alibi"},
      {{"--alibi", "--alibi-convention", "ggml"},
       "--alibi-convention must be press or mpt or geometric"},
  };
  for (const auto& c : cases) {
    // Later options override the base ones in CLI11 only for repeated flags; build fresh.
    std::vector<std::string> args = {"attend", "--out", in.dir.file("o.npy")};
    auto has = [&](const char* o) {
      return std::find(c.extra.begin(), c.extra.end(), o) != c.extra.end();
    };
    if (!has("--q")) args.insert(args.end(), {"--q", in.dir.file("q.npy")});
    if (!has("--k")) args.insert(args.end(), {"--k", in.dir.file("k.npy")});
    if (!has("--v")) args.insert(args.end(), {"--v", in.dir.file("v.npy")});
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << c.msg << "\n" << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << "expected '" << c.msg << "' in " << r.err;
    EXPECT_FALSE(std::filesystem::exists(in.dir.file("o.npy"))) << c.msg;
  }
}

// --dout runs the backward: dq, dk, dv (float64, causal ALiBi + RoPE) against central finite
// differences of the naive formula above on L = sum dO . out. Central differences with h = 1e-5
// on |x| <= ~4: truncation <= h^2 |L'''| / 6 ~ 1e-9 for O(10) third derivatives, rounding of
// the naive double loss ~ 1e-15 * 10 / h ~ 1e-9; tolerance 1e-7 absolute.
TEST(CliAttend, BackwardMatchesFiniteDifferencesOfNaiveFormula) {
  inputs in(dtype::f64);
  std::vector<double> dout(T * Hq * D);
  rng r(11);
  for (auto& e : dout) e = r.normal();
  in.write("do.npy", dout, {T, Hq, D}, dtype::f64);
  auto args = in.base();
  for (const char* f : {"--causal", "--alibi", "--rope"}) args.push_back(f);
  args.insert(args.end(), {"--layout", "half", "--dout", in.dir.file("do.npy"), "--dq",
                           in.dir.file("dq.npy"), "--dk", in.dir.file("dk.npy"), "--dv",
                           in.dir.file("dv.npy"), "--dalibi", in.dir.file("da.npy")});
  auto res = test::run_cli(args);
  ASSERT_EQ(res.exit_code, 0) << res.err;
  const auto j = json::parse(res.out);
  EXPECT_EQ(j["backward"]["written"].size(), 4u);
  // Press slopes for Hq = 2: 2^-4, 2^-8.
  const std::vector<double> slopes = {0.0625, 0.00390625};
  auto loss = [&](const inputs& x) {
    const auto o = naive(x, true, slopes, true);
    double L = 0;
    for (size_t i = 0; i < o.size(); ++i) L += dout[i] * o[i];
    return L;
  };
  auto check = [&](std::vector<double> inputs::*member, const char* file) {
    const auto g = read_npy(in.dir.file(file));
    ASSERT_EQ(g.type, dtype::f64) << file;
    const auto gv = g.to_f64();
    inputs& x = in;
    double worst = 0;
    for (size_t e = 0; e < (x.*member).size(); ++e) {
      const double x0 = (x.*member)[e], h = 1e-5;
      (x.*member)[e] = x0 + h;
      const double lp = loss(x);
      (x.*member)[e] = x0 - h;
      const double lm = loss(x);
      (x.*member)[e] = x0;
      worst = std::max(worst, std::abs((lp - lm) / (2 * h) - gv[e]));
    }
    EXPECT_LE(worst, 1e-7) << file;
  };
  check(&inputs::q, "dq.npy");
  check(&inputs::k, "dk.npy");
  check(&inputs::v, "dv.npy");
  const auto da = read_npy(in.dir.file("da.npy"));
  EXPECT_EQ(da.shape, (std::vector<int64_t>{Hq}));
}

// --alibi=SLOPES.npy gives the slopes, float64 whatever Q's dtype: slopes that float32 cannot
// hold (0.3, 1/3) in a float64 call give the naive formula's output, and --dalibi (float64)
// matches central differences of the naive loss L = sum dO . out by the slopes (h = 1e-5:
// truncation and rounding ~1e-9, tolerance 1e-7 as above).
TEST(CliAttend, AlibiSlopesFromAFileAreFloat64) {
  inputs in(dtype::f64);
  std::vector<double> slopes = {0.3, 1.0 / 3}, dout(T * Hq * D);
  rng r(5);
  for (auto& e : dout) e = r.normal();
  in.write("s.npy", slopes, {Hq}, dtype::f64);
  in.write("do.npy", dout, {T, Hq, D}, dtype::f64);
  auto args = in.base();
  args.insert(args.end(),
              {"--causal", "--alibi=" + in.dir.file("s.npy"), "--dout", in.dir.file("do.npy"),
               "--dq", in.dir.file("dq.npy"), "--dk", in.dir.file("dk.npy"), "--dv",
               in.dir.file("dv.npy"), "--dalibi", in.dir.file("da.npy")});
  const auto res = test::run_cli(args);
  ASSERT_EQ(res.exit_code, 0) << res.err;
  EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), naive(in, true, slopes, false)), 1e-13);
  const auto da = read_npy(in.dir.file("da.npy"));
  ASSERT_EQ(da.type, dtype::f64);
  ASSERT_EQ(da.shape, (std::vector<int64_t>{Hq}));
  const auto g = da.to_f64();
  for (int64_t h = 0; h < Hq; ++h) {
    auto loss = [&](double step) {
      auto s2 = slopes;
      s2[h] += step;
      const auto o = naive(in, true, s2, false);
      double L = 0;
      for (size_t i = 0; i < o.size(); ++i) L += dout[i] * o[i];
      return L;
    };
    EXPECT_NEAR(g[h], (loss(1e-5) - loss(-1e-5)) / 2e-5, 1e-7) << "head " << h;
  }
  // In a float32 call the same file gives the same slopes: Press's slopes for Hq heads as a
  // file give the bits of --alibi alone.
  inputs f;
  std::vector<double> press = {0.0625, 0.00390625};
  f.write("s.npy", press, {Hq}, dtype::f64);
  auto a = f.base(), b = f.base();
  a.insert(a.end(), {"--causal", "--alibi"});
  b.insert(b.end(), {"--causal", "--alibi", f.dir.file("s.npy")});
  b[8] = f.dir.file("o2.npy");  // --out's path (base(): attend --q Q --k K --v V --out O ...)
  ASSERT_EQ(test::run_cli(a).exit_code, 0);
  ASSERT_EQ(test::run_cli(b).exit_code, 0);
  EXPECT_EQ(read_npy(f.dir.file("o.npy")).to_f64(), read_npy(f.dir.file("o2.npy")).to_f64());
}

TEST(CliAttend, BackwardBadInputsExit2WithoutOutput) {
  inputs in;
  auto wrong = make_npy<float>({T, Hq, D + 1});
  write_npy(in.dir.file("dow.npy"), wrong);
  auto good = make_npy<float>({T, Hq, D});
  write_npy(in.dir.file("do.npy"), good);
  const std::string dq = in.dir.file("dq.npy"), dk = in.dir.file("dk.npy"),
                    dv = in.dir.file("dv.npy");
  struct bad {
    std::vector<std::string> extra;
    std::string msg;
  };
  const std::vector<bad> cases = {
      {{"--dq", dq}, "--dq needs --dout"},
      {{"--dout", in.dir.file("do.npy"), "--dq", dq}, "--dout needs all of --dq, --dk and --dv"},
      {{"--dout", in.dir.file("dow.npy"), "--dq", dq, "--dk", dk, "--dv", dv},
       "--dout must have shape (T, Hq, D) = (4, 2, 8)"},
      {{"--dout", in.dir.file("do.npy"), "--dq", dq, "--dk", dk, "--dv", dv, "--dt5-table",
        in.dir.file("dt.npy")},
       "--dt5-table needs --t5-table"},
      {{"--dout", in.dir.file("do.npy"), "--dq", dq, "--dk", dq, "--dv", dv},
       "output paths must differ"},
  };
  for (const auto& c : cases) {
    auto args = in.base();
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << c.msg << "\n" << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << "expected '" << c.msg << "' in " << r.err;
    for (const char* f : {"o.npy", "dq.npy", "dk.npy", "dv.npy", "dt.npy"})
      EXPECT_FALSE(std::filesystem::exists(in.dir.file(f))) << c.msg << ": " << f;
  }
}

namespace {

// T5 (causal, 8 buckets, max distance 16) and Shaw (clip 2) on top of the naive formula, double:
// queries at S - T + i, keys at j, offset r = j - (S - T + i).
std::vector<double> naive_tables(const inputs& in, const std::vector<double>& t5,
                                 const std::vector<double>& ak, const std::vector<double>& av) {
  auto bucket = [](int64_t r) {  // causal T5 bucket, written out for N = 8, M = 16
    const int64_t n = std::max<int64_t>(-r, 0);
    if (n < 4) return n;
    const auto b = 4 + static_cast<int64_t>(std::log(n / 4.0) / std::log(16 / 4.0) * 4);
    return std::min<int64_t>(b, 7);
  };
  std::vector<double> out(T * Hq * D, 0.0);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(S);
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t r = j - (S - T + i);
        const int64_t c = std::clamp<int64_t>(r, -2, 2) + 2;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += in.q[(i * Hq + h) * D + d] * (in.k[j * D + d] + ak[c * D + d]);
        s[j] = dot / std::sqrt(double(D)) + t5[bucket(r) * Hq + h];
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (auto& x : s) l += (x = std::exp(x - m));
      for (int64_t j = 0; j < S; ++j) {
        const int64_t c = std::clamp<int64_t>(j - (S - T + i), -2, 2) + 2;
        for (int64_t d = 0; d < D; ++d)
          out[(i * Hq + h) * D + d] += s[j] / l * (in.v[j * D + d] + av[c * D + d]);
      }
    }
  return out;
}

struct tables {
  std::vector<double> t5, ak, av;
  explicit tables(inputs& in, dtype t) {
    rng r(11);
    t5.resize(8 * Hq), ak.resize(5 * D), av.resize(5 * D);
    for (auto* x : {&t5, &ak, &av})
      for (auto& e : *x) e = r.normal();
    in.write("t5.npy", t5, {8, Hq}, t);
    in.write("ak.npy", ak, {5, D}, t);
    in.write("av.npy", av, {5, D}, t);
  }
  std::vector<std::string> args(const inputs& in) const {
    return {"--t5-table",
            in.dir.file("t5.npy"),
            "--t5-num-buckets",
            "8",
            "--t5-max-distance",
            "16",
            "--t5-bidirectional=false",  // causal buckets in a non-causal call
            "--shaw-keys",
            in.dir.file("ak.npy"),
            "--shaw-values",
            in.dir.file("av.npy"),
            "--shaw-clip",
            "2"};
  }
};

}  // namespace

// Float64 q, k, v with float64 T5 and Shaw tables: the whole computation stays in float64.
// Rounding any table to float32 moves the output by ~1e-8 (tables ~ N(0, 1)), far above the
// 1e-12 allowed here.
TEST(CliAttend, Float64TablesStayFloat64) {
  inputs in(dtype::f64);
  tables tb(in, dtype::f64);
  auto args = in.base();
  for (const auto& a : tb.args(in)) args.push_back(a);
  auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("note"), std::string::npos) << r.err;
  const auto o = read_npy(in.dir.file("o.npy"));
  EXPECT_EQ(o.type, dtype::f64);
  EXPECT_LE(max_diff(o, naive_tables(in, tb.t5, tb.ak, tb.av)), 1e-12);
  // A float32 table in a float64 computation converts exactly: the same formula on the
  // float32-rounded tables, to the same 1e-12.
  inputs in2(dtype::f64);
  tables tb2(in2, dtype::f32);
  args = in2.base();
  for (const auto& a : tb2.args(in2)) args.push_back(a);
  r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(max_diff(read_npy(in2.dir.file("o.npy")), naive_tables(in2, tb2.t5, tb2.ak, tb2.av)),
            1e-12);
}

// Regression: a float64 table with float32 q, k, v was rounded to float32 silently.
TEST(CliAttend, Float64TableWithFloat32InputsIsRoundedWithANote) {
  inputs in(dtype::f32);
  tables tb(in, dtype::f64);
  auto args = in.base();
  for (const auto& a : tb.args(in)) args.push_back(a);
  const auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* t : {"--t5-table", "--shaw-keys", "--shaw-values"})
    EXPECT_NE(r.err.find(std::string("note: ") + t + " is float64 and is rounded to float32"),
              std::string::npos)
        << r.err;
  EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), naive_tables(in, tb.t5, tb.ak, tb.av)), 1e-4);
}

// Regression: `--head-dim`, copied from a working `rope apply` line, was "not expected".
// T5's buckets follow the call by default (t5_bidirectional "not causal": an encoder's are
// bidirectional, a decoder's causal), as transformers' T5Attention (bidirectional = not
// is_decoder); --t5-bidirectional[=false] overrides, and t5_num_buckets is checked against the
// table's rows.
TEST(CliAttend, T5BucketsFollowCausalityUnlessGiven) {
  inputs in;
  tables tb(in, dtype::f32);
  auto run = [&](std::vector<std::string> extra, const std::string& out) {
    auto args = in.base();
    *(std::find(args.begin(), args.end(), "--out") + 1) = in.dir.file(out);
    const std::vector<std::string> t5 = {"--t5-table", in.dir.file("t5.npy"), "--t5-max-distance",
                                         "16"};
    args.insert(args.end(), t5.begin(), t5.end());
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_npy(in.dir.file(out)).data;  // the output's bytes
  };
  const auto bidi_default = run({}, "a.npy"), bidi = run({"--t5-bidirectional"}, "b.npy");
  const auto causal_buckets = run({"--t5-bidirectional=false"}, "c.npy");
  EXPECT_EQ(bidi_default, bidi);
  EXPECT_NE(bidi_default, causal_buckets);
  const std::vector<double> none(5 * D, 0.0);  // no Shaw tables
  EXPECT_LE(max_diff(read_npy(in.dir.file("c.npy")), naive_tables(in, tb.t5, none, none)), 1e-4);
  const auto causal_default = run({"--causal"}, "d.npy");
  EXPECT_EQ(causal_default, run({"--causal", "--t5-bidirectional=false"}, "e.npy"));
  EXPECT_NE(causal_default, run({"--causal", "--t5-bidirectional"}, "f.npy"));
  auto args = in.base();
  const std::vector<std::string> bad = {"--t5-table", in.dir.file("t5.npy"), "--t5-num-buckets",
                                        "16"};
  args.insert(args.end(), bad.begin(), bad.end());
  const auto r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("t5_table must have t5_num_buckets = 16 rows, got shape (8, 2)"),
            std::string::npos)
      << r.err;
}

TEST(CliAttend, RopeAcceptsHeadDimAndRefusesADisagreeingOne) {
  inputs in;
  auto args = in.base();
  for (const char* a : {"--causal", "--rope", "--layout", "half", "--head-dim", "8", "--theta",
                        "10000", "--truncate", "true"})
    args.push_back(a);
  auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), naive(in, true, {}, true)), 1e-4);

  std::filesystem::remove(in.dir.file("o.npy"));
  args = in.base();
  for (const char* a : {"--rope", "--layout", "half", "--head-dim", "16"}) args.push_back(a);
  r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--head-dim 16 disagrees with the head dim D = 8 of --q"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(in.dir.file("o.npy")));
  args = in.base();
  for (const char* a : {"--head-dim", "8"}) args.push_back(a);
  r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("need --rope"), std::string::npos) << r.err;
}

// The RoPE parameters of `rope apply` include --gguf: a GGUF file's metadata (D = 8, theta
// 10000, no scaling) gives the naive formula's rotation.
TEST(CliAttend, RopeFromGguf) {
  inputs in;
  test::gguf_writer w;
  w.add_string("general.architecture", "qwen2");
  w.add_u32("qwen2.embedding_length", 16);
  w.add_u32("qwen2.attention.head_count", 2);
  w.add_f32("qwen2.rope.freq_base", 10000.0f);
  w.write(in.dir.file("m.gguf"));
  auto args = in.base();
  for (const char* a : {"--causal", "--rope", "--layout", "half", "--gguf"}) args.push_back(a);
  args.push_back(in.dir.file("m.gguf"));
  const auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), naive(in, true, {}, true)), 1e-4);
}

// Half-precision K and V: float16 files ('<f2') and bfloat16 bits in uint16 files ('<u2') with
// --kv-dtype bf16, computed in float32; the naive formula sees the stored (rounded) values.
TEST(CliAttend, HalfPrecisionKeysAndValues) {
  for (kv_storage kv : {kv_storage::f16, kv_storage::bf16}) {
    inputs in;
    auto store = [&](const char* name, std::vector<double>& x) {
      auto a = make_npy<uint16_t>({S, Hkv, D});
      if (kv == kv_storage::f16) a.type = dtype::f16;
      for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t b = float_to_half(kv, static_cast<float>(x[i]));
        std::memcpy(a.data.data() + 2 * i, &b, 2);
        x[i] = half_to_float(kv, b);  // the naive side sees the stored values
      }
      write_npy(in.dir.file(name), a);
    };
    store("k16.npy", in.k);
    store("v16.npy", in.v);
    auto args = in.base();
    args[4] = in.dir.file("k16.npy");
    args[6] = in.dir.file("v16.npy");
    args.push_back("--causal");
    if (kv == kv_storage::bf16) {
      // uint16 without saying how to read it is refused.
      const auto bad = test::run_cli(args);
      EXPECT_EQ(bad.exit_code, 2);
      EXPECT_NE(bad.err.find("--kv-dtype bf16"), std::string::npos) << bad.err;
      args.insert(args.end(), {"--kv-dtype", "bf16"});
    }
    const auto r = test::run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = json::parse(r.out);
    EXPECT_EQ(j["kv"], name(kv));
    EXPECT_EQ(j["dtype"], "float32");
    const auto o = read_npy(in.dir.file("o.npy"));
    EXPECT_LE(max_diff(o, naive(in, true, {}, false)), 1e-4);

    // Misuse: a backward, float64 queries, a --kv-dtype for float32 files: exit 2, no output.
    std::filesystem::remove(in.dir.file("o.npy"));
    auto with_dout = args;
    with_dout.insert(with_dout.end(), {"--dout", in.dir.file("q.npy"), "--dq", in.dir.file("a"),
                                       "--dk", in.dir.file("b"), "--dv", in.dir.file("c")});
    const auto b1 = test::run_cli(with_dout);
    EXPECT_EQ(b1.exit_code, 2);
    EXPECT_NE(b1.err.find("forward-only"), std::string::npos) << b1.err;
    EXPECT_FALSE(std::filesystem::exists(in.dir.file("o.npy")));
  }
  inputs in64(dtype::f64);
  auto a = make_npy<uint16_t>({S, Hkv, D});
  a.type = dtype::f16;
  write_npy(in64.dir.file("k16.npy"), a);
  auto args = in64.base();
  args[4] = args[6] = in64.dir.file("k16.npy");
  const auto r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("need float32 --q"), std::string::npos) << r.err;
  inputs in32;
  auto args2 = in32.base();
  args2.insert(args2.end(), {"--kv-dtype", "bf16"});
  const auto r2 = test::run_cli(args2);
  EXPECT_EQ(r2.exit_code, 2);
  EXPECT_NE(r2.err.find("--kv-dtype bf16 needs float16 or uint16"), std::string::npos) << r2.err;
}

// 16-bit queries in the dtype of K and V (read in place, output float32) and --products bf16:
// against the naive formula on the stored values within 2^-8 max|v| (bfloat16's rounding of the
// probabilities, attention_cases.hpp "bfloat16 products") plus the float32 tolerance above; the
// JSON says what ran. Misuse exits 2 with no output: a 16-bit --q beside float32 --k, an unknown
// --products, --products bf16 with float64 inputs or with a backward.
TEST(CliAttend, HalfPrecisionQueriesAndBfloat16Products) {
  inputs in;
  auto store = [&](const char* name, std::vector<double>& x, std::vector<int64_t> shape) {
    auto a = make_npy<uint16_t>(std::move(shape));
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t b = float_to_bf16(static_cast<float>(x[i]));
      std::memcpy(a.data.data() + 2 * i, &b, 2);
      x[i] = bf16_to_float(b);
    }
    write_npy(in.dir.file(name), a);
  };
  auto args = in.base();
  args[2] = in.dir.file("q16.npy");
  const auto mixed = test::run_cli(args);  // before q16.npy exists: cannot open
  EXPECT_EQ(mixed.exit_code, 2);
  store("q16.npy", in.q, {T, Hq, D});
  store("k16.npy", in.k, {S, Hkv, D});
  store("v16.npy", in.v, {S, Hkv, D});
  const auto mixed2 = test::run_cli(args);  // 16-bit q, float32 k
  EXPECT_EQ(mixed2.exit_code, 2);
  EXPECT_NE(mixed2.err.find("needs --k and --v of the same dtype"), std::string::npos)
      << mixed2.err;
  args[4] = in.dir.file("k16.npy");
  args[6] = in.dir.file("v16.npy");
  args.insert(args.end(), {"--causal", "--kv-dtype", "bf16"});
  double vmax = 0;
  for (double x : in.v) vmax = std::max(vmax, std::abs(x));
  for (const char* products : {"f32", "bf16"}) {
    auto a = args;
    a.insert(a.end(), {"--products", products});
    const auto r = test::run_cli(a);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = json::parse(r.out);
    EXPECT_EQ(j["q"], "bf16");
    EXPECT_EQ(j["kv"], "bf16");
    EXPECT_EQ(j["products"], products);
    EXPECT_EQ(j["dtype"], "float32");
    EXPECT_EQ(j.contains("cpu_has_vdpbf16ps"), std::string(products) == "bf16");
    const double tol = std::string(products) == "bf16" ? 0x1p-8 * vmax + 1e-4 : 1e-4;
    EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), naive(in, true, {}, false)), tol)
        << products;
  }
  std::filesystem::remove(in.dir.file("o.npy"));
  auto bad = args;
  bad.insert(bad.end(), {"--products", "bf8"});
  auto r = test::run_cli(bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--products must be f32 or bf16, got 'bf8'"), std::string::npos) << r.err;
  inputs in64(dtype::f64);
  auto a64 = in64.base();
  a64.insert(a64.end(), {"--products", "bf16"});
  r = test::run_cli(a64);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("float64 stays float64"), std::string::npos) << r.err;
  inputs in32;
  auto a32 = in32.base();
  a32.insert(a32.end(),
             {"--products", "bf16", "--dout", in32.dir.file("q.npy"), "--dq", in32.dir.file("a"),
              "--dk", in32.dir.file("b"), "--dv", in32.dir.file("c")});
  r = test::run_cli(a32);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("forward-only"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(in.dir.file("o.npy")));
  EXPECT_FALSE(std::filesystem::exists(in32.dir.file("o.npy")));
}

// Kerple, FIRE and xPos through `posenc attend` against naive formulas written here from the
// papers (causal, queries at S - T + i, keys at j, d = i - j; float64 inputs, tolerance 1e-12
// absolute: both sides are double computations of O(10) terms):
//   Kerple log (Chi et al. 2022):  bias = -softplus(a1) log(1 + softplus(a2) d)
//   Kerple power:                  bias = -softplus(a1) d^(2 sigmoid(a2))
//   FIRE (Li et al. 2023):         bias = w2 . relu(w1 x + b1) + b2,
//                                  x = log(c d + 1) / log(c max(L, i) + 1), c, L = softplus(.)
//   xPos (Sun et al. 2022):        q scaled by zeta_r^(i / B), k by zeta_r^(-j / B) per pair r,
//                                  zeta_r = (r / (D/2) + 0.4) / 1.4, then RoPE (half layout)
// and a parameter file of the wrong shape exits 2 with no output.
TEST(CliAttend, ResearchSchemesMatchNaiveFormulas) {
  inputs in(dtype::f64);
  auto softplus = [](double a) { return std::log1p(std::exp(a)); };
  auto run = [&](std::vector<std::string> extra) {
    auto args = in.base();
    args.push_back("--causal");
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_npy(in.dir.file("o.npy"));
  };
  // Naive causal attention with a bias function of (h, i, j) and optional xPos.
  auto naive_bias = [&](auto bias, bool xpos, double B) {
    auto q = in.q, k = in.k;
    if (xpos) {
      auto tr = [&](double* x, int64_t pos, bool key) {
        const int64_t pairs = D / 2;  // D is even
        for (int64_t r = 0; r < pairs; ++r) {
          const double zeta = (double(r) / double(pairs) + 0.4) / 1.4;
          const double sc = std::pow(zeta, (key ? -pos : pos) / B);
          const double a = pos * std::pow(10000.0, -2.0 * r / D);
          const double u = x[r] * sc, v = x[r + D / 2] * sc;
          x[r] = u * std::cos(a) - v * std::sin(a);
          x[r + D / 2] = v * std::cos(a) + u * std::sin(a);
        }
      };
      for (int64_t i = 0; i < T; ++i)
        for (int64_t h = 0; h < Hq; ++h) tr(&q[(i * Hq + h) * D], S - T + i, false);
      for (int64_t j = 0; j < S; ++j) tr(&k[j * D], j, true);
    }
    std::vector<double> out(T * Hq * D, 0.0);
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t qi = S - T + i;
        std::vector<double> s(S, -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j <= qi; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[(i * Hq + h) * D + d] * k[j * D + d];
          s[j] = dot / std::sqrt(double(D)) + bias(h, qi, j);
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (auto& x : s) l += (x = std::exp(x - m));
        for (int64_t j = 0; j < S; ++j)
          for (int64_t d = 0; d < D; ++d) out[(i * Hq + h) * D + d] += s[j] / l * in.v[j * D + d];
      }
    return out;
  };
  std::vector<double> ke = {0.3, -0.5, 1.2, 0.1};  // (2, Hq): a1 row, a2 row
  in.write("ke.npy", ke, {2, Hq}, dtype::f64);
  const auto klog = naive_bias(
      [&](int64_t h, int64_t i, int64_t j) {
        return -softplus(ke[h]) * std::log(1 + softplus(ke[Hq + h]) * double(i - j));
      },
      false, 1);
  EXPECT_LT(max_diff(run({"--kerple", in.dir.file("ke.npy")}), klog), 1e-12);
  const auto kpow = naive_bias(
      [&](int64_t h, int64_t i, int64_t j) {
        const double r2 = 2 / (1 + std::exp(-ke[Hq + h]));
        return -softplus(ke[h]) * std::pow(double(i - j), r2);
      },
      false, 1);
  EXPECT_LT(max_diff(run({"--kerple", in.dir.file("ke.npy"), "--kerple-kernel", "power"}), kpow),
            1e-12);

  const int64_t M = 3, W = 3 * M + 3;
  std::vector<double> fw(Hq * W);
  rng r(11);
  for (auto& x : fw) x = r.normal();
  for (int64_t h = 0; h < Hq; ++h) fw[h * W + 3 * M + 2] = 3.0 + h;  // L = softplus(3 + h)
  in.write("fire.npy", fw, {Hq, W}, dtype::f64);
  const auto fire = naive_bias(
      [&](int64_t h, int64_t i, int64_t j) {
        const double* w = &fw[h * W];
        const double c = softplus(w[3 * M + 1]), L = softplus(w[3 * M + 2]);
        const double x = std::log(c * double(i - j) + 1) / std::log(c * std::max(L, double(i)) + 1);
        double b = w[3 * M];
        for (int64_t u = 0; u < M; ++u) b += w[2 * M + u] * std::max(0.0, w[u] * x + w[M + u]);
        return b;
      },
      false, 1);
  EXPECT_LT(max_diff(run({"--fire", in.dir.file("fire.npy"), "--fire-hidden", "3"}), fire), 1e-12);
  // fire_hidden is optional: m from fire's width 3 m + 3.
  EXPECT_LT(max_diff(run({"--fire", in.dir.file("fire.npy")}), fire), 1e-12);

  const auto xpos = naive_bias([](int64_t, int64_t, int64_t) { return 0.0; }, true, 4.0);
  EXPECT_LT(max_diff(run({"--xpos", "--xpos-scale-base", "4"}), xpos), 1e-12);

  // Wrong shapes and missing companions: exit 2, nothing written.
  std::filesystem::remove(in.dir.file("o.npy"));
  std::vector<double> bad(3 * Hq, 0.0);
  in.write("bad.npy", bad, {3, Hq}, dtype::f64);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--kerple", in.dir.file("bad.npy")}, "--kerple must have shape (2, Hq) = (2, 2)"},
      {{"--fire", in.dir.file("bad.npy"), "--fire-hidden", "3"},
       "--fire must have shape (Hq, W) = (2, W), got (3, 2)"},
      {{"--fire", in.dir.file("fire.npy"), "--fire-hidden", "2"},
       "fire_hidden = 2 does not match fire's width 12 = 3 m + 3 (m = 3)"},
      {{"--fire-hidden", "3"}, "--fire-hidden needs --fire"},
      {{"--kerple", in.dir.file("ke.npy"), "--kerple-kernel", "cubic"}, "--kerple-kernel"},
      {{"--xpos", "--xpos-scale-base", "0"}, "xpos_scale_base must be finite and > 0"},
      {{"--xpos", "--rope", "--layout", "half"},
       "rope cannot be combined with xpos: both map q and k at hook 1"},
  };
  for (const auto& [extra, msg] : cases) {
    auto args = in.base();
    args.insert(args.end(), extra.begin(), extra.end());
    const auto res = test::run_cli(args);
    EXPECT_EQ(res.exit_code, 2) << msg << "\n" << res.err;
    EXPECT_NE(res.err.find(msg), std::string::npos) << "expected '" << msg << "' in " << res.err;
    EXPECT_FALSE(std::filesystem::exists(in.dir.file("o.npy"))) << msg;
  }
}

// CoPE through `posenc attend` against the paper's formulas written here (Golovneva et al.
// 2024, sec. 3; causal, float64, tolerance 1e-12 absolute as above): a_ij = q_i . k_j / sqrt(D),
// g = sigmoid(a), p_ij = sum_{t=j..i} g_it clamped to npos - 1, logits interpolated between
// q_i . e[floor p] and q_i . e[ceil p]; and its bad inputs (bidirectional, with another scheme,
// wrong shape) exit 2.
TEST(CliAttend, CopeMatchesNaiveFormula) {
  inputs in(dtype::f64);
  const int64_t P = 4;
  std::vector<double> e(P * D);
  rng r(5);
  for (auto& x : e) x = 0.5 * r.normal();
  in.write("e.npy", e, {P, D}, dtype::f64);
  std::vector<double> want(T * Hq * D, 0.0);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < T; ++i) {
      const int64_t qi = S - T + i;
      const double* q = &in.q[(i * Hq + h) * D];
      std::vector<double> a(S), g(S), s(S, -INFINITY), Z(P);
      for (int64_t j = 0; j <= qi; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[d] * in.k[j * D + d];
        a[j] = dot / std::sqrt(double(D));
        g[j] = 1 / (1 + std::exp(-a[j]));
      }
      for (int64_t t = 0; t < P; ++t) {
        Z[t] = 0;
        for (int64_t d = 0; d < D; ++d) Z[t] += q[d] * e[t * D + d];
      }
      double m = -INFINITY;
      for (int64_t j = 0; j <= qi; ++j) {
        double p = 0;
        for (int64_t t = j; t <= qi; ++t) p += g[t];
        p = std::min(p, double(P - 1));
        const double lo = std::floor(p), hi = std::ceil(p), w = p - lo;
        s[j] = a[j] + Z[int64_t(hi)] * w + Z[int64_t(lo)] * (1 - w);
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (auto& x : s) l += (x = std::exp(x - m));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t d = 0; d < D; ++d) want[(i * Hq + h) * D + d] += s[j] / l * in.v[j * D + d];
    }
  auto args = in.base();
  args.insert(args.end(), {"--causal", "--cope", in.dir.file("e.npy")});
  const auto res = test::run_cli(args);
  ASSERT_EQ(res.exit_code, 0) << res.err;
  EXPECT_LT(max_diff(read_npy(in.dir.file("o.npy")), want), 1e-12);

  std::filesystem::remove(in.dir.file("o.npy"));
  std::vector<double> bad(P * (D + 1), 0.0);
  in.write("bad.npy", bad, {P, D + 1}, dtype::f64);
  // M-RoPE beside CoPE was once run as CoPE alone (`schemes: mrope+cope`, CoPE's output).
  {
    std::ofstream f(in.dir.file("mrope.json"));
    f << R"({"head_dim": 8, "rope_theta": 10000,
             "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}})";
  }
  auto qp3 = make_npy<int64_t>({3, T});
  auto kp3 = make_npy<int64_t>({3, S});
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < T; ++i) qp3.as<int64_t>()[r * T + i] = S - T + i + (r == 1 ? i % 2 : 0);
    for (int j = 0; j < S; ++j) kp3.as<int64_t>()[r * S + j] = j + (r == 2 ? j % 2 : 0);
  }
  write_npy(in.dir.file("qp3.npy"), qp3);
  write_npy(in.dir.file("kp3.npy"), kp3);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--cope", in.dir.file("e.npy")}, "cope needs causal attention"},
      {{"--causal", "--cope", in.dir.file("e.npy"), "--alibi"},
       "cope cannot be combined with alibi"},
      {{"--causal", "--cope", in.dir.file("e.npy"), "--rope", "--layout", "half", "--hf-config",
        in.dir.file("mrope.json"), "--q-positions", in.dir.file("qp3.npy"), "--k-positions",
        in.dir.file("kp3.npy")},
       "cope cannot be combined with mrope"},
      {{"--causal", "--cope", in.dir.file("bad.npy")}, "--cope must have shape (npos, D)"},
  };
  for (const auto& [extra, msg] : cases) {
    auto a = in.base();
    a.insert(a.end(), extra.begin(), extra.end());
    const auto rr = test::run_cli(a);
    EXPECT_EQ(rr.exit_code, 2) << msg << "\n" << rr.err;
    EXPECT_NE(rr.err.find(msg), std::string::npos) << "expected '" << msg << "' in " << rr.err;
    EXPECT_FALSE(std::filesystem::exists(in.dir.file("o.npy"))) << msg;
  }
}

// --sinks: gpt-oss's per-head logits join each row's softmax with no value; float64 inputs
// against the naive formula with the sink added to the denominator; a wrong count exits 2.
TEST(CliAttend, SinksJoinTheDenominator) {
  inputs in(dtype::f64);
  const double sinks[Hq] = {0.75, -1.25};
  auto args = in.base();
  for (const char* a : {"--causal", "--sinks", "0.75,-1.25"}) args.push_back(a);
  auto r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The naive rows rescaled: out_sink = out * l / (l + exp(sink - m)) with the row's m, l.
  std::vector<double> want = naive(in, true, {}, false);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < T; ++i) {
      double m = -INFINITY;
      std::vector<double> s(S, -INFINITY);
      for (int64_t j = 0; j <= S - T + i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += in.q[(i * Hq + h) * D + d] * in.k[j * D + d];
        s[j] = dot / std::sqrt(double(D));
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (double x : s) l += std::exp(x - m);
      const double f = l / (l + std::exp(sinks[h] - m));
      for (int64_t d = 0; d < D; ++d) want[(i * Hq + h) * D + d] *= f;
    }
  EXPECT_LE(max_diff(read_npy(in.dir.file("o.npy")), want), 1e-12);
  args = in.base();
  for (const char* a : {"--sinks", "0.5"}) args.push_back(a);
  r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("sinks"), std::string::npos) << r.err;
}
