#include "posenc/positions/positions.hpp"

#include <algorithm>

#include "posenc/core/error.hpp"

namespace posenc {
namespace {

// Ids are kept below 2^62 so that any difference kpos - qpos (and its negation) fits in int64.
constexpr int64_t kMaxPosition = int64_t{1} << 62;

void check_start(int64_t start, const char* fn) {
  if (start < 0 || start > kMaxPosition) fail("{}: start must be in [0, 2^62], got {}", fn, start);
}

}  // namespace

std::vector<int64_t> positions_fresh(int64_t T, int64_t start) {
  if (T < 0) fail("positions_fresh: T must be >= 0, got {}", T);
  check_start(start, "positions_fresh");
  if (T > kMaxPosition - start)
    fail("positions_fresh: start + T must be <= 2^62, got start {} and T {}", start, T);
  checked_bytes("positions", static_cast<unsigned long long>(T), 1, 1, sizeof(int64_t));
  std::vector<int64_t> p(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) p[t] = start + t;
  return p;
}

std::vector<int64_t> positions_continuation(int64_t prefix_len, int64_t T) {
  if (prefix_len < 0) fail("positions_continuation: prefix_len must be >= 0, got {}", prefix_len);
  if (T < 0) fail("positions_continuation: T must be >= 0, got {}", T);
  return positions_fresh(T, prefix_len);
}

std::vector<int64_t> positions_from_mask(std::span<const uint8_t> mask, int64_t B, int64_t T,
                                         int64_t start) {
  if (B < 0) fail("positions_from_mask: B must be >= 0, got {}", B);
  if (T < 0) fail("positions_from_mask: T must be >= 0, got {}", T);
  check_start(start, "positions_from_mask");
  if (T > 0 && B > static_cast<int64_t>(mask.size()) / T)
    fail("positions_from_mask: mask must have B * T = {} * {} entries, got {}", B, T, mask.size());
  if (static_cast<int64_t>(mask.size()) != B * T)
    fail("positions_from_mask: mask must have B * T = {} * {} = {} entries, got {}", B, T, B * T,
         mask.size());
  if (T > kMaxPosition - start)
    fail("positions_from_mask: start + T must be <= 2^62, got start {} and T {}", start, T);
  std::vector<int64_t> p(mask.size());
  for (int64_t b = 0; b < B; ++b) {
    int64_t next = start;
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * T + t);
      p[i] = mask[i] ? next++ : pad_position;
    }
  }
  return p;
}

void validate_cu_seqlens(std::span<const int64_t> cu, int64_t total, const char* arg) {
  if (cu.empty()) fail("{} must have at least one entry (0), got an empty list", arg);
  if (cu[0] != 0) fail("{} must start at 0, got {}", arg, cu[0]);
  for (size_t d = 1; d < cu.size(); ++d) {
    if (cu[d] < cu[d - 1])
      fail("{} must be non-decreasing, got {} after {} at index {}", arg, cu[d], cu[d - 1], d);
  }
  if (cu.back() != total)
    fail("{} must end at the number of tokens {}, got {}", arg, total, cu.back());
}

std::vector<int64_t> doc_ids_from_cu_seqlens(std::span<const int64_t> cu) {
  if (cu.empty()) fail("cu_seqlens must have at least one entry (0), got an empty list");
  validate_cu_seqlens(cu, cu.back());
  checked_bytes("document ids", static_cast<unsigned long long>(cu.back()), 1, 1, sizeof(int64_t));
  std::vector<int64_t> ids(static_cast<size_t>(cu.back()));
  for (size_t d = 0; d + 1 < cu.size(); ++d)
    for (int64_t t = cu[d]; t < cu[d + 1]; ++t) ids[t] = static_cast<int64_t>(d);
  return ids;
}

std::vector<int64_t> positions_packed(std::span<const int64_t> cu, int64_t start) {
  check_start(start, "positions_packed");
  auto ids = doc_ids_from_cu_seqlens(cu);
  for (size_t d = 0; d + 1 < cu.size(); ++d) {
    if (cu[d + 1] - cu[d] > kMaxPosition - start)
      fail("positions_packed: start + document length must be <= 2^62, got {} + {}", start,
           cu[d + 1] - cu[d]);
  }
  std::vector<int64_t> p(ids.size());
  for (size_t d = 0; d + 1 < cu.size(); ++d)
    for (int64_t t = cu[d]; t < cu[d + 1]; ++t) p[t] = start + (t - cu[d]);
  return p;
}

