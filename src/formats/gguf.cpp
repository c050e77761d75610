// Reading GGUF metadata (see include/posenc/formats/gguf.hpp for the layout and the contract).
// Every read goes through one cursor that knows the bytes left in the file, so a count or a
// length is checked against them before anything is allocated or skipped.
#include "posenc/formats/gguf.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>

#include "posenc/core/error.hpp"

namespace posenc {
namespace {

// Where bytes come from: a file read through a window (pread of 1 MiB at a time, so a
// tokenizer's many short strings cost few system calls), or an image in memory.
class byte_source {
 public:
  virtual ~byte_source() = default;
  virtual uint64_t size() const = 0;
  // Copies [off, off + n) to dst; the caller has checked off + n <= size().
  virtual void read(uint64_t off, void* dst, size_t n) = 0;
};

class memory_source final : public byte_source {
 public:
  explicit memory_source(std::span<const uint8_t> b) : b_(b) {}
  uint64_t size() const override { return b_.size(); }
  void read(uint64_t off, void* dst, size_t n) override {
    if (n) std::memcpy(dst, b_.data() + off, n);
  }

 private:
  std::span<const uint8_t> b_;
};

class file_source final : public byte_source {
 public:
  explicit file_source(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail_io("cannot read {}: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail_io("cannot read {}: not a regular file", path);
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~file_source() override { ::close(fd_); }
  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;
  uint64_t size() const override { return size_; }
  void read(uint64_t off, void* dst, size_t n) override {
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (off >= win_off_ && off < win_off_ + win_.size()) {
        const size_t k = std::min<uint64_t>(n, win_off_ + win_.size() - off);
        std::memcpy(out, win_.data() + (off - win_off_), k);
        out += k, off += k, n -= k;
        continue;
      }
      if (n >= window) {  // large reads bypass the window
        raw(off, out, n);
        return;
      }
      win_.resize(std::min<uint64_t>(window, size_ - off));
      raw(off, win_.data(), win_.size());
      win_off_ = off;
    }
  }

 private:
  static constexpr size_t window = size_t{1} << 20;
  void raw(uint64_t off, uint8_t* dst, size_t n) {
    while (n > 0) {
      const ssize_t r = ::pread(fd_, dst, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail_io("cannot read {} at offset {}: {}", path_, off, std::strerror(errno));
      dst += r, off += static_cast<uint64_t>(r), n -= static_cast<size_t>(r);
    }
  }
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::vector<uint8_t> win_;
  uint64_t win_off_ = 0;
};

// A field's name in a message: a string, or a callable that formats it. The callable runs only
// for an error, so the million keys of a large file format no name.
template <typename Field>
std::string field_name(const Field& field) {
  if constexpr (std::is_invocable_v<const Field&>)
    return field();
  else
    return std::string(field);
}

// llama.cpp's loader (ggml's gguf reader at 6dafc14e) refuses a string longer than 2^30 bytes and
// an array of more than 2^30 elements.
constexpr uint64_t llama_max_string = uint64_t{1} << 30;
constexpr uint64_t llama_max_array = uint64_t{1} << 30;

// Sequential little-endian reads with bounds checks; `field` names what is being read.
class cursor {
 public:
  cursor(byte_source& s, const std::string& name) : s_(s), name_(name) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return s_.size() - pos_; }
  void seek(uint64_t p) { pos_ = p; }

  template <typename Field>
  [[noreturn]] void error(const Field& field, const std::string& what) const {
    fail_io("{}: offset {}: {}: {}", name_, pos_, field_name(field), what);
  }
  template <typename Field>
  void need(uint64_t n, const Field& field) const {
    if (n > left())
      error(field, fmt::format("truncated, need {} bytes, {} left in the file", n, left()));
  }
  template <typename Field>
  void bytes(void* dst, size_t n, const Field& field) {
    need(n, field);
    s_.read(pos_, dst, n);
    pos_ += n;
  }
  template <typename Field>
  void skip(uint64_t n, const Field& field) {
    need(n, field);
    pos_ += n;
  }
  template <typename T, typename Field>
  T le(const Field& field) {
    uint8_t b[sizeof(T)];
    bytes(b, sizeof(T), field);
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
    T out;
    if constexpr (sizeof(T) == 8) {
      std::memcpy(&out, &v, 8);
    } else {
      const auto narrow =
          static_cast<std::conditional_t<sizeof(T) == 4, uint32_t,
                                         std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>(v);
      std::memcpy(&out, &narrow, sizeof(T));
    }
    return out;
  }
  // A string's u64 length, checked against the bytes left in the file and llama.cpp's limit
  // before anything is read or allocated; the cursor is then at the string's bytes.
  template <typename Field>
  uint64_t str_length(const Field& field) {
    const auto n = le<uint64_t>([&] { return field_name(field) + " length"; });
    if (n > left())
      error(field,
            fmt::format("string of {} bytes runs past the end of the file ({} left)", n, left()));
    if (n > llama_max_string)
      error(field, fmt::format("string of {} bytes; llama.cpp's loader refuses strings longer "
                               "than 2^30 bytes",
                               n));
    return n;
  }
  std::string str(const std::string& field) {
    std::string s(str_length(field), '\0');
    bytes(s.data(), s.size(), field);
    return s;
  }

 private:
  byte_source& s_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

constexpr uint32_t max_type = 12;

// Size in bytes of a fixed-size value type, 0 for string and array.
uint64_t fixed_size(gguf_type t) {
  switch (t) {
    case gguf_type::u8:
    case gguf_type::i8:
    case gguf_type::boolean:
      return 1;
    case gguf_type::u16:
    case gguf_type::i16:
      return 2;
    case gguf_type::u32:
    case gguf_type::i32:
    case gguf_type::f32:
      return 4;
    case gguf_type::u64:
    case gguf_type::i64:
    case gguf_type::f64:
      return 8;
    default:
      return 0;
  }
}

template <typename Field>
gguf_type read_type(cursor& c, const Field& field) {
  const uint64_t at = c.pos();
  const auto t = c.le<uint32_t>(field);
  if (t > max_type) {
    c.seek(at);
    c.error(field, fmt::format("unknown value type {} (0..12 are defined)", t));
  }
  return static_cast<gguf_type>(t);
}

// Reads one fixed-size value of type t (a scalar or an array element) into dst as the file has
// it, fixed_size(t) bytes (dst null: checked only); a bool must be 0 or 1.
template <typename Field>
void read_fixed(cursor& c, gguf_type t, char* dst, const Field& field) {
  const uint64_t at = c.pos();
  uint8_t b[8];
  const size_t sz = fixed_size(t);
  c.bytes(b, sz, field);
  if (t == gguf_type::boolean && b[0] > 1) {
    c.seek(at);
    c.error(field, fmt::format("bool must be 0 or 1, got {}", b[0]));
  }
  if (dst) std::memcpy(dst, b, sz);
}

// Skips an array of `count` elements of type `et` (a fixed-size type or strings).
template <typename Field>
void skip_array(cursor& c, gguf_type et, uint64_t count, const Field& field) {
  if (const uint64_t sz = fixed_size(et)) {
    if (count > c.left() / sz)
      c.error(field,
              fmt::format("array of {} {} elements needs {} bytes, {} left in the file", count,
                          gguf_type_name(et), count > UINT64_MAX / sz ? 0 : count * sz, c.left()));
    if (count > llama_max_array)
      c.error(field, fmt::format("array of {} elements; llama.cpp's loader refuses arrays of "
                                 "more than 2^30",
                                 count));
    c.skip(count * sz, field);
    return;
  }
  // Each string needs at least its 8-byte length.
  if (count > c.left() / 8)
    c.error(field, fmt::format("array count {} is absurd: {} elements need at least {} bytes "
                               "each, {} left in the file",
                               count, gguf_type_name(et), 8, c.left()));
  if (count > llama_max_array)
    c.error(field, fmt::format("array of {} elements; llama.cpp's loader refuses arrays of more "
                               "than 2^30",
                               count));
  for (uint64_t i = 0; i < count; ++i) {
    // A tokenizer holds 10^5 strings or more: the element's name is formatted only for an error.
    auto element = [&] { return fmt::format("{}[{}]", field_name(field), i); };
    if (c.left() < 8)
      c.error([&] { return element() + " length"; },
              fmt::format("truncated, need 8 bytes, {} left in the file", c.left()));
    c.skip(c.str_length(element), field);
  }
}

}  // namespace

// The reader's access to a gguf_kv's views into the arena.
struct gguf_kv_access {
  static void set(gguf_kv& kv, std::string_view key, const char* data) {
    kv.key_ = key.data();
    kv.key_size_ = static_cast<uint32_t>(key.size());  // <= 2^30 (cursor::str_length)
    kv.data_ = data;
  }
  static const char* data(const gguf_kv& kv) { return kv.data_; }
};

namespace {

// Where read_kv puts the bytes it keeps. The measuring pass (keep false) only adds up `used`;
// the filling pass copies them to arena[used, ...).
struct kv_sink {
  bool keep = false;
  char* arena = nullptr;
  uint64_t used = 0;
  std::string key;  // the measuring pass's current key, for its messages
};

// Reads (keep) or skips n bytes for the sink; returns where they are (null when not kept).
template <typename Field>
const char* place(cursor& c, kv_sink& s, uint64_t n, const Field& field) {
  char* at = s.keep ? s.arena + s.used : nullptr;
  if (at)
    c.bytes(at, n, field);
  else
    c.skip(n, field);
  s.used += n;
  return at;
}

// Reads kv `index`: its key, its type and its value, which the sink keeps unless it is an array
// of strings or of more than max_kept_array elements.
void read_kv(cursor& c, gguf_kv& kv, uint64_t index, kv_sink& s) {
  kv.offset = c.pos();
  const auto key_field = [&] { return fmt::format("kv[{}] key", index); };
  const uint64_t key_size = c.str_length(key_field);
  std::string_view key;
  if (s.keep) {
    key = {place(c, s, key_size, key_field), key_size};
  } else {
    s.key.resize(key_size);  // key_size <= the bytes left, read at once
    c.bytes(s.key.data(), key_size, key_field);
    s.used += key_size;
    key = s.key;
  }
  const auto field = [&](const char* part) {
    return [&, part] { return fmt::format("kv[{}] ({}){}", index, printable_bytes(key), part); };
  };
  kv.type = read_type(c, field(" type"));
  const char* data = nullptr;
  if (kv.type == gguf_type::string) {
    const uint64_t n = c.str_length(field(" value"));
    data = place(c, s, n, field(" value"));
    kv.count = static_cast<uint32_t>(n);
  } else if (kv.type == gguf_type::array) {
    const uint64_t at = c.pos();
    kv.elem_type = read_type(c, field(" element type"));
    if (kv.elem_type == gguf_type::array) {
      c.seek(at);
      c.error(field(" element type"), "an array of arrays; llama.cpp's loader refuses them");
    }
    const auto count = c.le<uint64_t>(field(" count"));
    const uint64_t sz = fixed_size(kv.elem_type);
    if (sz && count <= gguf_kv::max_kept_array) {
      if (count > c.left() / sz)
        c.error(field(""),
                fmt::format("array of {} {} elements needs {} bytes, {} left in the file", count,
                            gguf_type_name(kv.elem_type), count * sz, c.left()));
      char* dst = s.keep ? s.arena + s.used : nullptr;
      for (uint64_t i = 0; i < count; ++i)
        read_fixed(c, kv.elem_type, dst ? dst + i * sz : nullptr, field(""));
      s.used += count * sz;
      data = dst;
      kv.numbers_kept = true;
    } else {
      skip_array(c, kv.elem_type, count, field(""));
    }
    kv.count = static_cast<uint32_t>(count);  // <= 2^30 (skip_array)
  } else {
    char* dst = s.keep ? s.arena + s.used : nullptr;
    read_fixed(c, kv.type, dst, field(" value"));
    s.used += fixed_size(kv.type);
    data = dst;
  }
  if (s.keep) gguf_kv_access::set(kv, key, data);
}

constexpr uint32_t ggml_type_count = 40;  // ggml types 0..39 are assigned (some retired)

// ggml's block size and bytes per block (ggml.c type_traits, ggml-common.h block structs;
// ggml d99724f / llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39); {0, 0} for a retired
// type (4, 5: Q4_2, Q4_3; 31-33, 36-38: the repacked Q4_0 / IQ4_NL layouts), which ggml's
// reader refuses.
struct ggml_block {
  uint32_t size, bytes;
};
constexpr ggml_block ggml_blocks[ggml_type_count] = {
    {1, 4},    {1, 2},    {32, 18},  {32, 20},   {0, 0},     {0, 0},     {32, 22},   {32, 24},
    {32, 34},  {32, 36},  {256, 84}, {256, 110}, {256, 144}, {256, 176}, {256, 210}, {256, 292},
    {256, 66}, {256, 74}, {256, 98}, {256, 50},  {32, 18},   {256, 110}, {256, 82},  {256, 136},
    {1, 1},    {1, 2},    {1, 4},    {1, 8},     {1, 8},     {256, 56},  {1, 2},     {0, 0},
    {0, 0},    {0, 0},    {256, 54}, {256, 66},  {0, 0},     {0, 0},     {0, 0},     {32, 17},
};

// Reads and checks the magic and the version (2 or 3); leaves the cursor at the tensor count.
uint32_t gguf_read_version(cursor& c) {
  char magic[4];
  c.bytes(magic, 4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    c.seek(0);
    c.error("magic", fmt::format("not a GGUF file (expected the bytes 'GGUF', got {:02x} {:02x} "
                                 "{:02x} {:02x})",
                                 static_cast<uint8_t>(magic[0]), static_cast<uint8_t>(magic[1]),
                                 static_cast<uint8_t>(magic[2]), static_cast<uint8_t>(magic[3])));
  }
  const auto version = c.le<uint32_t>("version");
  c.seek(4);
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3)
      c.error("version", fmt::format("big-endian GGUF (version {} byte-swapped); posenc reads "
                                     "little-endian GGUF only",
                                     swapped));
    if (version == 1)
      c.error("version", "GGUF version 1 (32-bit counts) is not supported; versions 2 and 3 are");
    c.error("version", fmt::format("unsupported GGUF version {} (2 and 3 are supported)", version));
  }
  c.seek(8);
  return version;
}

// Reads general.alignment into f.alignment when the file has it (a u32 power of two).
void gguf_read_alignment(cursor& c, gguf_file& f) {
  if (const auto* a = f.find("general.alignment")) {
    const int64_t v = a->integer();
    if (a->type != gguf_type::u32 || v == 0 || (v & (v - 1)) != 0) {
      c.seek(a->offset);
      c.error("general.alignment",
              fmt::format("must be a u32 power of two, got {} {}", gguf_type_name(a->type),
                          a->type == gguf_type::string ? quote_bytes(a->text(), 48)
                                                       : fmt::format("{}", a->number())));
    }
    f.alignment = static_cast<uint64_t>(v);
  }
}

// Reads tensor info i (name, dims, ggml type, offset) into t; the offset must be a multiple of
// the alignment. llama.cpp's loader refuses a name of 64 bytes or more (GGML_MAX_NAME), an ne
// that is negative as an int64, and a zero in ne[1..3] (its element-count check divides by them).
void gguf_read_tensor_info(cursor& c, gguf_tensor_info& t, uint64_t i, uint64_t alignment) {
  t.info_offset = c.pos();
  const std::string name_field = fmt::format("tensor[{}] name", i);
  const uint64_t name_size = c.str_length(name_field);
  if (name_size >= 64)
    c.error(name_field, fmt::format("{} bytes; llama.cpp's loader refuses tensor names of 64 "
                                    "bytes or more",
                                    name_size));
  t.name.resize(name_size);
  c.bytes(t.name.data(), name_size, name_field);
  const std::string field = fmt::format("tensor[{}] ({})", i, printable_bytes(t.name));
  const uint64_t at = c.pos();
  const auto n_dims = c.le<uint32_t>(field + " n_dims");
  if (n_dims < 1 || n_dims > 4) {
    c.seek(at);
    c.error(field + " n_dims", fmt::format("must be in [1, 4], got {}", n_dims));
  }
  t.ne.resize(n_dims);
  unsigned __int128 elems = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t dat = c.pos();
    t.ne[d] = c.le<uint64_t>([&] { return fmt::format("{} ne[{}]", field, d); });
    if (d > 0 && t.ne[d] == 0) {
      c.seek(dat);
      c.error(fmt::format("{} ne[{}]", field, d),
              "0; llama.cpp's loader cannot read a zero in ne[1..3] (it divides by them)");
    }
    elems *= t.ne[d];
    if (elems > (static_cast<unsigned __int128>(1) << 62) || t.ne[d] >> 63)
      c.error(field, fmt::format("dimensions overflow (ne[{}] = {})", d, t.ne[d]));
  }
  const uint64_t tat = c.pos();
  t.ggml_type = c.le<uint32_t>(field + " type");
  if (t.ggml_type >= ggml_type_count) {
    c.seek(tat);
    c.error(field + " type", fmt::format("unknown ggml type {}", t.ggml_type));
  }
  const uint64_t oat = c.pos();
  t.offset = c.le<uint64_t>(field + " offset");
  if (t.offset % alignment != 0) {
    c.seek(oat);
    c.error(field + " offset",
            fmt::format("{} is not a multiple of the alignment {}", t.offset, alignment));
  }
}

// Checks that the tensors' data follow each other in the data section as llama.cpp's loader
// requires, and lie inside the file.
void gguf_check_tensor_extents(const gguf_file& f, const std::string& name) {
  // llama.cpp's loader refuses a tensor whose offset is not where the data of the tensors before
  // it ends, each padded to the alignment (ggml's gguf reader at 6dafc14e: "tensor ... has offset
  // ..., expected ..."), and one whose data does not lie inside the file (llama_tensor_weight:
  // offs + ggml_nbytes(tensor) > file->size): a file cut short inside the tensor data is an
  // error, not a model.
  unsigned __int128 expected = 0;
  for (uint64_t i = 0; i < f.tensors.size(); ++i) {
    const auto& t = f.tensors[i];
    const std::string what = fmt::format("{}: offset {}: tensor[{}] ({})", name, t.info_offset, i,
                                         printable_bytes(t.name));
    const uint64_t n = gguf_tensor_bytes(t.ggml_type, t.ne, what);
    if (t.offset != expected)
      fail_io(
          "{} offset: {}, expected {}: where the tensors before it end, each padded to {} "
          "bytes (llama.cpp's loader refuses another)",
          what, t.offset, static_cast<uint64_t>(expected), f.alignment);
    const unsigned __int128 start = static_cast<unsigned __int128>(f.data_offset) + t.offset;
    const unsigned __int128 end = start + n;
    if (end > f.file_size) {
      std::string dims;
      for (auto d : t.ne) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      fail_io(
          "{}: data [{}, {}) ({} bytes: ggml type {}, ne [{}]) runs past the end of the file ({} "
          "bytes): truncated",
          what, static_cast<uint64_t>(start),
          end > (static_cast<unsigned __int128>(1) << 64) - 1 ? UINT64_MAX
                                                              : static_cast<uint64_t>(end),
          n, t.ggml_type, dims, f.file_size);
    }
    // n <= the file size here, so the sum stays far below 2^128.
    expected += (n + f.alignment - 1) / f.alignment * f.alignment;
  }
}

// Throws naming the first entry, in file order, whose name (a key, a tensor name) an earlier
// entry has, at its offset, and that earlier entry. The indices sorted by (name, index) find it
// in sizeof(Index) bytes per entry, where a hash set of the names would cost several times the
// bytes read: in a run of equal names the second index is the run's first repeat, and a scan in
// file order stops at the smallest of those.
template <typename Index, typename Name, typename Offset>
void refuse_duplicates_as(cursor& c, size_t n, const Name& name, const Offset& offset,
                          const char* what, const char* noun) {
  std::vector<Index> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<Index>(i);
  std::sort(order.begin(), order.end(), [&](Index a, Index b) {
    const int cmp = std::string_view(name(a)).compare(std::string_view(name(b)));
    return cmp != 0 ? cmp < 0 : a < b;
  });
  size_t repeat = n, first = 0, run = 0;
  for (size_t k = 1; k < n; ++k) {
    if (std::string_view(name(order[k])) != std::string_view(name(order[k - 1]))) {
      run = k;
    } else if (order[k] < repeat) {
      repeat = order[k];
      first = order[run];
    }
  }
  if (repeat == n) return;
  c.seek(offset(repeat));
  c.error(fmt::format("{}[{}] ({})", what, repeat, printable_bytes(name(repeat))),
          fmt::format("duplicate {}: {}[{}] at offset {} has it already; llama.cpp refuses a "
                      "file with a duplicate {}",
                      noun, what, first, offset(first), noun));
}

template <typename Name, typename Offset>
void refuse_duplicates(cursor& c, size_t n, const Name& name, const Offset& offset,
                       const char* what, const char* noun) {
  if (n <= UINT32_MAX)
    refuse_duplicates_as<uint32_t>(c, n, name, offset, what, noun);
  else
    refuse_duplicates_as<uint64_t>(c, n, name, offset, what, noun);
}

// Reads the n_kv key-value pairs into f.kvs and f.arena, twice: measured first (every check
// made, nothing kept), then, every byte of them read, filled into storage of exactly the
// measured size. Nothing is reserved from a count in the file before the bytes it declares are
// read, so memory stays a small multiple of the bytes read (gguf.hpp states the bound).
void gguf_read_kvs(cursor& c, gguf_file& f, uint64_t n_kv) {
  const uint64_t start = c.pos();
  kv_sink sink;
  {
    gguf_kv scratch;
    for (uint64_t i = 0; i < n_kv; ++i) read_kv(c, scratch, i, sink);
  }
  auto arena = std::make_shared_for_overwrite<char[]>(sink.used);
  sink = kv_sink{true, arena.get(), 0, {}};
  f.kvs.resize(n_kv);
  c.seek(start);
  for (uint64_t i = 0; i < n_kv; ++i) read_kv(c, f.kvs[i], i, sink);
  f.arena = std::move(arena);
}

// Reads the n_tensors tensor infos into f.tensors, measured first as the key-value pairs are.
void gguf_read_tensor_infos(cursor& c, gguf_file& f, uint64_t n_tensors) {
  const uint64_t start = c.pos();
  {
    gguf_tensor_info scratch;
    for (uint64_t i = 0; i < n_tensors; ++i) gguf_read_tensor_info(c, scratch, i, f.alignment);
  }
  f.tensors.resize(n_tensors);
  c.seek(start);
  for (uint64_t i = 0; i < n_tensors; ++i) gguf_read_tensor_info(c, f.tensors[i], i, f.alignment);
}

gguf_file parse(byte_source& src, const std::string& name) {
  gguf_file f;
  f.path = name;
  f.file_size = src.size();
  cursor c(src, name);
  f.version = gguf_read_version(c);
  const auto n_tensors = c.le<uint64_t>("tensor_count");
  const auto n_kv = c.le<uint64_t>("kv_count");
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at
  // least 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.left() / 13) {
    c.seek(16);
    c.error("kv_count", fmt::format("{} key-value pairs cannot fit in the {} bytes left (each "
                                    "takes at least 13)",
                                    n_kv, f.file_size - 24));
  }
  if (n_tensors > c.left() / 32) {
    c.seek(8);
    c.error("tensor_count", fmt::format("{} tensor infos cannot fit in the {} bytes left (each "
                                        "takes at least 32)",
                                        n_tensors, f.file_size - 24));
  }
  gguf_read_kvs(c, f, n_kv);
  // A key given twice is an error, as llama.cpp's loader makes it (ggml's gguf reader at
  // 6dafc14e, gguf_init_from_file_impl: "duplicate key" and "duplicate tensor name" fail the
  // read): a reader that took the first or the last would give the same file two meanings.
  refuse_duplicates(
      c, f.kvs.size(), [&](size_t i) { return f.kvs[i].key(); },
      [&](size_t i) { return f.kvs[i].offset; }, "kv", "key");

