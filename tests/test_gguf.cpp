// GGUF metadata reader and its RoPE mapping: the hand-checked fixture (tests/data/gguf, byte map
// in make_tiny_llama3.py), round trips through the tests' own writer (test_gguf_writer.hpp,
// written from the specification), every error the reader names, the mapping of each
// converter convention onto the config.json it came from, against the --hf-config path, and
// llama.cpp's own reading per architecture (defaults, keys it ignores, sliding layers), through
// the library and the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "posenc/core/error.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"
#include "test_gguf_writer.hpp"
#include "test_support.hpp"

using namespace posenc;
using posenc::test::gguf_writer;

namespace {

std::string source(const std::string& rel) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/data/" + rel;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The message of the io_error that parsing `b` throws ("" if it does not throw).
std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    gguf_parse(b, "t.gguf");
  } catch (const io_error& e) {
    return e.what();
  }
  return "";
}

void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Llama 3.1's per-pair divisor, written out from Meta's formula (the test's own evaluation).
double llama3_divisor(double omega, double factor, double lo, double hi, double orig) {
  const double wavelen = 2 * M_PI / omega;
  if (wavelen < orig / hi) return 1;
  if (wavelen > orig / lo) return factor;
  const double smooth = (orig / wavelen - lo) / (hi - lo);
  return 1 / ((1 - smooth) / factor + smooth);
}

rope_freqs hf_freqs(const std::string& name, int64_t seq_len = 0) {
  return rope_frequencies(rope_config_from_file(source("rope/" + name), nullptr), seq_len);
}

rope_freqs gguf_freqs(const gguf_writer& w, std::vector<std::string>* warnings = nullptr,
                      int64_t seq_len = 0) {
  const auto b = w.bytes();
  const auto f = gguf_parse(b, "w.gguf");
  return rope_frequencies(gguf_rope_config(f, b, warnings).config, seq_len);
}

// Relative agreement within float32 storage of the per-pair factors (2^-22).
void expect_same_freqs(const rope_freqs& a, const rope_freqs& b) {
  ASSERT_EQ(a.inv_freq.size(), b.inv_freq.size());
  EXPECT_EQ(a.rotary_dim, b.rotary_dim);
  EXPECT_EQ(a.head_dim, b.head_dim);
  for (size_t i = 0; i < a.inv_freq.size(); ++i)
    EXPECT_NEAR(a.inv_freq[i], b.inv_freq[i], std::ldexp(a.inv_freq[i], -22)) << "pair " << i;
  EXPECT_NEAR(a.attention_factor, b.attention_factor, std::ldexp(a.attention_factor, -22));
}

// The model part every converter writes.
gguf_writer base_writer(const std::string& arch, uint32_t embd, uint32_t heads, uint32_t rot,
                        float theta, uint32_t ctx) {
  gguf_writer w;
  w.add_string("general.architecture", arch);
  w.add_u32(arch + ".context_length", ctx);
  w.add_u32(arch + ".embedding_length", embd);
  w.add_u32(arch + ".attention.head_count", heads);
  w.add_u32(arch + ".rope.dimension_count", rot);
  w.add_f32(arch + ".rope.freq_base", theta);
  return w;
}

}  // namespace

// ---- the hand-checked fixture ----------------------------------------------------------------

TEST(GgufFixture, HeaderKeysAndTensorInfosAtTheirOffsets) {
  const auto f = gguf_read(source("gguf/tiny_llama3.gguf"));
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.file_size, 624u);
  ASSERT_EQ(f.kvs.size(), 8u);
  ASSERT_EQ(f.tensors.size(), 2u);
  // Offsets read off the hex dump: kv[0]'s key length at 24, kv[5] (freq_base) at 218 with its
  // f32 value 0x48f42400 = 500000 at 251; the tensor infos from 370 (0x172, right after the
  // last token "b"); data from 480 (0x1e0).
  EXPECT_EQ(f.kvs[0].offset, 24u);
  EXPECT_EQ(f.kvs[0].text(), "llama");
  EXPECT_EQ(f.kvs[5].key(), "llama.rope.freq_base");
  EXPECT_EQ(f.kvs[5].offset, 218u);
  EXPECT_EQ(f.kvs[5].type, gguf_type::f32);
  EXPECT_EQ(f.kvs[5].number(), 500000.0);
  EXPECT_EQ(f.kvs[7].key(), "tokenizer.ggml.tokens");
  EXPECT_EQ(f.kvs[7].elem_type, gguf_type::string);
  EXPECT_EQ(f.kvs[7].count, 3u);
  EXPECT_EQ(*f.get_size("llama.context_length"), 131072u);
  EXPECT_EQ(f.alignment, 32u);
  EXPECT_EQ(f.tensors[0].name, "rope_freqs.weight");
  EXPECT_EQ(f.tensors[0].info_offset, 370u);
  EXPECT_EQ(f.tensors[0].ne, (std::vector<uint64_t>{32}));
  EXPECT_EQ(f.tensors[0].ggml_type, 0u);
  EXPECT_EQ(f.tensors[1].name, "token_embd.weight");
  EXPECT_EQ(f.tensors[1].ne, (std::vector<uint64_t>{4, 2}));
  EXPECT_EQ(f.tensors[1].ggml_type, 1u);
  EXPECT_EQ(f.tensors[1].offset, 128u);
  EXPECT_EQ(f.data_offset, 480u);
}

TEST(GgufFixture, RopeFreqsTensorAndLlama3Parameters) {
  const auto f = gguf_read(source("gguf/tiny_llama3.gguf"));
  const auto d = gguf_read_f32(f, f.tensors[0]);
  ASSERT_EQ(d.size(), 32u);
  // Pairs 0..14 keep their frequency, 18..31 are divided by 8; 15..17 are smoothed (the hex
  // dump shows 0x3fc6d64a = 1.5534146 at byte 540).
  EXPECT_EQ(d[14], 1.0f);
  EXPECT_EQ(d[15], 1.5534146f);
  EXPECT_EQ(d[18], 8.0f);
  std::vector<std::string> warnings;
  const auto r = gguf_rope_config(f, &warnings);
  EXPECT_EQ(r.arch, "llama");
  EXPECT_EQ(r.config.type, rope_type::llama3);
  EXPECT_EQ(r.config.head_dim, 64);
  EXPECT_EQ(r.config.rotary_dim, 64);
  EXPECT_EQ(r.config.factor, 8.0);
  EXPECT_EQ(r.config.low_freq_factor, 1.0);
  EXPECT_EQ(r.config.high_freq_factor, 4.0);
  EXPECT_EQ(r.config.original_max_position_embeddings, 8192);
  ASSERT_TRUE(r.layout.has_value());
  EXPECT_EQ(*r.layout, rope_layout::interleaved);
  EXPECT_TRUE(r.permuted_from_hf);
  const auto fr = rope_frequencies(r.config);
  for (int i = 0; i < 32; ++i) {
    const double omega = std::pow(500000.0, -2.0 * i / 64);
    const double want = omega / llama3_divisor(omega, 8, 1, 4, 8192);
    EXPECT_NEAR(fr.inv_freq[i], want, std::ldexp(want, -22)) << "pair " << i;
  }
}

// ---- round trips through the writer ----------------------------------------------------------

TEST(GgufRoundTrip, EveryValueTypeBothVersions) {
  for (uint32_t version : {2u, 3u}) {
    gguf_writer w;
    w.version = version;
    w.add_u8("a.u8", 250);
    w.add_i8("a.i8", -7);
    w.add_u16("a.u16", 65000);
    w.add_i16("a.i16", -30000);
    w.add_u32("a.u32", 4000000000u);
    w.add_i32("a.i32", -2000000000);
    w.add_f32("a.f32", 0.1f);
    w.add_bool("a.bool", true);
    w.add_string("a.string", "hello");
    w.add_u64("a.u64", uint64_t{1} << 60);
    w.add_i64("a.i64", -(int64_t{1} << 50));
    w.add_f64("a.f64", 0.1);
    w.add_array_u32("a.arr_u32", {1, 2, 3});
    w.add_array_f32("a.arr_f32", {0.5f, 1.5f});
    w.add_array_string("a.arr_str", {"x", "", "yz"});
    w.add_string("a.empty", "");
    w.add_tensor_f32("t0", {3}, {1.0f, -2.0f, 0.25f});
    w.add_tensor_f32("t1", {2, 2}, {4, 5, 6, 7});
    const auto b = w.bytes();
    const auto f = gguf_parse(b, "rt.gguf");
    EXPECT_EQ(f.version, version);
    ASSERT_EQ(f.kvs.size(), 16u);
    EXPECT_EQ(f.find("a.u8")->integer(), 250);
    EXPECT_EQ(f.find("a.i8")->integer(), -7);
    EXPECT_EQ(f.find("a.u16")->integer(), 65000);
    EXPECT_EQ(f.find("a.i16")->integer(), -30000);
    EXPECT_EQ(f.find("a.u32")->integer(), 4000000000);
    EXPECT_EQ(f.find("a.i32")->integer(), -2000000000);
    EXPECT_EQ(f.find("a.f32")->number(), static_cast<double>(0.1f));
    EXPECT_EQ(f.find("a.bool")->integer(), 1);
    EXPECT_EQ(*f.get_string("a.string"), "hello");
    EXPECT_EQ(*f.get_size("a.u64"), uint64_t{1} << 60);
    EXPECT_EQ(f.find("a.i64")->integer(), -(int64_t{1} << 50));
    EXPECT_EQ(*f.get_number("a.f64"), 0.1);
    EXPECT_EQ(f.find("a.arr_u32")->numbers(), (std::vector<double>{1, 2, 3}));
    EXPECT_EQ(f.find("a.arr_f32")->numbers(), (std::vector<double>{0.5, 1.5}));
    EXPECT_EQ(f.find("a.arr_str")->count, 3u);
    EXPECT_EQ(*f.get_string("a.empty"), "");
    ASSERT_EQ(f.tensors.size(), 2u);
    EXPECT_EQ(f.tensors[1].offset, 32u);  // 12 bytes rounded up to the alignment
    EXPECT_EQ(gguf_read_f32(f, f.tensors[0], b), (std::vector<float>{1.0f, -2.0f, 0.25f}));
    EXPECT_EQ(gguf_read_f32(f, f.tensors[1], b), (std::vector<float>{4, 5, 6, 7}));
    // Wrong-type look-ups name the key.
    try {
      f.get_number("a.string");
      ADD_FAILURE() << "expected io_error";
    } catch (const io_error& e) {
      EXPECT_NE(std::string(e.what()).find("a.string must be a number"), std::string::npos);
    }
    try {
      f.get_size("a.i64");
      ADD_FAILURE() << "expected io_error";
    } catch (const io_error& e) {
      EXPECT_NE(std::string(e.what()).find("a.i64 must be >= 0"), std::string::npos);
    }
  }
}

