// The GGUF reader's memory bound (include/posenc/formats/gguf.hpp): while it reads, its heap
// allocations peak at no more than 4 x B + W + 16 KiB, B the bytes of metadata it has read (up to
// the error, or to the end of the tensor infos), W the read window of gguf_read (min(1 MiB, file
// size); 0 for gguf_parse, whose image the caller holds).
//
// Measured, not estimated: this executable (and only this one, posenc_alloc_tests) replaces the
// global operator new and delete with ones that count the bytes malloc gives each block
// (malloc_usable_size: the rounding up included) and keep the high-water mark. The files are
// issue 48's: a million one-letter keys (17 MB, refused as duplicates after all of them are
// read), a million distinct keys (accepted), the same with a duplicate at the end or cut inside
// the last value, and counts declared far beyond the bytes that follow them.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/formats/gguf.hpp"
#include "test_gguf_writer.hpp"

namespace {

std::atomic<size_t> live{0};
std::atomic<size_t> peak{0};

void* counted(void* p) {
  if (!p) throw std::bad_alloc();
  const size_t now = live += malloc_usable_size(p);
  size_t was = peak.load();
  while (now > was && !peak.compare_exchange_weak(was, now)) {
  }
  return p;
}
void uncounted(void* p) noexcept {
  if (!p) return;
  live -= malloc_usable_size(p);
  std::free(p);
}
void* aligned(size_t n, std::align_val_t a) {
  void* p = nullptr;
  const size_t al = std::max(static_cast<size_t>(a), sizeof(void*));
  return counted(posix_memalign(&p, al, n ? n : 1) == 0 ? p : nullptr);
}

}  // namespace