  gguf_read_alignment(c, f);

  gguf_read_tensor_infos(c, f, n_tensors);
  refuse_duplicates(
      c, f.tensors.size(), [&](size_t i) -> const std::string& { return f.tensors[i].name; },
      [&](size_t i) { return f.tensors[i].info_offset; }, "tensor", "tensor name");
  f.data_offset = (c.pos() + f.alignment - 1) / f.alignment * f.alignment;
  gguf_check_tensor_extents(f, name);
  return f;
}

std::vector<float> read_f32(const gguf_file& f, const gguf_tensor_info& t, byte_source& src) {
  const std::string field = fmt::format("tensor {}", t.name);
  if (t.ggml_type != 0)
    fail_io(
        "{}: offset {}: {}: ggml type {} is not F32 (0); posenc reads the per-pair factor "
        "tensors as F32",
        f.path, t.info_offset, field, t.ggml_type);
  uint64_t n = 1;
  for (auto d : t.ne) n *= d;  // bounded by 2^62 at parse time
  if (n > (uint64_t{1} << 24))
    fail_io("{}: offset {}: {}: {} elements; posenc reads F32 tensors of at most 2^24", f.path,
            t.info_offset, field, n);
  const uint64_t start = f.data_offset + t.offset;
  if (t.offset > f.file_size || start > f.file_size || n * 4 > f.file_size - start)
    fail_io(
        "{}: offset {}: {} data: truncated, {} bytes at data offset {} run past the end of "
        "the file ({} bytes)",
        f.path, start, field, n * 4, t.offset, f.file_size);
  std::vector<uint8_t> raw(n * 4);
  src.read(start, raw.data(), raw.size());
  std::vector<float> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t u =
        static_cast<uint32_t>(raw[4 * i]) | static_cast<uint32_t>(raw[4 * i + 1]) << 8 |
        static_cast<uint32_t>(raw[4 * i + 2]) << 16 | static_cast<uint32_t>(raw[4 * i + 3]) << 24;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

}  // namespace