TEST(GgufRoundTrip, CustomAlignmentAndFile) {
  gguf_writer w;
  w.alignment = 64;
  w.add_u32("general.alignment", 64);
  w.add_tensor_f32("a", {5}, {1, 2, 3, 4, 5});
  w.add_tensor_f32("b", {1}, {9});
  const std::string path = ::testing::TempDir() + "/gguf_align64.gguf";
  w.write(path);
  const auto f = gguf_read(path);
  EXPECT_EQ(f.alignment, 64u);
  EXPECT_EQ(f.data_offset % 64, 0u);
  EXPECT_EQ(f.tensors[1].offset, 64u);
  EXPECT_EQ(gguf_read_f32(f, *f.find_tensor("b")), (std::vector<float>{9}));
  EXPECT_EQ(gguf_read_f32(f, *f.find_tensor("a")), (std::vector<float>{1, 2, 3, 4, 5}));
}

// A 40 GB model costs its metadata: the declared weights are never touched (sparse file).
TEST(GgufRoundTrip, LargeSparseFileReadsOnlyMetadata) {
  auto w = base_writer("llama", 4096, 32, 128, 500000.0f, 131072);
  const uint64_t big = uint64_t{40} << 30;
  w.add_tensor_declared("blk.0.weight", {big / 2}, 1, big);
  const std::string path = ::testing::TempDir() + "/gguf_sparse.gguf";
  w.write(path);
  const auto meta_size = w.bytes().size();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(meta_size + big - 1));
    f.put('\0');
  }
  const auto f = gguf_read(path);
  EXPECT_EQ(f.file_size, meta_size + big);
  const auto r = gguf_rope_config(f, nullptr);
  EXPECT_EQ(r.config.head_dim, 128);
  EXPECT_EQ(r.config.theta, 500000.0);
  std::remove(path.c_str());
}

// ---- errors: each names the offset and the field ----------------------------------------------

TEST(GgufErrors, EachNamesOffsetAndField) {
  gguf_writer w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.rope.dimension_count", 64);
  w.add_tensor_f32("rope_freqs.weight", {2}, {1, 2});
  const auto good = w.bytes();
  EXPECT_EQ(parse_error(good), "");
  const size_t kv1 = 24 + 8 + 20 + 4 + 8 + 5;  // second key's length field

  auto expect = [&](const std::vector<uint8_t>& b, const std::vector<std::string>& parts) {
    const auto m = parse_error(b);
    ASSERT_FALSE(m.empty()) << "expected an error containing " << parts[0];
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  };
  {  // not GGUF
    auto b = good;
    b[0] = 'X';
    expect(b, {"offset 0", "magic", "not a GGUF file"});
  }
  {  // big-endian version 3
    auto b = good;
    put_u32(b, 4, 0x03000000u);
    expect(b, {"offset 4", "version", "big-endian"});
  }
  {  // version 1 and 4
    auto b = good;
    put_u32(b, 4, 1);
    expect(b, {"offset 4", "version 1"});
    put_u32(b, 4, 4);
    expect(b, {"offset 4", "unsupported GGUF version 4"});
  }
  {  // absurd counts
    auto b = good;
    put_u64(b, 16, uint64_t{1} << 62);
    expect(b, {"offset 16", "kv_count", "cannot fit"});
    b = good;
    put_u64(b, 8, ~uint64_t{0});
    expect(b, {"offset 8", "tensor_count", "cannot fit"});
  }
  {  // a key longer than the file
    auto b = good;
    put_u64(b, 24, uint64_t{1} << 40);
    expect(b, {"offset 32", "kv[0] key", "runs past the end of the file"});
  }
  {  // unknown value type
    auto b = good;
    put_u32(b, kv1 + 8 + 26, 13);
    expect(b, {fmt::format("offset {}", kv1 + 8 + 26), "kv[1] (llama.rope.dimension_count) type",
               "unknown value type 13"});
  }
  {  // truncated inside a value
    const std::vector<uint8_t> b(good.begin(), good.begin() + (kv1 + 8 + 26 + 4 + 2));
    expect(b, {fmt::format("offset {}", kv1 + 38), "kv[1] (llama.rope.dimension_count) value",
               "truncated, need 4 bytes, 2 left"});
  }
  {  // absurd array count
    gguf_writer a;
    a.add_array_u32("x", {1, 2});
    auto b = a.bytes();
    put_u64(b, 24 + 8 + 1 + 4 + 4, uint64_t{1} << 61);
    expect(b, {"kv[0] (x)", "array of 2305843009213693952 u32 elements"});
    a = gguf_writer();
    a.add_array_string("y", {"p", "q"});
    b = a.bytes();
    put_u64(b, 24 + 8 + 1 + 4 + 4, uint64_t{1} << 61);
    expect(b, {"kv[0] (y)", "array count 2305843009213693952 is absurd"});
  }
  {  // a string inside an array past the end
    gguf_writer a;
    a.add_array_string("y", {"p"});
    auto b = a.bytes();
    put_u64(b, 24 + 8 + 1 + 4 + 4 + 8, uint64_t{1} << 50);
    expect(b, {"kv[0] (y)[0]", "runs past the end of the file"});
  }
  const size_t ti = good.size() - 32 - 8 - 4 - 8 - 4 - 8 - 17;  // tensor info start
  ASSERT_EQ(gguf_parse(good, "g").tensors[0].info_offset, ti);
  {  // n_dims, ggml type, misaligned offset
    auto b = good;
    put_u32(b, ti + 8 + 17, 5);
    expect(b, {fmt::format("offset {}", ti + 25), "tensor[0] (rope_freqs.weight) n_dims",
               "must be in [1, 4], got 5"});
    b = good;
    put_u32(b, ti + 8 + 17 + 4 + 8, 77);
    expect(b, {"tensor[0] (rope_freqs.weight) type", "unknown ggml type 77"});
    b = good;
    put_u64(b, ti + 8 + 17 + 4 + 8 + 4, 3);
    expect(b, {"tensor[0] (rope_freqs.weight) offset", "not a multiple of the alignment 32"});
  }
  {  // alignment not a power of two
    gguf_writer a;
    a.add_u32("general.alignment", 24);
    expect(a.bytes(), {"offset 24", "general.alignment", "power of two"});
  }
  {  // tensor data past the end of the file: the extent check at parse time
    const auto g = gguf_parse(good, "good.gguf");
    const std::vector<uint8_t> b(good.begin(), good.begin() + (g.data_offset + 4));
    expect(b, {fmt::format("offset {}", ti), "tensor[0] (rope_freqs.weight)",
               fmt::format("data [{}, {})", g.data_offset, g.data_offset + 8),
               fmt::format("runs past the end of the file ({} bytes)", g.data_offset + 4)});
  }
}

// llama.cpp's loader refuses a file whose tensor data ends before the extents its tensor infos
// declare (offset + ggml_nbytes by type and dims, from the aligned data section); so does posenc,
// for a file on disk and an image, naming the tensor, its extent and the file size.
// A key or a tensor name given twice is refused, as llama.cpp's loader refuses it: the second
// is named at its offset, with the first. Names with control bytes are escaped in every message.
TEST(GgufErrors, DuplicateKeysAndTensorNamesAreRefused) {
  {
    gguf_writer w;
    w.add_string("general.architecture", "gptneox");
    w.add_u32("gptneox.rope.dimension_count", 32);
    w.add_u32("gptneox.rope.dimension_count", 0x5a5a5a5a);
    const size_t kv2 = 24 + (8 + 20 + 4 + 8 + 7) + (8 + 28 + 4 + 4);
    const auto m = parse_error(w.bytes());
    for (const std::string& part :
         {fmt::format("offset {}", kv2), std::string("kv[2] (gptneox.rope.dimension_count)"),
          std::string("duplicate key: kv[1] at offset 71 has it already"),
          std::string("llama.cpp refuses a file with a duplicate key")})
      EXPECT_NE(m.find(part), std::string::npos) << m;
  }
  {
    gguf_writer w;
    w.add_string("general.architecture", "llama");
    w.add_tensor_f32("rope_freqs.weight", {2}, {1, 2});
    w.add_tensor_f32("rope_freqs.weight", {2}, {3, 4});
    const auto m = parse_error(w.bytes());
    EXPECT_NE(m.find("tensor[1] (rope_freqs.weight): duplicate tensor name: tensor[0]"),
              std::string::npos)
        << m;
  }
  {  // a key of control bytes, twice: escaped, one printable line
    gguf_writer w;
    w.add_u32(std::string("a\x01\n\x00", 4), 1);
    w.add_u32(std::string("a\x01\n\x00", 4), 2);
    const auto m = parse_error(w.bytes());
    EXPECT_NE(m.find("kv[1] (a\\x01\\x0a\\x00)"), std::string::npos) << m;
    for (const char ch : m) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << m;
  }
}

