// `posenc attend` with Self-Extend and Dual Chunk Attention: the flags come from the
// declarations and give the library's bits (float64 in, float64 out, the same call); a
// config.json with Qwen2.5-1M's dual_chunk_attention_config turns DCA on with its values (a note
// on stderr), --no-dca leaves it off; errors exit 2 with a message and no output file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/rope.hpp"
#include "test_support.hpp"

using namespace posenc;

namespace cli_rope_pairs {

constexpr int64_t S = 40, Hq = 2, Hkv = 1, D = 8;

struct files {
  test::temp_dir dir;
  std::vector<double> q, k, v;
  files() {
    rng r(11);
    q.resize(S * Hq * D), k.resize(S * Hkv * D), v.resize(S * Hkv * D);
    for (auto* x : {&q, &k, &v})
      for (auto& e : *x) e = r.normal();
    put("q.npy", q, {S, Hq, D});
    put("k.npy", k, {S, Hkv, D});
    put("v.npy", v, {S, Hkv, D});
  }
  void put(const std::string& name, const std::vector<double>& x, std::vector<int64_t> shape) {
    auto a = make_npy<double>(std::move(shape));
    std::copy(x.begin(), x.end(), a.as<double>());
    write_npy(dir.file(name), a);
  }
  std::vector<std::string> args(std::vector<std::string> more) const {
    std::vector<std::string> a = {"attend",          "--q", dir.file("q.npy"), "--k",
                                  dir.file("k.npy"), "--v", dir.file("v.npy"), "--out",
                                  dir.file("o.npy")};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  std::vector<double> out() const {
    const auto a = read_npy(dir.file("o.npy"));
    return std::vector<double>(a.as<double>(), a.as<double>() + S * Hq * D);
  }
  // The library's call: RoPE theta 1e6 (half, exact), causal, the named scheme.
  std::vector<double> library(const named_scheme& n) const {
    rope_config rc;
    rc.head_dim = rc.rotary_dim = D;
    rc.theta = 1e6;
    const auto f = rope_frequencies(rc);
    std::vector<double> o(S * Hq * D);
    attention_params<double> p;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = o.data();
    p.T = p.S = S, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.causal = true;
    p.pos.named = {rope_scheme(f)};
    if (!n.name.empty()) p.pos.named.push_back(n);
    attention_forward(p);
    return o;
  }
};

}  // namespace cli_rope_pairs

using namespace cli_rope_pairs;

TEST(CliRopePairs, SelfExtendFlagsGiveTheLibrarysBits) {
  files f;
  const auto r = test::run_cli(
      f.args({"--causal", "--rope", "--layout", "half", "--theta", "1e6", "--self-extend",
              "--self-extend-group", "3", "--self-extend-window", "7"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(f.out(),
            f.library({"self_extend", {{"self_extend_group", 3}, {"self_extend_window", 7}}}));
  EXPECT_NE(f.out(), f.library({}));
}

TEST(CliRopePairs, DcaFromAQwenConfigAndNoDca) {
  files f;
  const std::string cfg = f.dir.file("config.json");
  std::ofstream(cfg) << R"({"model_type": "qwen2", "hidden_size": 16, "num_attention_heads": 2,
    "num_key_value_heads": 1, "rope_theta": 1000000.0, "max_position_embeddings": 1010000,
    "dual_chunk_attention_config": {"chunk_size": 16, "local_size": 4,
                                    "original_max_position_embeddings": 24}})";
  auto r = test::run_cli(f.args({"--causal", "--rope", "--layout", "half", "--hf-config", cfg}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("dual_chunk_attention_config: Dual Chunk Attention on (chunk_size 16, "
                       "local_size 4, original_max_position_embeddings 24)"),
            std::string::npos)
      << r.err;
  const auto dca = f.library({"dca",
                              {{"dca_chunk_size", 16},
                               {"dca_local_size", 4},
                               {"dca_original_max_position_embeddings", 24}}});
  EXPECT_EQ(f.out(), dca);
  // A flag given with --dca overrides that one value.
  r = test::run_cli(f.args({"--causal", "--rope", "--layout", "half", "--hf-config", cfg, "--dca",
                            "--dca-local-size", "6"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(f.out(), f.library({"dca",
                                {{"dca_chunk_size", 16},
                                 {"dca_local_size", 6},
                                 {"dca_original_max_position_embeddings", 24}}}));
  // --no-dca: RoPE alone, as transformers runs the config.
  r = test::run_cli(
      f.args({"--causal", "--rope", "--layout", "half", "--hf-config", cfg, "--no-dca"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("Dual Chunk Attention on"), std::string::npos) << r.err;
  EXPECT_EQ(f.out(), f.library({}));
}

TEST(CliRopePairs, ErrorsExitTwoWithoutOutput) {
  files f;
  const std::string o = f.dir.file("o.npy");
  for (const auto& [args, msg] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--rope", "--layout", "half", "--theta", "1e6", "--dca"},
            "dca needs causal attention"},
           {{"--causal", "--self-extend"}, "self_extend needs RoPE on"},
           {{"--causal", "--rope", "--layout", "half", "--theta", "1e6", "--self-extend",
             "--alibi"},
            "self_extend cannot be combined with alibi"},
           {{"--causal", "--rope", "--layout", "half", "--theta", "1e6", "--dca-chunk-size", "8"},
            "--dca-chunk-size needs --dca"},
           {{"--causal", "--rope", "--layout", "half", "--theta", "1e6", "--no-dca"},
            "--no-dca needs --hf-config"},
           {{"--causal", "--rope", "--layout", "half", "--theta", "1e6", "--dca",
             "--dca-chunk-size", "8", "--dca-local-size", "9"},
            "dca_local_size must be an integer in [0, dca_chunk_size)"}}) {
    std::filesystem::remove(o);
    const auto r = test::run_cli(f.args(args));
    EXPECT_EQ(r.exit_code, 2) << msg;
    EXPECT_NE(r.err.find(msg), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(o)) << msg;
  }
}
