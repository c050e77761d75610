// Learned absolute position table (BERT, Devlin et al. 2019; GPT-2, Radford et al. 2019):
// initialisation, lookup and its backward, h = E + P, and a checksummed file format.
#include "posenc/encodings/learned.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/rng.hpp"

namespace posenc {

namespace {

constexpr char magic[8] = {'P', 'S', 'N', 'C', 'L', 'R', 'N', '\0'};
constexpr size_t header_bytes = 40;
constexpr uint32_t dtype_f32 = 1;

void validate_shape(const learned_table& t, const char* what) {
  if (t.rows < 1 || t.width < 1)
    fail("{} must have rows >= 1 and width >= 1, got ({}, {})", what, t.rows, t.width);
  const size_t want = static_cast<size_t>(t.rows) * static_cast<size_t>(t.width);
  if (t.weights.size() != want)
    fail("{} weights must have rows x width = {} x {} = {} elements, got {}", what, t.rows, t.width,
         want, t.weights.size());
}

void validate_positions(const learned_table& t, std::span<const int64_t> positions) {
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t p = positions[i];
    if (p < 0) fail("positions[{}] must be non-negative, got {}", i, p);
    if (p >= t.rows)
      fail(
          "position {} is outside the learned table: it has {} rows (positions 0..{}); no "
          "embedding exists there",
          p, t.rows, t.rows - 1);
  }
}

void validate_rows(size_t got, std::span<const int64_t> positions, int64_t width,
                   const char* what) {
  const size_t want = positions.size() * static_cast<size_t>(width);
  if (got != want)
    fail("{} must have positions.size() x width = {} x {} = {} elements, got {}", what,
         positions.size(), width, want, got);
}

template <typename T>
void put(std::vector<std::byte>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}

template <typename T>
T get(std::span<const std::byte> b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

}  // namespace

learned_table learned_init(int64_t rows, int64_t width, uint64_t seed, double stddev) {
  if (rows < 1) fail("rows must be >= 1, got {}", rows);
  if (width < 1) fail("width must be >= 1, got {}", width);
  if (!std::isfinite(stddev) || stddev < 0)
    fail("stddev must be a finite number >= 0, got {}", stddev);
  checked_bytes("learned table", static_cast<unsigned long long>(rows),
                static_cast<unsigned long long>(width), 1, sizeof(float));
  learned_table t;
  t.rows = rows;
  t.width = width;
  t.weights.resize(static_cast<size_t>(rows) * static_cast<size_t>(width));
  // Row-major draws from one stream: the table for a seed never depends on thread count.
  rng g(seed);
  for (float& v : t.weights) v = static_cast<float>(stddev * g.normal());
  return t;
}

void learned_lookup(const learned_table& t, std::span<const int64_t> positions,
                    std::span<float> out) {
  validate_shape(t, "table");
  validate_positions(t, positions);
  validate_rows(out.size(), positions, t.width, "out");
  const size_t d = static_cast<size_t>(t.width);
  // out: (N, d); row n is a copy of P[positions[n]].
  for (size_t n = 0; n < positions.size(); ++n)
    std::memcpy(out.data() + n * d, t.weights.data() + static_cast<size_t>(positions[n]) * d,
                d * sizeof(float));
}

void learned_lookup_backward(std::span<const float> grad_out, std::span<const int64_t> positions,
                             learned_table& grad_table) {
  validate_shape(grad_table, "grad_table");
  validate_positions(grad_table, positions);
  validate_rows(grad_out.size(), positions, grad_table.width, "grad_out");
  const size_t d = static_cast<size_t>(grad_table.width);
  // Forward: out[n, :] = P[positions[n], :]  =>  dP[positions[n], :] += grad_out[n, :].
  // Serial over n: two rows n may name the same position.
  for (size_t n = 0; n < positions.size(); ++n) {
    float* g = grad_table.weights.data() + static_cast<size_t>(positions[n]) * d;
    const float* go = grad_out.data() + n * d;
    for (size_t c = 0; c < d; ++c) g[c] += go[c];
  }
}

void add_positions(std::span<const float> token_embeddings, const learned_table& t,
                   std::span<const int64_t> positions, std::span<float> out) {
  validate_shape(t, "table");
  validate_positions(t, positions);
  validate_rows(token_embeddings.size(), positions, t.width, "token_embeddings");
  validate_rows(out.size(), positions, t.width, "out");
  const size_t d = static_cast<size_t>(t.width);
  // h[n, :] = E[n, :] + P[positions[n], :]; element-wise, so out may alias token_embeddings.
  for (size_t n = 0; n < positions.size(); ++n) {
    const float* p = t.weights.data() + static_cast<size_t>(positions[n]) * d;
    const float* e = token_embeddings.data() + n * d;
    float* o = out.data() + n * d;
    for (size_t c = 0; c < d; ++c) o[c] = e[c] + p[c];
  }
}

std::vector<std::byte> learned_serialize(const learned_table& t) {
  validate_shape(t, "table");
  const size_t payload = t.weights.size() * sizeof(float);
  std::vector<std::byte> b(header_bytes + payload);
  std::memcpy(b.data(), magic, 8);
  put<uint32_t>(b, 8, learned_file_version);
  put<uint32_t>(b, 12, dtype_f32);
  put<int64_t>(b, 16, t.rows);
  put<int64_t>(b, 24, t.width);
  std::memcpy(b.data() + header_bytes, t.weights.data(), payload);
  put<uint32_t>(b, 32, crc32(std::span<const std::byte>(b).subspan(header_bytes)));
  put<uint32_t>(b, 36, crc32(std::span<const std::byte>(b).first(36)));
  return b;
}

learned_table learned_parse(std::span<const std::byte> b, const std::string& name) {
  if (b.size() < header_bytes)
    fail_io("{}: truncated learned table: {} bytes, shorter than the {}-byte header", name,
            b.size(), header_bytes);
  if (std::memcmp(b.data(), magic, 8) != 0)
    fail_io("{}: not a posenc learned table (bad magic; expected \"PSNCLRN\\0\")", name);
  const auto version = get<uint32_t>(b, 8);
  if (version != learned_file_version)
    fail_io("{}: unsupported learned table version {} (this build reads version {})", name, version,
            learned_file_version);
  if (get<uint32_t>(b, 36) != crc32(b.first(36)))
    fail_io("{}: corrupt learned table header (header checksum mismatch)", name);
  const auto dt = get<uint32_t>(b, 12);
  if (dt != dtype_f32)
    fail_io("{}: unsupported learned table dtype code {} (only 1 = float32)", name, dt);
  const auto rows = get<int64_t>(b, 16), width = get<int64_t>(b, 24);
  if (rows < 1 || width < 1)
    fail_io("{}: corrupt learned table: shape ({}, {}) must be positive", name, rows, width);
  if (static_cast<unsigned long long>(rows) >
      max_alloc_bytes / sizeof(float) / static_cast<unsigned long long>(width))
    fail_io("{}: learned table shape ({}, {}) exceeds the {}-byte memory cap", name, rows, width,
            max_alloc_bytes);
  const size_t payload = static_cast<size_t>(rows) * static_cast<size_t>(width) * sizeof(float);
  if (b.size() != header_bytes + payload)
    fail_io("{}: {} learned table: shape ({}, {}) needs {} bytes, the file has {}", name,
            b.size() < header_bytes + payload ? "truncated" : "oversized (trailing bytes)", rows,
            width, header_bytes + payload, b.size());
  const auto body = b.subspan(header_bytes);
  if (get<uint32_t>(b, 32) != crc32(body))
    fail_io("{}: corrupt learned table (payload checksum mismatch)", name);
  learned_table t;
  t.rows = rows;
  t.width = width;
  t.weights.resize(static_cast<size_t>(rows) * static_cast<size_t>(width));
  std::memcpy(t.weights.data(), body.data(), payload);
  return t;
}

void learned_save(const std::string& path, const learned_table& t) {
  write_file_atomic(path, learned_serialize(t));
}

learned_table learned_load(const std::string& path) {
  const auto bytes = read_file(path);
  return learned_parse(bytes, path);
}

}  // namespace posenc