TEST(GgufErrors, FileCutInsideTheTensorDataIsRefused) {
  gguf_writer w = base_writer("llama", 4096, 32, 64, 500000.0f, 8192);
  std::vector<float> d(32, 1.0f);
  w.add_tensor_f32("rope_freqs.weight", {32}, d);
  // Q4_0 (ggml type 2): blocks of 32 values in 18 bytes; (64, 3) = 6 blocks = 108 bytes.
  w.add_tensor_raw("blk.0.attn_q.weight", {64, 3}, 2, std::vector<uint8_t>(108, 0x11));
  const auto full = w.bytes();
  const auto f = gguf_parse(full, "full.gguf");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[1].offset, 128u);  // 32 floats, a multiple of the alignment
  EXPECT_EQ(gguf_tensor_bytes(2, {64, 3}, "q"), 108u);
  const uint64_t end = f.data_offset + 128 + 108;
  ASSERT_EQ(full.size(), (end + 31) / 32 * 32);
  // Every cut before the end of the last tensor's bytes is an error; the padding after it is not
  // data.
  for (uint64_t n = f.data_offset; n < full.size(); ++n) {
    const std::vector<uint8_t> b(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    const auto m = parse_error(b);
    if (n >= end) {
      EXPECT_EQ(m, "") << n;
      continue;
    }
    const bool first = n < f.data_offset + 128;
    EXPECT_NE(m.find(first ? "tensor[0] (rope_freqs.weight)" : "tensor[1] (blk.0.attn_q.weight)"),
              std::string::npos)
        << n << ": " << m;
    EXPECT_NE(m.find(fmt::format("runs past the end of the file ({} bytes)", n)), std::string::npos)
        << m;
  }
  // On disk: the Q4_0 tensor's extent, type and dims in the message.
  const std::string path = ::testing::TempDir() + "/gguf_cut.gguf";
  {
    std::ofstream o(path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(full.data()), static_cast<std::streamsize>(end - 8));
  }
  try {
    gguf_read(path);
    ADD_FAILURE() << "expected io_error";
  } catch (const io_error& e) {
    const std::string m = e.what();
    for (const auto& part : {fmt::format("{}: offset {}: tensor[1] (blk.0.attn_q.weight)", path,
                                         f.tensors[1].info_offset),
                             fmt::format("data [{}, {}) (108 bytes: ggml type 2, ne [64, 3])",
                                         f.data_offset + 128, end),
                             fmt::format("runs past the end of the file ({} bytes)", end - 8)})
      EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  }
  // The CLI refuses it (exit 2, the tensor named) where it printed frequencies before.
  const auto cli = test::run_cli({"rope", "freqs", "--gguf", path});
  EXPECT_EQ(cli.exit_code, 2) << cli.out;
  EXPECT_NE(cli.err.find("tensor[1] (blk.0.attn_q.weight): data ["), std::string::npos) << cli.err;
  EXPECT_TRUE(cli.out.empty()) << cli.out;
  std::remove(path.c_str());
  // Sizes: a retired type, and an ne0 that is not a whole number of blocks.
  for (const auto& [type, ne, msg] :
       std::vector<std::tuple<uint32_t, std::vector<uint64_t>, std::string>>{
           {4, {32}, "ggml type 4 has no size"},
           {12, {100}, "ne[0] = 100 is not a multiple of ggml type 12's block size 256"}}) {
    try {
      gguf_tensor_bytes(type, ne, "t");
      ADD_FAILURE() << msg;
    } catch (const io_error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(gguf_tensor_bytes(30, {7, 3}, "bf16"), 42u);
  EXPECT_EQ(gguf_tensor_bytes(39, {64}, "mxfp4"), 34u);
}

// What llama.cpp's loader (ggml's gguf reader at 6dafc14e) refuses, posenc refuses, each named:
// an array of arrays, a tensor name of 64 bytes or more, a zero in ne[1..3] (its check divides by
// them), a tensor offset other than where the tensors before it end (each padded to the
// alignment), and strings or arrays longer than 2^30 (sparse files of just over 1 GiB: the
// limits are checked before a byte of them is read).
TEST(GgufErrors, WhatLlamaCppRefusesIsRefused) {
  auto expect = [](const std::vector<uint8_t>& b, const std::vector<std::string>& parts) {
    const auto m = parse_error(b);
    ASSERT_FALSE(m.empty()) << "expected an error containing " << parts[0];
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  };
  {
    gguf_writer w;
    w.add_array_of_u8_arrays("x.nested", {{1}, {2, 3}});
    expect(w.bytes(), {"offset 44", "kv[0] (x.nested) element type", "an array of arrays"});
  }
  {
    gguf_writer w;
    w.add_tensor_f32(std::string(63, 'n'), {1}, {1});
    EXPECT_EQ(parse_error(w.bytes()), "");
    w = gguf_writer();
    w.add_tensor_f32(std::string(64, 'n'), {1}, {1});
    expect(w.bytes(), {"offset 32", "tensor[0] name", "64 bytes; llama.cpp's loader refuses"});
  }
  {
    gguf_writer w;
    w.add_tensor_raw("z", {0}, 0, {});
    EXPECT_EQ(parse_error(w.bytes()), "");  // ne[0] = 0 is a tensor of no bytes
    w = gguf_writer();
    w.add_tensor_raw("z", {4, 0}, 0, {});
    expect(w.bytes(), {"offset 45", "tensor[0] (z) ne[1]", "cannot read a zero in ne[1..3]"});
  }
  {
    gguf_writer w;
    w.add_tensor_f32("a", {2}, {1, 2});
    w.add_tensor_f32("b", {2}, {3, 4});
    auto b = w.bytes();
    const auto f = gguf_parse(b, "w");
    ASSERT_EQ(f.tensors[1].offset, 32u);
    // b's data moved one alignment further (the file grown to hold it): aligned, inside the
    // file, and not where llama.cpp's loader expects it.
    put_u64(b, f.tensors[1].info_offset + 8 + 1 + 4 + 8 + 4, 64);
    b.resize(b.size() + 32, 0);
    expect(b, {fmt::format("offset {}: tensor[1] (b) offset: 64, expected 32",
                           f.tensors[1].info_offset),
               "llama.cpp's loader refuses another"});
  }
  const std::string path = ::testing::TempDir() + "/gguf_limits.gguf";
  auto sparse = [&](const gguf_writer& w, size_t length_at, uint64_t length) {
    auto b = w.bytes();
    put_u64(b, length_at, length);
    std::ofstream o(path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    o.seekp(static_cast<std::streamoff>((uint64_t{1} << 30) + 4096));
    o.put('\0');
  };
  auto read_error = [&] {
    try {
      gguf_read(path);
    } catch (const io_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  {
    gguf_writer w;
    w.add_string("s", "x");
    sparse(w, 24 + 8 + 1 + 4, (uint64_t{1} << 30) + 1);
    const auto m = read_error();
    EXPECT_NE(m.find("offset 45: kv[0] (s) value: string of 1073741825 bytes; llama.cpp's loader "
                     "refuses strings longer than 2^30 bytes"),
              std::string::npos)
        << m;
  }
  {
    gguf_writer w;
    w.add_array_u32("a", {1});
    auto b = w.bytes();
    b[24 + 8 + 1 + 4] = 0;  // element type u8
    std::ofstream o(path, std::ios::binary);
    put_u64(b, 24 + 8 + 1 + 4 + 4, (uint64_t{1} << 30) + 1);
    o.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    o.seekp(static_cast<std::streamoff>((uint64_t{1} << 30) + 4096));
    o.put('\0');
    o.close();
    const auto m = read_error();
    EXPECT_NE(m.find("kv[0] (a): array of 1073741825 elements; llama.cpp's loader refuses arrays "
                     "of more than 2^30"),
              std::string::npos)
        << m;
  }
  std::remove(path.c_str());
}

// An architecture name of NUL bytes, or of 4096 bytes, names no architecture of llama.cpp: one
// printable message, quoted and cut, instead of a message that stops at the first NUL.
TEST(GgufErrors, ArchitectureNamesThatAreNoNamesAreQuotedAndRefused) {
  for (const std::string& arch : {std::string(4, '\0'), std::string(4096, 'x'), std::string("")}) {
    gguf_writer w;
    w.add_string("general.architecture", arch);
    const auto b = w.bytes();
    try {
      gguf_rope_config(gguf_parse(b, "t.gguf"), b, nullptr);
      ADD_FAILURE() << "expected io_error";
    } catch (const io_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("general.architecture = '"), std::string::npos) << m;
      EXPECT_NE(m.find("is not an architecture name"), std::string::npos) << m;
      EXPECT_LT(m.size(), 300u) << m;
      for (const char ch : m) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << m;
    }
  }
}

TEST(GgufErrors, RopeKeysOfTheWrongShape) {
  auto w = base_writer("llama", 4096, 32, 128, 10000.0f, 4096);
  w.add_tensor_f32("rope_freqs.weight", {3}, {1, 2, 3});
  const auto b = w.bytes();
  const auto f = gguf_parse(b, "bad.gguf");
  try {
    gguf_rope_config(f, b, nullptr);
    ADD_FAILURE() << "expected io_error";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_freqs.weight must have rotary_dim/2 = 64 entries"),
              std::string::npos)
        << e.what();
  }
  auto w2 = base_writer("llama", 4096, 32, 128, 10000.0f, 4096);
  w2.add_string("llama.rope.scaling.type", "ntk-by-parts");
  const auto b2 = w2.bytes();
  try {
    gguf_rope_config(gguf_parse(b2, "t.gguf"), b2, nullptr);
    ADD_FAILURE() << "expected io_error";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find("'ntk-by-parts' is not a rope scaling type"),
              std::string::npos);
  }
  auto w3 = base_writer("llama", 4096, 32, 128, 10000.0f, 4096);
  w3.add_u32("llama.attention.key_length", 1u << 30);
  const auto b3 = w3.bytes();
  try {
    gguf_rope_config(gguf_parse(b3, "t.gguf"), b3, nullptr);
    ADD_FAILURE() << "expected io_error";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.attention.key_length must be in [2, 1048576]"),
              std::string::npos)
        << e.what();
  }
}

// Some architectures store per-layer values as arrays: one value for every layer is read, a
// disagreement or an absurd value is an error.
TEST(GgufRope, PerLayerHeadCountArrays) {
  auto make = [](const std::vector<uint64_t>& heads) {
    gguf_writer w;
    w.add_string("general.architecture", "openelm");
    w.add_u32("openelm.embedding_length", 1024);
    w.add_array_u64("openelm.attention.head_count", heads);
    return w.bytes();
  };
  auto b = make({16, 16, 16});
  EXPECT_EQ(gguf_rope_config(gguf_parse(b, "a.gguf"), b, nullptr).config.head_dim, 64);
  for (const auto& [heads, msg] : std::vector<std::pair<std::vector<uint64_t>, std::string>>{
           {{16, 8}, "differs between layers (16 and 8)"},
           {{~uint64_t{0}}, "must be in [1, 1048576]"}}) {
    b = make(heads);
    try {
      gguf_rope_config(gguf_parse(b, "a.gguf"), b, nullptr);
      ADD_FAILURE() << "expected io_error for " << msg;
    } catch (const io_error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
  }
}

// ---- fuzzing: truncations, flipped bytes, huge counts; never a crash --------------------------

namespace {
// Parses and maps `b`; only posenc's two error types may escape.
void parse_and_map(const std::vector<uint8_t>& b) {
  try {
    const auto f = gguf_parse(b, "fuzz.gguf");
    gguf_rope_config(f, b, nullptr);
  } catch (const io_error&) {
  } catch (const invalid_argument&) {
  }
}

std::vector<std::vector<uint8_t>> fuzz_seeds() {
  std::vector<std::vector<uint8_t>> seeds = {read_bytes(source("gguf/tiny_llama3.gguf"))};
  auto y = base_writer("qwen2", 3584, 28, 128, 1000000.0f, 131072);
  y.add_string("qwen2.rope.scaling.type", "yarn");
  y.add_f32("qwen2.rope.scaling.factor", 4.0f);
  y.add_u32("qwen2.rope.scaling.original_context_length", 32768);
  y.add_array_string("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
  seeds.push_back(y.bytes());
  auto p = base_writer("phi3", 64, 4, 16, 10000.0f, 131072);
  p.add_u32("phi3.rope.scaling.original_context_length", 4096);
  p.add_f32("phi3.rope.scaling.attn_factor", 1.19f);
  p.add_tensor_f32("rope_factors_long.weight", {8}, {1, 1.5f, 2, 3, 4, 5, 6, 7});
  p.add_tensor_f32("rope_factors_short.weight", {8}, {1, 1, 1, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f});
  seeds.push_back(p.bytes());
  gguf_writer e;  // per-layer head counts
  e.add_string("general.architecture", "openelm");
  e.add_u32("openelm.embedding_length", 1024);
  e.add_array_u64("openelm.attention.head_count", {16, 16});
  seeds.push_back(e.bytes());
  return seeds;
}
}  // namespace

TEST(GgufFuzz, EveryTruncationIsAnError) {
  for (const auto& seed : fuzz_seeds()) {
    ASSERT_EQ(parse_error(seed), "");
    const auto f = gguf_parse(seed, "s");
    // Up to the last tensor info (or the last key when there is none) the metadata is cut;
    // after it, up to the end of the last tensor's data, the tensor data.
    uint64_t meta = f.tensors.empty() ? f.kvs.back().offset : f.tensors.back().info_offset;
    for (const auto& t : f.tensors)
      meta = std::max(meta,
                      f.data_offset + t.offset + gguf_tensor_bytes(t.ggml_type, t.ne, t.name) - 1);
    for (size_t n = 0; n < seed.size(); ++n) {
      std::vector<uint8_t> b(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(n));
      parse_and_map(b);
      if (n <= meta) {
        const auto m = parse_error(b);
        EXPECT_NE(m.find("t.gguf: offset "), std::string::npos) << n << ": " << m;
      }
    }
  }
}

TEST(GgufFuzz, FlippedBytesNeverCrash) {
  for (const auto& seed : fuzz_seeds()) {
    for (size_t i = 0; i < seed.size(); ++i)
      for (uint8_t mask : {0x01, 0x10, 0x80, 0xff}) {
        auto b = seed;
        b[i] ^= mask;
        parse_and_map(b);
      }
  }
}

TEST(GgufFuzz, HugeValuesAtEveryEightByteOffset) {
  for (const auto& seed : fuzz_seeds()) {
    for (size_t i = 0; i + 8 <= seed.size(); ++i)
      for (uint64_t v :
           {~uint64_t{0}, uint64_t{1} << 63, uint64_t{1} << 40, uint64_t{0x7fffffff}}) {
        auto b = seed;
        put_u64(b, i, v);
        parse_and_map(b);
      }
  }
}

// ---- the RoPE mapping against the config.json each file came from -----------------------------

TEST(GgufRope, Llama31FromTheConverterFormulaMatchesHfConfig) {
  // rope_freqs as llama.cpp's converter writes it: omega in float32 (torch), the formula in
  // double, stored as float32.
  std::vector<float> d;
  for (int i = 0; i < 64; ++i) {
    const float omega = 1.0f / std::pow(500000.0f, static_cast<float>(2 * i) / 128.0f);
    d.push_back(static_cast<float>(llama3_divisor(omega, 8, 1, 4, 8192)));
  }
  auto w = base_writer("llama", 4096, 32, 128, 500000.0f, 131072);
  w.add_u32("llama.attention.head_count_kv", 8);
  w.add_tensor_f32("rope_freqs.weight", {64}, d);
  std::vector<std::string> warnings;
  const auto b = w.bytes();
  const auto r = gguf_rope_config(gguf_parse(b, "l.gguf"), b, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  EXPECT_EQ(r.config.type, rope_type::llama3);
  EXPECT_EQ(r.config.factor, 8.0);
  EXPECT_EQ(r.config.low_freq_factor, 1.0);
  EXPECT_EQ(r.config.high_freq_factor, 4.0);
  EXPECT_EQ(r.config.original_max_position_embeddings, 8192);
  expect_same_freqs(hf_freqs("llama3_1_8b.json"), rope_frequencies(r.config));
}

TEST(GgufRope, Phi3LongRopeTensorsMatchHfConfigShortAndLong) {
  const auto j = nlohmann::json::parse(read_bytes(source("rope/phi3_vision_128k_longrope.json")));
  const auto& rs = j["rope_scaling"];
  std::vector<float> sf, lf;
  for (const auto& x : rs["short_factor"]) sf.push_back(x.get<float>());
  for (const auto& x : rs["long_factor"]) lf.push_back(x.get<float>());
  // The converter: attn_factor = sqrt(1 + ln(scale) / ln(orig)), scale = 131072 / 4096.
  const double attn = std::sqrt(1 + std::log(32.0) / std::log(4096.0));
  auto w = base_writer("phi3", 3072, 32, 96, 10000.0f, 131072);
  w.add_u32("phi3.rope.scaling.original_context_length", 4096);
  w.add_f32("phi3.rope.scaling.attn_factor", static_cast<float>(attn));
  w.add_tensor_f32("rope_factors_long.weight", {48}, lf);
  w.add_tensor_f32("rope_factors_short.weight", {48}, sf);
  for (int64_t seq : {0, 4096, 4097, 131072}) {
    std::vector<std::string> warnings;
    const auto g = gguf_freqs(w, &warnings, seq);
    expect_same_freqs(hf_freqs("phi3_vision_128k_longrope.json", seq), g);
    EXPECT_EQ(g.type, rope_type::longrope);
  }
}

TEST(GgufRope, YarnQwenAndDeepSeekMscaleMatchHfConfig) {
  auto w = base_writer("qwen2", 3584, 28, 128, 1000000.0f, 32768);
  w.add_string("qwen2.rope.scaling.type", "yarn");
  w.add_f32("qwen2.rope.scaling.factor", 4.0f);
  w.add_u32("qwen2.rope.scaling.original_context_length", 32768);
  expect_same_freqs(hf_freqs("qwen2_5_7b_yarn.json"), gguf_freqs(w));

  // DeepSeek-V2: yarn_log_multiplier = 0.1 * mscale_all_dim; HF's magnitude is
  // get_mscale(40, 0.707) / get_mscale(40, 0.707) = 1.
  const auto ds = nlohmann::json::parse(read_bytes(source("rope/deepseek_v2.json")));
  const auto& s = ds["rope_scaling"];
  auto d =
      base_writer("deepseek2", ds["hidden_size"].get<uint32_t>(),
                  ds["num_attention_heads"].get<uint32_t>(), ds["qk_rope_head_dim"].get<uint32_t>(),
                  ds["rope_theta"].get<float>(), ds["max_position_embeddings"].get<uint32_t>());
  d.add_u32("deepseek2.attention.key_length",
            ds["qk_rope_head_dim"].get<uint32_t>() + ds["qk_nope_head_dim"].get<uint32_t>());
  d.add_string("deepseek2.rope.scaling.type", "yarn");
  d.add_f32("deepseek2.rope.scaling.factor", s["factor"].get<float>());
  d.add_u32("deepseek2.rope.scaling.original_context_length",
            s["original_max_position_embeddings"].get<uint32_t>());
  d.add_f32("deepseek2.rope.scaling.yarn_log_multiplier",
            static_cast<float>(0.1 * s["mscale_all_dim"].get<double>()));
  d.add_f32("deepseek2.rope.scaling.yarn_beta_fast", s["beta_fast"].get<float>());
  d.add_f32("deepseek2.rope.scaling.yarn_beta_slow", s["beta_slow"].get<float>());
  std::vector<std::string> warnings;
  expect_same_freqs(hf_freqs("deepseek_v2.json"), gguf_freqs(d, &warnings));
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("yarn_log_multiplier"), std::string::npos);
}

TEST(GgufRope, LinearAndLegacyScaleLinear) {
  auto w = base_writer("llama", 4096, 32, 128, 10000.0f, 4096);
  w.add_f32("llama.rope.scale_linear", 4.0f);
  const auto f = gguf_freqs(w);
  EXPECT_EQ(f.type, rope_type::linear);
  for (size_t i = 0; i < f.inv_freq.size(); ++i) {
    const double want = std::pow(10000.0, -2.0 * static_cast<double>(i) / 128) / 4;
    EXPECT_NEAR(f.inv_freq[i], want, std::ldexp(want, -50));
  }
  auto w2 = base_writer("llama", 4096, 32, 128, 10000.0f, 4096);
  w2.add_string("llama.rope.scaling.type", "linear");
  w2.add_f32("llama.rope.scaling.factor", 4.0f);
  EXPECT_EQ(gguf_freqs(w2).inv_freq, f.inv_freq);
}

TEST(GgufRope, PartialRotaryWidthFromDimensionCount) {
  // Pythia-70m: head_dim 64, rotary_pct 0.25 -> dimension_count 16.
  auto w = base_writer("gptneox", 512, 8, 16, 10000.0f, 2048);
  const auto b = w.bytes();
  const auto r = gguf_rope_config(gguf_parse(b, "p.gguf"), b, nullptr);
  EXPECT_EQ(r.config.head_dim, 64);
  EXPECT_EQ(r.config.rotary_dim, 16);
  ASSERT_TRUE(r.layout.has_value());
  EXPECT_EQ(*r.layout, rope_layout::half);
  expect_same_freqs(hf_freqs("pythia_70m.json"), rope_frequencies(r.config));
}

TEST(GgufRope, NonLlama3FactorTensorBecomesPerPairFactorsWithAWarning) {
  // Divisors that rise and fall: no Llama 3.1 parameters reproduce them.
  std::vector<float> d = {1, 2, 1, 3};
  auto w = base_writer("llama", 32, 4, 8, 10000.0f, 4096);
  w.add_tensor_f32("rope_freqs.weight", {4}, d);
  std::vector<std::string> warnings;
  const auto f = gguf_freqs(w, &warnings);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings.back().find("does not follow Llama 3.1's formula"), std::string::npos);
  EXPECT_EQ(f.attention_factor, 1.0);
  for (int i = 0; i < 4; ++i) {
    const double want = std::pow(10000.0, -2.0 * i / 8) / d[i];
    EXPECT_NEAR(f.inv_freq[i], want, std::ldexp(want, -50)) << i;
  }
}

// rope.freq_base_swa becomes the sliding layers' base (Gemma 3: 10^4 local, 10^6 global);
// rope.dimension_sections are read and must split the R/2 pairs.
TEST(GgufRope, SlidingWindowBaseAndMropeSections) {
  auto w = base_writer("gemma3", 1152, 4, 256, 1000000.0f, 32768);
  w.add_u32("gemma3.attention.key_length", 256);
  w.add_f32("gemma3.rope.freq_base_swa", 10000.0f);
  const auto b = w.bytes();
  std::vector<std::string> warnings;
  const auto r = gguf_rope_config(gguf_parse(b, "g.gguf"), b, &warnings);
  ASSERT_TRUE(r.freq_base_swa.has_value());
  EXPECT_EQ(*r.freq_base_swa, 10000.0);
  EXPECT_EQ(r.config.theta, 1e6);
  const auto swa = rope_config_from_json(r.hf_config, "sliding_attention", &warnings);
  EXPECT_EQ(swa.theta, 1e4);
  // Pair 64 of D = 256 at base 10^4: 10^4^(-1/2) = 0.01 (by hand).
  EXPECT_NEAR(rope_frequencies(swa).inv_freq[64], 0.01, 1e-17);

  auto q = base_writer("qwen2vl", 3584, 28, 128, 1000000.0f, 32768);
  q.add_array_u32("qwen2vl.rope.dimension_sections", {16, 24, 24, 0});
  const auto bq = q.bytes();
  warnings.clear();
  const auto rq = gguf_rope_config(gguf_parse(bq, "q.gguf"), bq, &warnings);
  EXPECT_EQ(rq.dimension_sections, (std::vector<int64_t>{16, 24, 24, 0}));
  auto bad = base_writer("qwen2vl", 3584, 28, 128, 1000000.0f, 32768);
  bad.add_array_u32("qwen2vl.rope.dimension_sections", {16, 24, 20, 0});
  const auto bb = bad.bytes();
  try {
    gguf_rope_config(gguf_parse(bb, "bad.gguf"), bb, nullptr);
    ADD_FAILURE() << "expected io_error";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "qwen2vl.rope.dimension_sections must sum to rotary_dim / 2 = 64"),
              std::string::npos)
        << e.what();
  }
}