// NOLINTBEGIN(misc-new-delete-overloads): every replaceable form, each forwarding to the two above
void* operator new(size_t n) {
  return counted(std::malloc(n ? n : 1));
}
void* operator new[](size_t n) {
  return counted(std::malloc(n ? n : 1));
}
void* operator new(size_t n, std::align_val_t a) {
  return aligned(n, a);
}
void* operator new[](size_t n, std::align_val_t a) {
  return aligned(n, a);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  void* p = std::malloc(n ? n : 1);
  return p ? counted(p) : nullptr;
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  void* p = std::malloc(n ? n : 1);
  return p ? counted(p) : nullptr;
}
void operator delete(void* p) noexcept {
  uncounted(p);
}
void operator delete[](void* p) noexcept {
  uncounted(p);
}
void operator delete(void* p, size_t) noexcept {
  uncounted(p);
}
void operator delete[](void* p, size_t) noexcept {
  uncounted(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  uncounted(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  uncounted(p);
}
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  uncounted(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  uncounted(p);
}
// NOLINTEND(misc-new-delete-overloads)

using posenc::test::gguf_writer;

namespace {

constexpr size_t slack = 16 << 10;  // the error message, the path, fmt's buffers
constexpr size_t window = 1 << 20;  // gguf_read's read window

struct measured {
  size_t peak = 0;    // the high-water mark of the call, above what was live before it
  size_t kept = 0;    // what the result holds once the call returned (0 when it threw)
  std::string error;  // the io_error's message, "" when the file was accepted
};

template <typename Read>
measured measure(const Read& read) {
  measured m;
  const size_t before = live.load();
  peak = before;
  try {
    const posenc::gguf_file f = read();
    m.kept = live.load() - before;
  } catch (const posenc::io_error& e) {
    m.error = e.what();
  }
  m.peak = peak.load() - before;
  return m;
}

// The file image: a header declaring n_kv pairs and no tensor, then the pairs as written.
std::vector<uint8_t> image(uint64_t n_kv, const std::vector<uint8_t>& pairs) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  for (uint64_t v : {uint64_t{0}, n_kv})
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  b.insert(b.end(), pairs.begin(), pairs.end());
  return b;
}

// One pair: u64 key length, the key, type u32 (4), a u32 value.
void put_pair(std::vector<uint8_t>& out, const std::string& key, uint32_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(key.size() >> (8 * i)));
  out.insert(out.end(), key.begin(), key.end());
  for (uint32_t v : {uint32_t{4}, value})
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Key i of a million distinct keys of 1 to 4 letters (64 letters: 64^3 < 10^6 < 64^4).
std::string distinct_key(uint32_t i) {
  static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._";
  std::string k;
  do {
    k += letters[i % 64];
    i /= 64;
  } while (i > 0);
  return k;
}

constexpr uint32_t million = 1000000;

// Reads `b` in memory and from a file; checks each peak against 4 x `read_bytes` (+ the window
// for the file) and prints the figures.
void check(const std::string& what, const std::vector<uint8_t>& b, uint64_t read_bytes,
           const std::string& expected_error) {
  const auto mem = measure([&] { return posenc::gguf_parse(b, "m.gguf"); });
  const std::string path = ::testing::TempDir() + "/gguf_memory.gguf";
  {
    std::ofstream o(path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  const auto file = measure([&] { return posenc::gguf_read(path); });
  std::remove(path.c_str());
  const size_t w = std::min<size_t>(window, b.size());
  std::printf(
      "%s: %zu bytes, %llu read: peak %zu bytes in memory (%.2f x read), %zu from the file "
      "(%.2f x read + window); kept %zu\n",
      what.c_str(), b.size(), static_cast<unsigned long long>(read_bytes), mem.peak,
      static_cast<double>(mem.peak) / static_cast<double>(read_bytes), file.peak,
      static_cast<double>(file.peak - std::min(file.peak, w)) / static_cast<double>(read_bytes),
      mem.kept);
  EXPECT_LE(mem.peak, 4 * read_bytes + slack) << what;
  EXPECT_LE(file.peak, 4 * read_bytes + w + slack) << what;
  EXPECT_LE(mem.kept, 4 * read_bytes + slack) << what;
  if (expected_error.empty()) {
    EXPECT_EQ(mem.error, "") << what;
    EXPECT_EQ(file.error, "") << what;
  } else {
    EXPECT_NE(mem.error.find(expected_error), std::string::npos) << what << ": " << mem.error;
    EXPECT_NE(file.error.find(expected_error), std::string::npos) << what << ": " << file.error;
  }
}

}  // namespace

// Issue 48's file: 10^6 pairs of key "a" and a u32, 17 bytes each. Refused (kv[1] repeats kv[0]),
// but only after every pair is read: B is the whole file.
TEST(GgufMemory, AMillionOneLetterKeys) {
  std::vector<uint8_t> pairs;
  pairs.reserve(17 * million);
  for (uint32_t i = 0; i < million; ++i) put_pair(pairs, "a", 7);
  const auto b = image(million, pairs);
  ASSERT_EQ(b.size(), 24u + 17u * million);
  check("a million one-letter keys", b, b.size(),
        "offset 41: kv[1] (a): duplicate key: kv[0] at offset 24 has it already");
}

// A million distinct keys of 1 to 4 letters: accepted, then refused with a repeat of kv[0] at the
// end, and refused when cut inside the last value.
TEST(GgufMemory, AMillionDistinctKeysAcceptedAndRefused) {
  std::vector<uint8_t> pairs;
  pairs.reserve(20 * million + 32);
  for (uint32_t i = 0; i < million; ++i) put_pair(pairs, distinct_key(i), i);
  const auto accepted = image(million, pairs);
  check("a million distinct keys", accepted, accepted.size(), "");

  const uint64_t dup_at = accepted.size();
  put_pair(pairs, distinct_key(0), 1);
  const auto dup = image(million + 1, pairs);
  check(
      "a million distinct keys and a repeat", dup, dup.size(),
      "offset " + std::to_string(dup_at) + ": kv[1000000] (a): duplicate key: kv[0] at offset 24");

  auto cut = accepted;
  cut.resize(cut.size() - 2);
  check("a million distinct keys, cut in the last value", cut, cut.size(),
        "kv[999999] (" + distinct_key(999999) + ") value: truncated, need 4 bytes, 2 left");
}

// Counts declared far beyond the bytes that follow: nothing is reserved from them. B is the
// bytes up to the count (the file is refused there, or where its bytes run out).
TEST(GgufMemory, CountsDeclaredBeyondTheFile) {
  {  // as many pairs declared as 13 bytes each would fit (the least a pair takes), 1000 present
    std::vector<uint8_t> pairs;
    for (uint32_t i = 0; i < 1000; ++i) put_pair(pairs, distinct_key(i), i);
    const auto b = image(pairs.size() / 13, pairs);
    check(std::to_string(pairs.size() / 13) + " pairs declared, 1000 present", b, b.size(),
          "kv[1000] key length: truncated");
  }
  {  // an array of 2^40 u64 declared in a file of a few bytes, and one of 60000 (kept size)
    for (uint64_t count : {uint64_t{1} << 40, uint64_t{60000}}) {
      gguf_writer w;
      w.add_array_u64("a", {1, 2, 3});
      auto b = w.bytes();
      for (int i = 0; i < 8; ++i)
        b[24 + 8 + 1 + 4 + 4 + i] = static_cast<uint8_t>(count >> (8 * i));
      check("an array count of " + std::to_string(count) + " in " + std::to_string(b.size()) +
                " bytes",
            b, 24 + 8 + 1 + 4 + 4 + 8,
            "kv[0] (a): array of " + std::to_string(count) + " u64 elements needs");
    }
  }
  {  // 5000 tensor infos declared, 10 present
    gguf_writer w;
    for (int i = 0; i < 10; ++i) w.add_tensor_f32("t" + std::to_string(i), {1}, {1.0f});
    auto b = w.bytes();
    for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<uint8_t>(uint64_t{5000} >> (8 * i));
    b.resize(24 + 5000 * 32);  // room for the count, not for the infos' names and data
    // Read: the header, 10 infos of 34 bytes, tensor[10]'s name length and n_dims.
    check("5000 tensor infos declared, 10 present", b, 24 + 10 * 34 + 8 + 4,
          "tensor[10] () n_dims: must be in [1, 4], got 0");
  }
}