uint64_t gguf_tensor_bytes(uint32_t type, const std::vector<uint64_t>& ne,
                           const std::string& what) {
  const ggml_block b = type < ggml_type_count ? ggml_blocks[type] : ggml_block{0, 0};
  if (b.size == 0)
    fail_io("{}: ggml type {} has no size (retired or unknown; llama.cpp refuses it)", what, type);
  if (ne.empty() || ne[0] % b.size != 0)
    fail_io("{}: ne[0] = {} is not a multiple of ggml type {}'s block size {}", what,
            ne.empty() ? 0 : ne[0], type, b.size);
  // The parser bounds the element count by 2^62, so this fits in 128 bits; saturate at 2^64-1.
  unsigned __int128 n = ne[0] / b.size * static_cast<unsigned __int128>(b.bytes);
  for (size_t d = 1; d < ne.size(); ++d) {
    n *= ne[d];
    if (n > UINT64_MAX) return UINT64_MAX;
  }
  return n > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(n);
}

const char* gguf_type_name(gguf_type t) {
  static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i <= max_type ? names[i] : "unknown";
}

namespace {

// The little-endian value of n <= 8 bytes at p.
uint64_t load_le(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// A fixed-size value of type t at p (as the file has it) as a double.
double fixed_number(gguf_type t, const char* p) {
  const uint64_t u = load_le(p, fixed_size(t));
  switch (t) {
    case gguf_type::i8:
      return static_cast<int8_t>(u);
    case gguf_type::i16:
      return static_cast<int16_t>(u);
    case gguf_type::i32:
      return static_cast<int32_t>(u);
    case gguf_type::i64:
      return static_cast<double>(static_cast<int64_t>(u));
    case gguf_type::f32: {
      float x;
      const auto w = static_cast<uint32_t>(u);
      std::memcpy(&x, &w, 4);
      return x;
    }
    case gguf_type::f64: {
      double x;
      std::memcpy(&x, &u, 8);
      return x;
    }
    default:  // u8, u16, u32, u64, bool
      return static_cast<double>(u);
  }
}

}  // namespace

double gguf_kv::number() const {
  return fixed_size(type) && data_ ? fixed_number(type, data_) : 0;
}

int64_t gguf_kv::integer() const {
  if (!fixed_size(type) || !data_ || type == gguf_type::f32 || type == gguf_type::f64) return 0;
  if (type == gguf_type::u64) {
    // Sizes above 2^63 are absurd for every key posenc reads; saturated so that get_size can
    // refuse them by value.
    const uint64_t u = load_le(data_, 8);
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  }
  return static_cast<int64_t>(fixed_number(type, data_));  // exact: |x| < 2^63, integral
}

std::string_view gguf_kv::text() const {
  return type == gguf_type::string && data_ ? std::string_view(data_, count) : std::string_view();
}

std::vector<double> gguf_kv::numbers() const {
  std::vector<double> out;
  if (type != gguf_type::array || !numbers_kept || !data_) return out;
  const uint64_t sz = fixed_size(elem_type);
  out.resize(count);
  for (uint64_t i = 0; i < count; ++i) out[i] = fixed_number(elem_type, data_ + i * sz);
  return out;
}

const gguf_kv* gguf_file::find(const std::string& key) const {
  for (const auto& kv : kvs)
    if (kv.key() == key) return &kv;
  return nullptr;
}

const gguf_tensor_info* gguf_file::find_tensor(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::optional<double> gguf_file::get_number(const std::string& key) const {
  const auto* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type == gguf_type::string || kv->type == gguf_type::array ||
      kv->type == gguf_type::boolean)
    fail_io("{}: offset {}: {} must be a number, got a {}", path, kv->offset, key,
            gguf_type_name(kv->type));
  return kv->number();
}

std::optional<uint64_t> gguf_file::get_size(const std::string& key) const {
  const auto* kv = find(key);
  if (!kv) return std::nullopt;
  switch (kv->type) {
    case gguf_type::u8:
    case gguf_type::u16:
    case gguf_type::u32:
    case gguf_type::u64:
    case gguf_type::i8:
    case gguf_type::i16:
    case gguf_type::i32:
    case gguf_type::i64:
      if (kv->integer() < 0)
        fail_io("{}: offset {}: {} must be >= 0, got {}", path, kv->offset, key, kv->integer());
      return static_cast<uint64_t>(kv->integer());
    case gguf_type::array:
      // Per-layer values (some architectures store head counts per layer): all must agree.
      if (kv->numbers_kept && kv->count > 0 && fixed_size(kv->elem_type) &&
          kv->elem_type != gguf_type::f32 && kv->elem_type != gguf_type::f64) {
        const std::vector<double> numbers = kv->numbers();
        const double v = numbers[0];
        for (double x : numbers)
          if (x != v)
            fail_io(
                "{}: offset {}: {} differs between layers ({} and {}); posenc reads one "
                "value",
                path, kv->offset, key, v, x);
        if (v < 0) fail_io("{}: offset {}: {} must be >= 0, got {}", path, kv->offset, key, v);
        // Saturated above 2^63 (the caller's bounds refuse it) instead of an undefined cast.
        return v >= 0x1p63 ? uint64_t{1} << 63 : static_cast<uint64_t>(v);
      }
      [[fallthrough]];
    default:
      fail_io("{}: offset {}: {} must be an unsigned integer, got a {}", path, kv->offset, key,
              kv->type == gguf_type::array
                  ? fmt::format("array of {}", gguf_type_name(kv->elem_type))
                  : std::string(gguf_type_name(kv->type)));
  }
}

std::optional<std::string> gguf_file::get_string(const std::string& key) const {
  const auto* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type != gguf_type::string)
    fail_io("{}: offset {}: {} must be a string, got a {}", path, kv->offset, key,
            gguf_type_name(kv->type));
  return std::string(kv->text());
}

std::optional<bool> gguf_file::get_bool(const std::string& key) const {
  const auto* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type != gguf_type::boolean)
    fail_io("{}: offset {}: {} must be a bool, got a {}", path, kv->offset, key,
            gguf_type_name(kv->type));
  return kv->number() != 0;
}

gguf_file gguf_read(const std::string& path) {
  file_source src(path);
  return parse(src, path);
}

gguf_file gguf_parse(std::span<const uint8_t> bytes, const std::string& name) {
  memory_source src(bytes);
  return parse(src, name);
}

std::vector<float> gguf_read_f32(const gguf_file& f, const gguf_tensor_info& t) {
  file_source src(f.path);
  return read_f32(f, t, src);
}

std::vector<float> gguf_read_f32(const gguf_file& f, const gguf_tensor_info& t,
                                 std::span<const uint8_t> bytes) {
  memory_source src(bytes);
  return read_f32(f, t, src);
}

}  // namespace posenc