// ---- llama.cpp's reading per architecture (llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39:
// src/llama-model.cpp load_hparams, src/models/<arch>.cpp, src/llama-context.cpp) --------------

namespace {

gguf_rope map_gguf(const gguf_writer& w, std::vector<std::string>* warnings = nullptr) {
  const auto b = w.bytes();
  return gguf_rope_config(gguf_parse(b, "m.gguf"), b, warnings);
}

bool any_has(const std::vector<std::string>& v, const std::string& part) {
  for (const auto& s : v)
    if (s.find(part) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// gpt-oss-20b as llama.cpp's converter writes it (TextModel.set_gguf_parameters: yarn type,
// factor, original length and both betas; no truncate key).
gguf_writer gpt_oss_writer() {
  auto w = base_writer("gpt-oss", 2880, 64, 64, 150000.0f, 131072);
  w.add_u32("gpt-oss.block_count", 24);
  w.add_u32("gpt-oss.attention.key_length", 64);
  w.add_u32("gpt-oss.attention.sliding_window", 128);
  w.add_string("gpt-oss.rope.scaling.type", "yarn");
  w.add_f32("gpt-oss.rope.scaling.factor", 32.0f);
  w.add_u32("gpt-oss.rope.scaling.original_context_length", 4096);
  w.add_f32("gpt-oss.rope.scaling.yarn_beta_fast", 32.0f);
  w.add_f32("gpt-oss.rope.scaling.yarn_beta_slow", 1.0f);
  return w;
}

// HF's YaRN ramp weight of pair i (1 = interpolated), correction range [lo, hi] in pairs.
double yarn_ramp(double i, double lo, double hi) {
  return std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
}

}  // namespace

// gpt-oss's config.json says truncate: false; the GGUF carries no truncate key and llama.cpp
// always floors / ceils the correction range, so the GGUF's RoPE is the truncated one.
TEST(GgufLlamaCpp, GptOssTruncateFalseIsLostInConversion) {
  std::vector<std::string> warnings;
  const auto r = map_gguf(gpt_oss_writer(), &warnings);
  EXPECT_TRUE(r.config.truncate);
  EXPECT_TRUE(any_has(r.notes,
                      "gpt-oss.rope.scaling.type = yarn: truncate true taken: GGUF has "
                      "no truncate key and llama.cpp always rounds"))
      << joined(r.notes);
  const auto hf = rope_config_from_file(source("gguf/gpt_oss_20b_config.json"), nullptr);
  EXPECT_FALSE(hf.truncate);
  const auto a = rope_frequencies(hf), b = rope_frequencies(r.config);
  ASSERT_EQ(a.inv_freq.size(), 32u);
  // Correction range of gpt-oss (R 64, theta 150000, original 4096): d(b) = 64 ln(4096 /
  // (2 pi b)) / (2 ln 150000) = 8.0928 (b = 32) and 17.398 (b = 1); rounded [8, 18].
  const double lo = 64 * std::log(4096 / (2 * M_PI * 32)) / (2 * std::log(150000.0));
  const double hi = 64 * std::log(4096 / (2 * M_PI * 1)) / (2 * std::log(150000.0));
  EXPECT_NEAR(lo, 8.0928, 1e-4);
  EXPECT_NEAR(hi, 17.398, 1e-3);
  for (int i = 0; i < 32; ++i) {
    const double omega = std::pow(150000.0, -2.0 * i / 64);
    const auto want = [&](double l, double h) {
      const double ramp = yarn_ramp(i, l, h);
      return omega / 32 * ramp + omega * (1 - ramp);
    };
    EXPECT_NEAR(a.inv_freq[i], want(lo, hi), std::ldexp(want(lo, hi), -40)) << i;
    EXPECT_NEAR(b.inv_freq[i], want(8, 18), std::ldexp(want(8, 18), -40)) << i;
    // Pairs 9..17 differ (pair 8 has ramp 0 on both sides, 18 ramp 1).
    EXPECT_EQ(std::fabs(a.inv_freq[i] / b.inv_freq[i] - 1) > 0x1p-23, i >= 9 && i <= 17) << i;
  }
}

TEST(GgufLlamaCpp, RopeDiffNamesTruncateFalseAsTheCause) {
  test::temp_dir d;
  const std::string g = d.file("gpt-oss.gguf");
  gpt_oss_writer().write(g);
  const auto r =
      test::run_cli({"rope", "diff", "hf:" + source("gguf/gpt_oss_20b_config.json"), "gguf:" + g});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict: differ"), std::string::npos) << r.out;
  for (const char* part :
       {"likely cause: YaRN truncate: A has truncate false in config.json, B rounds them (GGUF has "
        "no truncate key: llama.cpp always floors / ceils the correction range)",
        "rounded to [8, 18] in B; pairs 9-17 differ"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  EXPECT_NE(r.err.find("posenc: note: B: gpt-oss.rope.scaling.type = yarn: truncate true taken"),
            std::string::npos)
      << r.err;
}

// The converter writes the config's attention_factor as yarn_attn_factor; llama.cpp reads it only
// for grok, and there replaces it whenever the YaRN ramp is on.
TEST(GgufLlamaCpp, YarnAttnFactorSaysWhatLlamaCppDoesWithIt) {
  const double m4 = 0.1 * std::log(4.0) + 1;
  for (const std::string arch : {"qwen2", "grok"}) {
    for (int ext : {-1, 0, 1}) {
      if (arch == "qwen2" && ext != -1) continue;
      auto w = base_writer(arch, 3584, 28, 128, 1000000.0f, 32768);
      w.add_string(arch + ".rope.scaling.type", "yarn");
      w.add_f32(arch + ".rope.scaling.factor", 4.0f);
      w.add_u32(arch + ".rope.scaling.original_context_length", 32768);
      w.add_f32(arch + ".rope.scaling.yarn_attn_factor", 0.75f);
      if (ext >= 0) w.add_f32(arch + ".rope.scaling.yarn_ext_factor", static_cast<float>(ext));
      std::vector<std::string> warnings;
      const auto r = map_gguf(w, &warnings);
      ASSERT_TRUE(r.yarn_attn_factor.has_value());
      EXPECT_EQ(*r.yarn_attn_factor, 0.75);
      const auto f = rope_frequencies(r.config);
      if (arch == "grok" && ext == 0) {
        EXPECT_TRUE(r.yarn_attn_factor_used);
        EXPECT_EQ(f.attention_factor, 0.75);
        EXPECT_TRUE(any_has(warnings,
                            "grok.rope.scaling.yarn_attn_factor = 0.75 is used by "
                            "llama.cpp for grok"))
            << joined(warnings);
      } else {
        EXPECT_FALSE(r.yarn_attn_factor_used);
        EXPECT_NEAR(f.attention_factor, m4, 1e-15);
        EXPECT_TRUE(any_has(warnings, arch == "grok"
                                          ? "is read by llama.cpp for grok but replaced whenever "
                                            "the YaRN ramp is on"
                                          : "is ignored by llama.cpp for qwen2 (it reads the key "
                                            "only for grok); llama.cpp uses the YaRN magnitude "
                                            "0.1 ln(4) + 1 = 1.1386"))
            << joined(warnings);
      }
    }
  }
  // rope diff against the config it came from names the key instead of blaming the config.
  test::temp_dir d;
  auto j = nlohmann::json::parse(read_bytes(source("rope/qwen2_5_7b_yarn.json")));
  j["rope_scaling"]["attention_factor"] = 0.75;
  {
    std::ofstream o(d.file("config.json"));
    o << j.dump();
  }
  auto w = base_writer("qwen2", 3584, 28, 128, 1000000.0f, 32768);
  w.add_string("qwen2.rope.scaling.type", "yarn");
  w.add_f32("qwen2.rope.scaling.factor", 4.0f);
  w.add_u32("qwen2.rope.scaling.original_context_length", 32768);
  w.add_f32("qwen2.rope.scaling.yarn_attn_factor", 0.75f);
  w.write(d.file("q.gguf"));
  const auto r =
      test::run_cli({"rope", "diff", "hf:" + d.file("config.json"), "gguf:" + d.file("q.gguf")});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("likely cause: attention factor 0.75 in A, 1.13862943611198"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("; B (arch qwen2): qwen2.rope.scaling.yarn_attn_factor = 0.75 (the "
                       "config's attention_factor, written by llama.cpp's converter) is ignored "
                       "by llama.cpp for qwen2"),
            std::string::npos)
      << r.out;
}

// yarn_log_multiplier: deepseek2's is 0.1 mscale_all_dim (llama.cpp divides by 0.1 and takes
// mscale = mscale_all_dim), mistral3's is mscale_all_dim itself with mscale = 1; other
// architectures do not read it. mistral3's pairs are ggml NORM on rows LlamaModel permuted.
TEST(GgufLlamaCpp, YarnLogMultiplierPerArchitectureAndMistral3Layout) {
  const auto mscale = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1; };
  for (float lm : {1.0f, 0.5f}) {
    auto w = base_writer("mistral3", 4096, 32, 128, 1000000.0f, 262144);
    w.add_u32("mistral3.attention.key_length", 128);
    w.add_string("mistral3.rope.scaling.type", "yarn");
    w.add_f32("mistral3.rope.scaling.factor", 16.0f);
    w.add_u32("mistral3.rope.scaling.original_context_length", 16384);
    w.add_f32("mistral3.rope.scaling.yarn_beta_fast", 32.0f);
    w.add_f32("mistral3.rope.scaling.yarn_beta_slow", 1.0f);
    w.add_f32("mistral3.rope.scaling.yarn_log_multiplier", lm);
    const auto r = map_gguf(w);
    // get_mscale(16, 1) / get_mscale(16, lm): 1 for the published lm = 1, 1.0718 for 0.5.
    EXPECT_NEAR(rope_frequencies(r.config).attention_factor, mscale(16, 1) / mscale(16, lm), 1e-15)
        << lm;
    EXPECT_TRUE(any_has(r.notes, "read as mscale_all_dim")) << joined(r.notes);
    ASSERT_TRUE(r.layout.has_value());
    EXPECT_EQ(*r.layout, rope_layout::interleaved);
    EXPECT_TRUE(r.permuted_from_hf);
  }
  auto q = base_writer("qwen2", 3584, 28, 128, 1000000.0f, 32768);
  q.add_string("qwen2.rope.scaling.type", "yarn");
  q.add_f32("qwen2.rope.scaling.factor", 4.0f);
  q.add_u32("qwen2.rope.scaling.original_context_length", 32768);
  q.add_f32("qwen2.rope.scaling.yarn_log_multiplier", 0.5f);
  q.add_f32("qwen2.rope.scaling.yarn_beta_fast", 16.0f);
  std::vector<std::string> warnings;
  const auto r = map_gguf(q, &warnings);
  EXPECT_NEAR(rope_frequencies(r.config).attention_factor, mscale(4, 1), 1e-15);
  EXPECT_EQ(r.config.beta_fast, 32);
  EXPECT_TRUE(any_has(warnings,
                      "qwen2.rope.scaling.yarn_log_multiplier = 0.5 is not read by "
                      "llama.cpp for qwen2"))
      << joined(warnings);
  EXPECT_TRUE(any_has(warnings,
                      "qwen2.rope.scaling.yarn_beta_fast = 16 is written but llama.cpp "
                      "reads the YaRN betas only for grok and mistral3; for qwen2 it "
                      "uses beta_fast = 32"))
      << joined(warnings);
}

// Per-layer RoPE from llama.cpp's sliding-window layers: Gemma 3 (period 6, sliding base 10000
// unscaled by default), gpt-oss (period 2, sliding layers scaled like the full ones); another
// architecture is refused by name.
TEST(GgufLlamaCpp, SlidingLayersPerArchitecture) {
  auto g = base_writer("gemma3", 2560, 8, 256, 1000000.0f, 131072);
  g.add_u32("gemma3.block_count", 34);
  g.add_u32("gemma3.attention.key_length", 256);
  g.add_u32("gemma3.attention.sliding_window", 1024);
  g.add_string("gemma3.rope.scaling.type", "linear");
  g.add_f32("gemma3.rope.scaling.factor", 8.0f);
  const auto r = map_gguf(g);
  ASSERT_TRUE(r.sliding.has_value());
  EXPECT_EQ(r.sliding->theta, 10000.0);
  EXPECT_EQ(r.sliding->type, rope_type::default_);
  EXPECT_EQ(r.config.theta, 1e6);
  EXPECT_EQ(r.config.type, rope_type::linear);
  ASSERT_EQ(r.layer_types.size(), 34u);
  for (size_t i = 0; i < 34; ++i)
    EXPECT_EQ(r.layer_types[i], i % 6 == 5 ? "full_attention" : "sliding_attention") << i;
  EXPECT_TRUE(any_has(r.notes,
                      "gemma3.rope.freq_base_swa is absent: llama.cpp's gemma3 default "
                      "sliding-layer base 10000 taken"))
      << joined(r.notes);
  EXPECT_TRUE(any_has(r.notes,
                      "gemma3.attention.sliding_window_pattern is absent: llama.cpp's "
                      "gemma3 default period 6 taken"))
      << joined(r.notes);
  EXPECT_EQ(gguf_rope_layer(r, "sliding_attention").theta, 1e4);
  EXPECT_EQ(gguf_rope_layer(r, "full_attention").factor, 8.0);

  // An explicit base and period.
  g.add_f32("gemma3.rope.freq_base_swa", 20000.0f);
  g.add_u32("gemma3.attention.sliding_window_pattern", 4);
  const auto r2 = map_gguf(g);
  EXPECT_EQ(r2.sliding->theta, 20000.0);
  EXPECT_EQ(r2.layer_types[3], "full_attention");
  EXPECT_EQ(r2.layer_types[4], "sliding_attention");

  // gpt-oss: the sliding layers carry the same YaRN.
  const auto o = map_gguf(gpt_oss_writer());
  ASSERT_TRUE(o.sliding.has_value());
  EXPECT_EQ(rope_frequencies(*o.sliding).inv_freq, rope_frequencies(o.config).inv_freq);
  EXPECT_EQ(o.layer_types[0], "sliding_attention");
  EXPECT_EQ(o.layer_types[1], "full_attention");

  // Gemma 3 without a sliding window, and Llama: one RoPE; the layer type is refused by name.
  for (const auto& [w, msg] : std::vector<std::pair<gguf_writer, std::string>>{
           {base_writer("gemma3", 1152, 4, 256, 1000000.0f, 32768),
            "architecture gemma3 has one RoPE for every layer in llama.cpp"},
           {base_writer("llama", 4096, 32, 128, 500000.0f, 131072),
            "architecture llama has one RoPE for every layer in llama.cpp"}}) {
    const auto x = map_gguf(w);
    EXPECT_FALSE(x.sliding.has_value());
    try {
      gguf_rope_layer(x, "sliding_attention");
      ADD_FAILURE() << msg;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
  }
  try {
    gguf_rope_layer(r, "chunked_attention");
    ADD_FAILURE();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer type must be one of sliding_attention, "
                                         "full_attention (architecture gemma3), got "
                                         "'chunked_attention'"),
              std::string::npos)
        << e.what();
  }
}

TEST(GgufLlamaCpp, LayerTypeWithGgufOnTheCommandLine) {
  test::temp_dir d;
  auto g = base_writer("gemma3", 2560, 8, 256, 1000000.0f, 131072);
  g.add_u32("gemma3.attention.key_length", 256);
  g.add_u32("gemma3.attention.sliding_window", 1024);
  g.add_string("gemma3.rope.scaling.type", "linear");
  g.add_f32("gemma3.rope.scaling.factor", 8.0f);
  g.write(d.file("g.gguf"));
  base_writer("llama", 4096, 32, 128, 500000.0f, 131072).write(d.file("l.gguf"));
  for (const auto& [lt, theta, factor] : std::vector<std::tuple<std::string, double, double>>{
           {"sliding_attention", 1e4, 1}, {"full_attention", 1e6, 8}}) {
    const auto r = test::run_cli(
        {"rope", "freqs", "--gguf", d.file("g.gguf"), "--layer-type", lt, "--format", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["theta"].get<double>(), theta) << lt;
    EXPECT_EQ(j["factor"].get<double>(), factor) << lt;
    EXPECT_EQ(j["layer_type"], lt);
    EXPECT_NE(r.err.find("posenc: note: gemma3.rope.freq_base_swa is absent"), std::string::npos)
        << r.err;
  }
  const auto r = test::run_cli(
      {"rope", "freqs", "--gguf", d.file("l.gguf"), "--layer-type", "sliding_attention"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--layer-type: " + d.file("l.gguf") +
                       ": layer type 'sliding_attention': architecture llama has one RoPE for "
                       "every layer in llama.cpp"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty());
}

// Keys a conversion omits take llama.cpp's defaults, each with a note: GPT-NeoX and Phi-2
// conversions write no freq_base (10000); the rotary width defaults to the head dim.
TEST(GgufLlamaCpp, DefaultsTakenForOmittedKeysAreNoted) {
  gguf_writer w;
  w.add_string("general.architecture", "gptneox");
  w.add_u32("gptneox.context_length", 2048);
  w.add_u32("gptneox.embedding_length", 512);
  w.add_u32("gptneox.attention.head_count", 8);
  const auto r = map_gguf(w);
  EXPECT_EQ(r.config.theta, 10000.0);
  EXPECT_EQ(r.config.rotary_dim, 64);
  EXPECT_TRUE(any_has(r.notes,
                      "gptneox.rope.freq_base is absent: llama.cpp's default base 10000 "
                      "taken"))
      << joined(r.notes);
  EXPECT_TRUE(any_has(r.notes,
                      "gptneox.rope.dimension_count is absent: llama.cpp's default, the "
                      "head dim 64 (gptneox.embedding_length / "
                      "gptneox.attention.head_count), taken as the rotary width"))
      << joined(r.notes);
  // A file that states both keys takes no default.
  EXPECT_TRUE(map_gguf(base_writer("gptneox", 512, 8, 16, 10000.0f, 2048)).notes.empty());
  test::temp_dir d;
  w.write(d.file("n.gguf"));
  const auto c = test::run_cli({"rope", "freqs", "--gguf", d.file("n.gguf")});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("posenc: note: gptneox.rope.freq_base is absent: llama.cpp's default base "
                       "10000 taken"),
            std::string::npos)
      << c.err;
}

// ---- golden files written by llama.cpp's converter (tests/golden/gguf, manifest.json;
// scripts/golden/gguf.py, llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39) -----------------

namespace {

std::string golden(const std::string& rel) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/golden/gguf/" + rel;
}

// What llama.cpp computes from the file, written here from its loader and context
// (src/llama-model.cpp load_hparams, src/models/<arch>.cpp, src/llama-context.cpp) and ggml
// (ggml.c ggml_rope_yarn_corr_dims, ggml-cpu ops.cpp ggml_rope_cache_init / rope_yarn), every
// operation in float as there.
struct llama_cpp_rope {
  int64_t n_rot = 0;
  float freq_base = 10000.0f, freq_scale = 1.0f, ext_factor = 0.0f;
  float attn_factor = 1.0f;  // cparams.yarn_attn_factor, passed to ggml_rope_ext
  float corr_dims[2] = {0, 0};
  std::vector<float> freq_factors;  // rope_freqs, or rope_factors_long / _short by n_ctx_seq
};

llama_cpp_rope llama_cpp_reading(const gguf_file& f, int64_t n_ctx_seq) {
  const std::string arch = *f.get_string("general.architecture");
  const auto num = [&](const char* k) { return f.get_number(arch + "." + k); };
  llama_cpp_rope p;
  const auto key_length = f.get_size(arch + ".attention.key_length");
  const auto head = key_length ? *key_length
                               : *f.get_size(arch + ".embedding_length") /
                                     *f.get_size(arch + ".attention.head_count");
  p.n_rot = static_cast<int64_t>(f.get_size(arch + ".rope.dimension_count").value_or(head));
  p.freq_base = static_cast<float>(num("rope.freq_base").value_or(10000.0));
  const std::string type = f.get_string(arch + ".rope.scaling.type").value_or("linear");
  float ropescale = static_cast<float>(
      num("rope.scaling.factor").value_or(num("rope.scale_linear").value_or(0.0)));
  p.freq_scale = ropescale == 0.0f ? 1.0f : 1.0f / ropescale;
  if (type == "none") p.freq_scale = 1.0f;
  p.ext_factor = type == "yarn" ? 1.0f : 0.0f;
  const int64_t n_ctx_orig =
      static_cast<int64_t>(f.get_size(arch + ".rope.scaling.original_context_length")
                               .value_or(*f.get_size(arch + ".context_length")));
  float beta_fast = arch == "grok" ? 8.0f : 32.0f, beta_slow = 1.0f;
  if (arch == "grok" || arch == "mistral3") {
    beta_fast = static_cast<float>(num("rope.scaling.yarn_beta_fast").value_or(beta_fast));
    beta_slow = static_cast<float>(num("rope.scaling.yarn_beta_slow").value_or(beta_slow));
  }
  const auto corr_dim = [&](float beta) {
    return static_cast<float>(p.n_rot) *
           std::log(static_cast<float>(n_ctx_orig) / (beta * 2 * static_cast<float>(M_PI))) /
           (2 * std::log(p.freq_base));
  };
  if (p.ext_factor != 0.0f) {
    p.corr_dims[0] = std::max(0.0f, std::floor(corr_dim(beta_fast)));
    p.corr_dims[1] = std::min(static_cast<float>(p.n_rot - 1), std::ceil(corr_dim(beta_slow)));
    const auto get_mscale = [](float s, float m) {
      return s <= 1.0f ? 1.0f : 0.1f * m * std::log(s) + 1.0f;
    };
    const float factor = 1.0f / p.freq_scale;
    float log_mul = 0.0f;
    if (arch == "deepseek2")
      log_mul = static_cast<float>(num("rope.scaling.yarn_log_multiplier").value_or(0.0)) / 0.1f;
    if (arch == "mistral3")
      log_mul = static_cast<float>(num("rope.scaling.yarn_log_multiplier").value_or(0.0));
    if (log_mul != 0.0f) {
      const float mscale = arch == "deepseek2" && log_mul != 1.0f ? log_mul : 1.0f;
      p.attn_factor = get_mscale(factor, mscale) / get_mscale(factor, log_mul);
    } else {
      p.attn_factor = get_mscale(factor, 1.0f);
    }
    p.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  }
  p.attn_factor *= static_cast<float>(num("rope.scaling.attn_factor").value_or(1.0));
  const auto* t = f.find_tensor("rope_freqs.weight");
  if (!t && f.find_tensor("rope_factors_long.weight"))
    t = f.find_tensor(n_ctx_seq > n_ctx_orig ? "rope_factors_long.weight"
                                             : "rope_factors_short.weight");
  if (t) p.freq_factors = gguf_read_f32(f, *t);
  return p;
}

// ggml_rope_cache_init + rope_yarn: the angle of each pair at position pos. x86-64 builds
// (GCC, -mfma) contract the YaRN mix into one fma.
std::vector<float> llama_cpp_angles(const llama_cpp_rope& p, int32_t pos) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  std::vector<float> out(static_cast<size_t>(p.n_rot / 2));
  float theta = static_cast<float>(pos);
  for (int64_t i0 = 0; i0 < p.n_rot; i0 += 2) {
    const int64_t pair = i0 / 2;  // i0 is even, as in llama.cpp's i0 / 2
    const float ff = p.freq_factors.empty() ? 1.0f : p.freq_factors[pair];
    const float extrap = theta / ff, interp = p.freq_scale * extrap;
    float t = interp;
    if (p.ext_factor != 0.0f) {
      const float y = (static_cast<float>(pair) - p.corr_dims[0]) /
                      std::max(0.001f, p.corr_dims[1] - p.corr_dims[0]);
      const float ramp = (1 - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      t = std::fma(interp, 1 - ramp, extrap * ramp);
    }
    out[static_cast<size_t>(pair)] = t;
    theta *= theta_scale;
  }
  return out;
}

// The config.json each file came from, as posenc reads it, against the file (inv_freq and
// magnitude within the float32 storage of the factors, 2^-22 relative).
bool same_rope(const rope_freqs& a, const rope_freqs& b, std::string* why) {
  if (a.inv_freq.size() != b.inv_freq.size()) {
    *why = fmt::format("{} vs {} pairs", a.inv_freq.size(), b.inv_freq.size());
    return false;
  }
  for (size_t i = 0; i < a.inv_freq.size(); ++i)
    if (std::fabs(a.inv_freq[i] - b.inv_freq[i]) > std::ldexp(a.inv_freq[i], -22)) {
      *why = fmt::format("pair {}: {} vs {}", i, a.inv_freq[i], b.inv_freq[i]);
      return false;
    }
  if (std::fabs(a.attention_factor - b.attention_factor) > std::ldexp(a.attention_factor, -22)) {
    *why = fmt::format("attention factor {} vs {}", a.attention_factor, b.attention_factor);
    return false;
  }
  return true;
}

}  // namespace

TEST(GgufGolden, ManifestNamesTenFamiliesAndTheLlamaCppCommit) {
  const auto m = nlohmann::json::parse(read_bytes(golden("manifest.json")));
  EXPECT_EQ(m["llama_cpp"]["commit"], "6dafc14e50e1c248621618f3786f5005767a1d39");
  std::set<std::string> archs;
  for (const auto& [name, e] : m["files"].items()) {
    archs.insert(e["architecture"].get<std::string>());
    const auto b = read_bytes(golden(e["gguf"].get<std::string>()));
    EXPECT_EQ(b.size(), e["bytes"].get<size_t>()) << name;
    EXPECT_LE(b.size(), 32u * 1024) << name;  // metadata and one small tensor
    EXPECT_EQ(*gguf_parse(b, name).get_string("general.architecture"), e["architecture"]);
  }
  EXPECT_EQ(archs, (std::set<std::string>{"llama", "phi3", "deepseek2", "gpt-oss", "mistral3",
                                          "gemma3", "gptneox", "phi2", "qwen2vl", "falcon"}));
}

// Each golden file read by posenc against what llama.cpp's loader computes from it: ggml's
// float32 parameters bit for bit (base, theta scale, frequency scale, YaRN switch and correction
// dims, per-pair factors as stored), the angles of ggml's CPU pipeline bit for bit at positions
// up to the context length, and the magnitude within 2^-22 (llama.cpp forms it in float, posenc
// in double, rounded once).
TEST(GgufGolden, PosencReadsWhatLlamaCppComputes) {
  const auto m = nlohmann::json::parse(read_bytes(golden("manifest.json")));
  for (const auto& [name, e] : m["files"].items()) {
    const auto f = gguf_read(golden(e["gguf"].get<std::string>()));
    std::vector<std::string> warnings;
    const auto r = gguf_rope_config(f, &warnings);
    // llama.cpp's loader requires the context length (n_ctx_train).
    const auto ctx_key = f.get_size(r.arch + ".context_length");
    ASSERT_TRUE(ctx_key.has_value()) << name;
    const int64_t ctx = static_cast<int64_t>(*ctx_key);
    for (int64_t seq : {int64_t{0}, ctx}) {
      SCOPED_TRACE(name + " seq_len " + std::to_string(seq));
      const auto want = llama_cpp_reading(f, seq);
      const auto fr = rope_frequencies(r.config, seq);
      ASSERT_TRUE(fr.ggml.has_value());
      const auto& g = *fr.ggml;
      EXPECT_EQ(fr.rotary_dim, want.n_rot);
      EXPECT_EQ(g.freq_base, want.freq_base);
      EXPECT_EQ(g.theta_scale, std::pow(want.freq_base, -2.0f / static_cast<float>(want.n_rot)));
      EXPECT_EQ(g.freq_scale, want.freq_scale);
      EXPECT_EQ(g.ext_factor, want.ext_factor);
      EXPECT_EQ(g.corr_dims[0], want.corr_dims[0]);
      EXPECT_EQ(g.corr_dims[1], want.corr_dims[1]);
      EXPECT_EQ(g.freq_factors, want.freq_factors);
      const float ggml_magnitude =
          want.attn_factor *
          (want.ext_factor != 0.0f ? 1.0f + 0.1f * std::log(1.0f / want.freq_scale) : 1.0f);
      EXPECT_NEAR(fr.attention_factor, ggml_magnitude, std::ldexp(ggml_magnitude, -22));
      std::vector<float> th(static_cast<size_t>(fr.rotary_dim / 2));
      for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{17}, int64_t{1000},
                          int64_t{4095}, int64_t{4096}, ctx / 2 + 1, ctx - 1}) {
        rope_angles_f32(fr, rope_angle::ggml_f32, pos, th.data());
        EXPECT_EQ(th, llama_cpp_angles(want, static_cast<int32_t>(pos))) << "position " << pos;
      }
    }
  }
}

