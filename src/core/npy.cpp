#include "posenc/core/npy.hpp"

#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/half.hpp"

namespace posenc {
namespace {

struct dtype_info {
  dtype t;
  const char* descr;
  const char* name;
  size_t size;
};
constexpr dtype_info kTypes[] = {
    {dtype::f32, "<f4", "float32", 4}, {dtype::f64, "<f8", "float64", 8},
    {dtype::i64, "<i8", "int64", 8},   {dtype::i32, "<i4", "int32", 4},
    {dtype::u8, "|u1", "uint8", 1},    {dtype::b1, "|b1", "bool", 1},
    {dtype::f16, "<f2", "float16", 2}, {dtype::u16, "<u2", "uint16", 2},
};
const dtype_info& info(dtype t) {
  for (const auto& i : kTypes)
    if (i.t == t) return i;
  return kTypes[0];
}

template <typename T>
constexpr dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>) return dtype::f32;
  if constexpr (std::is_same_v<T, double>) return dtype::f64;
  if constexpr (std::is_same_v<T, int64_t>) return dtype::i64;
  if constexpr (std::is_same_v<T, int32_t>) return dtype::i32;
  if constexpr (std::is_same_v<T, uint8_t>) return dtype::u8;
  if constexpr (std::is_same_v<T, uint16_t>) return dtype::u16;
  if constexpr (std::is_same_v<T, bool>) return dtype::b1;
}

}  // namespace

const char* dtype_name(dtype t) {
  return info(t).name;
}
size_t dtype_size(dtype t) {
  return info(t).size;
}

int64_t npy_array::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string npy_array::shape_str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

template <typename T>
T* npy_array::as() {
  if (type != dtype_of<T>())
    fail("array has dtype {}, expected {}", dtype_name(type), dtype_name(dtype_of<T>()));
  return reinterpret_cast<T*>(data.data());
}
template <typename T>
const T* npy_array::as() const {
  if (type != dtype_of<T>())
    fail("array has dtype {}, expected {}", dtype_name(type), dtype_name(dtype_of<T>()));
  return reinterpret_cast<const T*>(data.data());
}

// NOLINTBEGIN(bugprone-macro-parentheses): the argument is a type, spliced into template arguments
// and declarations, where parentheses are not allowed
#define POSENC_NPY_INST(T)                              \
  template T* npy_array::as<T>();                       \
  template const T* npy_array::as<T>() const;           \
  template <>                                           \
  npy_array make_npy<T>(std::vector<int64_t> shape) {   \
    npy_array a;                                        \
    a.type = dtype_of<T>();                             \
    a.shape = std::move(shape);                         \
    a.data.assign(a.numel() * sizeof(T), std::byte{0}); \
    return a;                                           \
  }
// NOLINTEND(bugprone-macro-parentheses)
POSENC_NPY_INST(float)
POSENC_NPY_INST(double)
POSENC_NPY_INST(int64_t)
POSENC_NPY_INST(int32_t)
POSENC_NPY_INST(uint8_t)
POSENC_NPY_INST(uint16_t)
POSENC_NPY_INST(bool)
#undef POSENC_NPY_INST

const uint16_t* npy_array::bits16() const {
  if (type != dtype::f16 && type != dtype::u16)
    fail("array has dtype {}, expected float16 or uint16", dtype_name(type));
  return reinterpret_cast<const uint16_t*>(data.data());
}

std::vector<double> npy_array::to_f64() const {
  std::vector<double> out(numel());
  for (int64_t i = 0; i < numel(); ++i) {
    const std::byte* p = data.data() + i * dtype_size(type);
    switch (type) {
      case dtype::f32: {
        float v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
      case dtype::f64: {
        double v;
        std::memcpy(&v, p, 8);
        out[i] = v;
        break;
      }
      case dtype::i64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        out[i] = static_cast<double>(v);
        break;
      }
      case dtype::i32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
      case dtype::u8:
        out[i] = static_cast<double>(static_cast<uint8_t>(*p));
        break;
      case dtype::f16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = f16_to_float(v);
        break;
      }
      case dtype::u16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = v;
        break;
      }
      case dtype::b1:
        out[i] = static_cast<uint8_t>(*p) != 0 ? 1.0 : 0.0;
        break;
    }
  }
  return out;
}

std::vector<int64_t> npy_array::to_i64() const {
  if (type == dtype::f32 || type == dtype::f64 || type == dtype::f16)
    fail("array has dtype {}, expected an integer dtype (int64, int32, uint16, uint8 or bool)",
         dtype_name(type));
  std::vector<int64_t> out(numel());
  for (int64_t i = 0; i < numel(); ++i) {
    const std::byte* p = data.data() + i * dtype_size(type);
    switch (type) {
      case dtype::i64:
        std::memcpy(&out[i], p, 8);
        break;
      case dtype::i32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
      case dtype::u8:
        out[i] = static_cast<uint8_t>(*p);
        break;
      case dtype::u16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = v;
        break;
      }
      case dtype::b1:
        out[i] = static_cast<uint8_t>(*p) != 0;
        break;
      default:
        break;
    }
  }
  return out;
}

