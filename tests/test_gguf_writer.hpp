// A small GGUF writer for the tests, written from the format specification (ggml docs/gguf.md),
// independent of the reader under test: little-endian header "GGUF", u32 version, u64 tensor
// count, u64 kv count; key-value pairs (u64-length string key, u32 type, value); tensor infos
// (name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset into the data section); padding
// to the alignment; tensor data, each tensor starting at a multiple of the alignment.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace posenc::test {

class gguf_writer {
 public:
  enum type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12
  };

  uint32_t version = 3;
  uint64_t alignment = 32;  // must match a general.alignment key when one is added

  void add_u32(const std::string& key, uint32_t v) { scalar(key, u32, v, 4); }
  void add_i32(const std::string& key, int32_t v) { scalar(key, i32, static_cast<uint32_t>(v), 4); }
  void add_u64(const std::string& key, uint64_t v) { scalar(key, u64, v, 8); }
  void add_i64(const std::string& key, int64_t v) { scalar(key, i64, static_cast<uint64_t>(v), 8); }
  void add_u8(const std::string& key, uint8_t v) { scalar(key, u8, v, 1); }
  void add_i8(const std::string& key, int8_t v) { scalar(key, i8, static_cast<uint8_t>(v), 1); }
  void add_u16(const std::string& key, uint16_t v) { scalar(key, u16, v, 2); }
  void add_i16(const std::string& key, int16_t v) { scalar(key, i16, static_cast<uint16_t>(v), 2); }
  void add_bool(const std::string& key, bool v) { scalar(key, boolean, v ? 1 : 0, 1); }
  void add_f32(const std::string& key, float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    scalar(key, f32, u, 4);
  }
  void add_f64(const std::string& key, double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    scalar(key, f64, u, 8);
  }
  void add_string(const std::string& key, const std::string& v) {
    begin(key, string);
    str(kv_, v);
  }
  void add_array_u32(const std::string& key, const std::vector<uint32_t>& v) {
    begin(key, array);
    put(kv_, u32, 4);
    put(kv_, v.size(), 8);
    for (auto x : v) put(kv_, x, 4);
  }
  void add_array_u64(const std::string& key, const std::vector<uint64_t>& v) {
    begin(key, array);
    put(kv_, u64, 4);
    put(kv_, v.size(), 8);
    for (auto x : v) put(kv_, x, 8);
  }
  void add_array_f32(const std::string& key, const std::vector<float>& v) {
    begin(key, array);
    put(kv_, f32, 4);
    put(kv_, v.size(), 8);
    for (float x : v) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      put(kv_, u, 4);
    }
  }
  void add_array_string(const std::string& key, const std::vector<std::string>& v) {
    begin(key, array);
    put(kv_, string, 4);
    put(kv_, v.size(), 8);
    for (const auto& s : v) str(kv_, s);
  }
  // An array of arrays of u8 (the specification allows nesting).
  void add_array_of_u8_arrays(const std::string& key, const std::vector<std::vector<uint8_t>>& v) {
    begin(key, array);
    put(kv_, array, 4);
    put(kv_, v.size(), 8);
    for (const auto& a : v) {
      put(kv_, u8, 4);
      put(kv_, a.size(), 8);
      for (auto x : a) put(kv_, x, 1);
    }
  }
  // A tensor with its data (ggml type F32 = 0 here; F16 = 1 for raw 2-byte payloads).
  void add_tensor_f32(const std::string& name, const std::vector<uint64_t>& ne,
                      const std::vector<float>& data) {
    std::vector<uint8_t> bytes;
    for (float x : data) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      put(bytes, u, 4);
    }
    tensors_.push_back({name, ne, 0, bytes, 0});
  }
  void add_tensor_raw(const std::string& name, const std::vector<uint64_t>& ne, uint32_t ggml,
                      const std::vector<uint8_t>& data) {
    tensors_.push_back({name, ne, ggml, data, 0});
  }
  // A tensor declared with `declared_bytes` of data that is not stored (the file is expected
  // to be extended to its full size, e.g. sparsely, by the caller).
  void add_tensor_declared(const std::string& name, const std::vector<uint64_t>& ne, uint32_t ggml,
                           uint64_t declared_bytes) {
    tensors_.push_back({name, ne, ggml, {}, declared_bytes});
  }

  // The whole file image; declared-only tensors get offsets but no bytes (they must come last).
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    for (char c : std::string("GGUF")) out.push_back(static_cast<uint8_t>(c));
    put(out, version, 4);
    put(out, tensors_.size(), 8);
    put(out, n_kv_, 8);
    out.insert(out.end(), kv_.begin(), kv_.end());
    uint64_t off = 0;
    for (const auto& t : tensors_) {
      str(out, t.name);
      put(out, t.ne.size(), 4);
      for (auto d : t.ne) put(out, d, 8);
      put(out, t.ggml, 4);
      put(out, off, 8);
      off += round_up(t.data.empty() ? t.declared : t.data.size());
    }
    out.resize(round_up(out.size()), 0);
    for (const auto& t : tensors_) {
      if (t.data.empty()) break;
      out.insert(out.end(), t.data.begin(), t.data.end());
      out.resize(round_up(out.size()), 0);
    }
    return out;
  }
  void write(const std::string& path) const {
    const auto b = bytes();
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

 private:
  struct tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t ggml;
    std::vector<uint8_t> data;
    uint64_t declared;
  };
  uint64_t round_up(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }
  static void put(std::vector<uint8_t>& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  static void str(std::vector<uint8_t>& out, const std::string& s) {
    put(out, s.size(), 8);
    out.insert(out.end(), s.begin(), s.end());
  }
  void begin(const std::string& key, uint32_t t) {
    str(kv_, key);
    put(kv_, t, 4);
    ++n_kv_;
  }
  void scalar(const std::string& key, uint32_t t, uint64_t v, int n) {
    begin(key, t);
    put(kv_, v, n);
  }
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  std::vector<tensor> tensors_;
};

}  // namespace posenc::test