std::vector<int64_t> positions_packed_from_doc_ids(std::span<const int64_t> doc_ids,
                                                   int64_t start) {
  check_start(start, "positions_packed_from_doc_ids");
  const int64_t n = static_cast<int64_t>(doc_ids.size());
  if (n > kMaxPosition - start)
    fail("positions_packed_from_doc_ids: start + number of tokens must be <= 2^62, got {} + {}",
         start, n);
  std::vector<int64_t> p(doc_ids.size());
  int64_t next = start;
  for (size_t t = 0; t < doc_ids.size(); ++t) {
    if (doc_ids[t] < 0) fail("doc_ids must be >= 0, got {} at index {}", doc_ids[t], t);
    if (t > 0 && doc_ids[t] != doc_ids[t - 1]) next = start;
    p[t] = next++;
  }
  return p;
}

void validate_positions(std::span<const int64_t> positions, int64_t n, const char* arg,
                        bool allow_pad) {
  if (static_cast<int64_t>(positions.size()) != n)
    fail("{} must have shape ({},), got ({},)", arg, n, positions.size());
  for (size_t t = 0; t < positions.size(); ++t) {
    const int64_t p = positions[t];
    if (allow_pad && p == pad_position) continue;
    if (p < 0 || p > kMaxPosition)
      fail("{} must be in [0, 2^62]{}, got {} at index {}", arg, allow_pad ? " or -1 (pad)" : "", p,
           t);
  }
}

const char* mrope_rule_name(mrope_rule r) {
  return r == mrope_rule::transformers_v4 ? "transformers_v4" : "transformers_v5";
}

mrope_rule mrope_rule_from_name(const std::string& name, const char* arg) {
  if (name == "transformers_v5" || name == "v5") return mrope_rule::transformers_v5;
  if (name == "transformers_v4" || name == "v4") return mrope_rule::transformers_v4;
  fail(
      "{} must be transformers_v5 (text after a vision segment at next + max(h, w)) or "
      "transformers_v4 (next + max(t, h, w)), got '{}'",
      arg, name);
}

std::vector<int64_t> positions_mrope(std::span<const mrope_segment> segments, int64_t start,
                                     mrope_rule rule) {
  if (start < 0) fail("start must be >= 0, got {}", start);
  constexpr int64_t max_tokens = int64_t{1} << 31;
  int64_t n = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& g = segments[i];
    if (g.text < 0 || g.text > max_tokens)
      fail("segments[{}].text must be in [0, 2^31], got {}", i, g.text);
    const bool none = g.t == 0 && g.h == 0 && g.w == 0;
    for (int64_t d : {g.t, g.h, g.w})
      if (!none && (d < 1 || d > max_tokens))
        fail(
            "segments[{}] image grid (t, h, w) must be all 0 (no image) or all in [1, 2^31], got "
            "({}, {}, {})",
            i, g.t, g.h, g.w);
    n += g.text;
    if (!none) {
      if (g.t > max_tokens / g.h || g.t * g.h > max_tokens / g.w)
        fail("segments[{}] image grid ({}, {}, {}) has more than 2^31 tokens", i, g.t, g.h, g.w);
      n += g.t * g.h * g.w;
    }
    if (n > max_tokens) fail("segments hold more than 2^31 tokens");
  }
  if (start > (int64_t{1} << 62) - n) fail("start + tokens must be <= 2^62, got start {}", start);
  std::vector<int64_t> out(static_cast<size_t>(3 * n));
  int64_t* row[3] = {out.data(), out.data() + n, out.data() + 2 * n};
  int64_t k = 0, next = start;
  for (const auto& g : segments) {
    for (int64_t i = 0; i < g.text; ++i, ++k, ++next) row[0][k] = row[1][k] = row[2][k] = next;
    if (g.t == 0) continue;
    for (int64_t a = 0; a < g.t; ++a)
      for (int64_t b = 0; b < g.h; ++b)
        for (int64_t c = 0; c < g.w; ++c, ++k) {
          row[0][k] = next + a;
          row[1][k] = next + b;
          row[2][k] = next + c;
        }
    next += rule == mrope_rule::transformers_v4 ? std::max({g.t, g.h, g.w}) : std::max(g.h, g.w);
  }
  return out;
}

}  // namespace posenc