namespace {

// The header dict as numpy.lib.format writes and reads it: a Python dict literal with exactly the
// keys 'descr' (a string), 'fortran_order' (True or False) and 'shape' (a tuple of non-negative
// integers; versions 1.0 and 2.0 may suffix an integer with L, as Python 2 wrote them), each
// once, in any order, a trailing comma allowed; whitespace around every token; nothing but
// whitespace after the closing brace (numpy pads with spaces and ends with a newline). Anything
// else, a NUL byte included, is refused: numpy's literal evaluation would refuse it too, and a
// file posenc reads must mean to posenc what it means to NumPy.
struct npy_header {
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
};

class header_parser {
 public:
  header_parser(const std::string& h, int major, const std::function<void(const std::string&)>& bad)
      : h_(h), major_(major), bad_(bad) {}

  npy_header parse() {
    npy_header out;
    bool seen[3] = {false, false, false};
    ws();
    expect('{', "the header must be a dict literal starting with '{'");
    ws();
    while (!at('}')) {
      const std::string key = string_literal("a key");
      ws();
      expect(':', "':' after key " + quote_bytes(key));
      ws();
      int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (k < 0)
        fail_here("unknown key " + quote_bytes(key) +
                  "; the header has exactly 'descr', 'fortran_order' and 'shape'");
      if (seen[k]) fail_here("key " + quote_bytes(key) + " given twice");
      seen[k] = true;
      if (k == 0) out.descr = string_literal("the value of 'descr'");
      if (k == 1) out.fortran = boolean();
      if (k == 2) out.shape = tuple();
      ws();
      if (at(',')) {
        ++i_;
        ws();
      } else if (!at('}')) {
        fail_here("',' or '}' after the value of " + quote_bytes(key));
      }
    }
    ++i_;  // '}'
    ws();
    if (i_ != h_.size()) fail_here("only whitespace may follow the dict's closing '}'");
    for (int k = 0; k < 3; ++k)
      if (!seen[k])
        bad_(fmt::format("header: no '{}' (it needs 'descr', 'fortran_order' and 'shape')",
                         k == 0   ? "descr"
                         : k == 1 ? "fortran_order"
                                  : "shape"));
    return out;
  }

 private:
  [[noreturn]] void fail_here(const std::string& what) {
    bad_(fmt::format("header byte {}: {}, found {}", i_, what,
                     i_ < h_.size() ? quote_bytes(h_.substr(i_, 16)) : std::string("the end")));
    throw std::logic_error("unreachable");  // bad_ throws
  }
  bool at(char ch) const { return i_ < h_.size() && h_[i_] == ch; }
  void ws() {
    while (i_ < h_.size() && (h_[i_] == ' ' || h_[i_] == '\t' || h_[i_] == '\n' || h_[i_] == '\r'))
      ++i_;
  }
  void expect(char ch, const std::string& what) {
    if (!at(ch)) fail_here(what);
    ++i_;
  }
  std::string string_literal(const std::string& what) {
    if (!at('\'') && !at('"')) fail_here(what + " as a quoted string");
    const char q = h_[i_++];
    std::string out;
    while (i_ < h_.size() && h_[i_] != q) {
      const auto c = static_cast<unsigned char>(h_[i_]);
      if (c < 0x20 || c >= 0x7f || c == '\\') fail_here(what + " of printable characters");
      out += h_[i_++];
    }
    if (i_ == h_.size()) fail_here(what + ": a closing quote");
    ++i_;
    return out;
  }
  bool boolean() {
    for (const char* word : {"True", "False"})
      if (h_.compare(i_, std::strlen(word), word) == 0) {
        i_ += std::strlen(word);
        return word[0] == 'T';
      }
    fail_here("the value of 'fortran_order' as True or False");
  }
  std::vector<int64_t> tuple() {
    expect('(', "the value of 'shape' as a tuple");
    std::vector<int64_t> out;
    ws();
    bool comma = true;
    while (!at(')')) {
      if (!comma) fail_here("',' between the entries of 'shape'");
      size_t j = i_;
      while (j < h_.size() && h_[j] >= '0' && h_[j] <= '9') ++j;
      if (j == i_) fail_here("a non-negative integer in 'shape'");
      if (j - i_ > 12) fail_here("a shape entry below 10^12");
      out.push_back(std::stoll(h_.substr(i_, j - i_)));
      i_ = j;
      if (major_ < 3 && at('L')) ++i_;  // Python 2's long suffix, as numpy filters it
      ws();
      comma = at(',');
      if (comma) {
        ++i_;
        ws();
      }
    }
    if (out.size() == 1 && !comma) fail_here("a one-entry shape written (n,) as Python does");
    ++i_;  // ')'
    return out;
  }