// ... and against the config.json it came from: equivalent, layouts included, except gpt-oss,
// whose truncate: false the conversion loses (pairs 9-17 of the correction range); the sliding
// layers of Gemma 3 and gpt-oss against the config's sliding_attention.
TEST(GgufGolden, EquivalentToTheConfigItCameFromOrANamedDifference) {
  const auto m = nlohmann::json::parse(read_bytes(golden("manifest.json")));
  for (const auto& [name, e] : m["files"].items()) {
    SCOPED_TRACE(name);
    const auto f = gguf_read(golden(e["gguf"].get<std::string>()));
    const auto r = gguf_rope_config(f, nullptr);
    const auto cfg = nlohmann::json::parse(read_bytes(golden(e["config"].get<std::string>())));
    auto hf = rope_config_from_json(cfg, nullptr);
    const bool gpt_oss = r.arch == "gpt-oss";
    std::string why;
    if (gpt_oss) {
      // The named difference: truncate false in config.json, rounded boundaries in llama.cpp.
      EXPECT_FALSE(hf.truncate);
      EXPECT_TRUE(r.config.truncate);
      const auto a = rope_frequencies(hf), b = rope_frequencies(r.config);
      for (size_t i = 0; i < a.inv_freq.size(); ++i)
        EXPECT_EQ(std::fabs(a.inv_freq[i] / b.inv_freq[i] - 1) > 0x1p-22, i >= 9 && i <= 17) << i;
      hf.truncate = true;
    }
    EXPECT_TRUE(same_rope(rope_frequencies(hf), rope_frequencies(r.config), &why)) << why;
    EXPECT_EQ(hf.rotary_dim, r.config.rotary_dim);
    const auto hl = hf_rope_layout(cfg);
    ASSERT_TRUE(hl.has_value());
    ASSERT_TRUE(r.layout.has_value()) << r.arch;
    EXPECT_EQ(*hl, r.permuted_from_hf ? rope_layout::half : *r.layout);
    if (r.sliding) {
      auto hs = rope_config_from_json(cfg, "sliding_attention", nullptr);
      if (gpt_oss) hs.truncate = true;
      EXPECT_TRUE(same_rope(rope_frequencies(hs), rope_frequencies(*r.sliding), &why)) << why;
    }
  }
}