  const std::string& h_;
  size_t i_ = 0;
  int major_;
  const std::function<void(const std::string&)>& bad_;
};

}  // namespace

npy_array parse_npy(const std::vector<std::byte>& bytes, const std::string& name) {
  const std::function<void(const std::string&)> bad = [&](const std::string& why) {
    fail_io("{} is not a valid .npy file: {}", name, why);
  };
  const unsigned char* b = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 6 || std::memcmp(b, "\x93NUMPY", 6) != 0)
    bad("magic: wrong magic (expected \\x93NUMPY)");
  if (bytes.size() < 8) bad(fmt::format("version: truncated, the file has {} bytes", bytes.size()));
  const int major = b[6], minor = b[7];
  size_t header_len = 0, offset = 0;
  if (minor != 0 || major < 1 || major > 3)
    bad(fmt::format(
        "version: unsupported format version {}.{} (numpy.lib.format has 1.0, 2.0 and 3.0)", major,
        minor));
  offset = major == 1 ? 10 : 12;  // the header length: u16 (1.0), u32 (2.0, 3.0)
  if (bytes.size() < offset)
    bad(fmt::format("header length: truncated, the file has {} bytes", bytes.size()));
  header_len = major == 1 ? size_t(b[8]) | (size_t(b[9]) << 8)
                          : size_t(b[8]) | (size_t(b[9]) << 8) | (size_t(b[10]) << 16) |
                                (size_t(b[11]) << 24);
  if (bytes.size() < offset + header_len)
    bad(fmt::format("header: truncated header, {} bytes declared, {} in the file", header_len,
                    bytes.size() - offset));
  const std::string header(reinterpret_cast<const char*>(b + offset), header_len);
  const npy_header hd = header_parser(header, major, bad).parse();
  if (hd.fortran)
    bad("fortran_order: True; Fortran order is not supported, save with np.ascontiguousarray");
  npy_array a;
  bool found = false;
  for (const auto& i : kTypes) {
    // A one-byte type has no byte order: NumPy reads it after any of its byte-order marks.
    if (hd.descr == i.descr || (i.size == 1 && hd.descr.size() == 3 && hd.descr[0] != '\0' &&
                                std::strchr("|<>=", hd.descr[0]) != nullptr &&
                                hd.descr.substr(1) == std::string(i.descr).substr(1))) {
      a.type = i.t;
      found = true;
    }
  }
  if (!found)
    bad(
        fmt::format("descr: unsupported dtype {} (supported: <f4, <f8, <f2, <i8, <i4, <u2, |u1, "
                    "|b1)",
                    quote_bytes(hd.descr)));
  uint64_t count = 1;
  for (const int64_t d : hd.shape) {
    if (d != 0 && count > (1ull << 40) / static_cast<uint64_t>(d))
      bad("shape: too large (over 2^40 elements)");
    count *= static_cast<uint64_t>(d);
    a.shape.push_back(d);
  }
  size_t need = count * dtype_size(a.type);
  size_t have = bytes.size() - offset - header_len;
  if (have < need)
    bad(fmt::format("data: truncated, shape {} needs {} bytes, the file has {}", a.shape_str(),
                    need, have));
  if (have > need)
    bad(fmt::format("data: {} trailing bytes after the data of shape {}", have - need,
                    a.shape_str()));
  a.data.assign(bytes.begin() + offset + header_len, bytes.end());
  return a;
}

npy_array read_npy(const std::string& path) {
  return parse_npy(read_file(path), path);
}

std::vector<std::byte> serialize_npy(const npy_array& a) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                 info(a.type).descr, a.shape_str());
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict += std::string(pad, ' ') + "\n";
  std::vector<std::byte> out;
  out.reserve(10 + dict.size() + a.data.size());
  const char magic[] = "\x93NUMPY\x01\x00";
  for (int i = 0; i < 8; ++i) out.push_back(std::byte(static_cast<unsigned char>(magic[i])));
  out.push_back(std::byte(dict.size() & 0xFF));
  out.push_back(std::byte((dict.size() >> 8) & 0xFF));
  for (char c : dict) out.push_back(std::byte(static_cast<unsigned char>(c)));
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

void write_npy(const std::string& path, const npy_array& a) {
  if (static_cast<size_t>(a.numel()) * dtype_size(a.type) != a.data.size())
    fail("npy array data has {} bytes, shape {} of {} needs {}", a.data.size(), a.shape_str(),
         dtype_name(a.type), a.numel() * dtype_size(a.type));
  write_file_atomic(path, serialize_npy(a));
}

}  // namespace posenc
