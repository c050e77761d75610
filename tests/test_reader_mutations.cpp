// The strict readers under random mutation (issue 48): real GGUF files written by llama.cpp's
// converter (tests/golden/gguf) and valid .npy files (NumPy's own, tests/golden/flash_attention,
// and headers written here) are mutated (bits flipped, bytes set, cut, ranges inserted, repeated
// or deleted, length, count and type fields overwritten with huge or wrong values) and read in
// process, so that ASan and UBSan see every read (`make test-sanitize` runs this file too).
// Each read either returns, and then an oracle written here from the format owner's rules must
// accept the file (llama.cpp's gguf loader at commit 6dafc14e and its model loader's extent
// check; numpy.lib.format), or throws posenc::io_error whose message is printable ASCII, under
// 300 characters, and names a field:
//   GGUF  "m.gguf: offset N: FIELD: ..." with FIELD magic, version, tensor_count, kv_count,
//         general.alignment, kv[i] ... or tensor[i] ...;
//   .npy  "m.npy is not a valid .npy file: FIELD: ..." with FIELD magic, version, header length,
//         header, header byte N, descr, fortran_order, shape or data.
// Anything else (another exception, a crash) fails. The seed and the number of cases are fixed;
// the outcomes, counted by category, are printed.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/formats/gguf.hpp"

using namespace posenc;

namespace {

using bytes_t = std::vector<uint8_t>;

bytes_t read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

uint64_t load(const bytes_t& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b[at + i]) << (8 * i);
  return v;
}

// ---- the GGUF oracle: llama.cpp's rules, written from its loader ------------------------------

// A fixed-size field of a file (a length, a count, a type), where a mutation may aim.
struct field_at {
  size_t pos;
  int width;  // 4 or 8
};

// ggml's block size and block bytes per type (ggml's type traits at 6dafc14e; {0, 0}: retired).
constexpr uint32_t ggml_blocks[40][2] = {
    {1, 4},    {1, 2},    {32, 18},  {32, 20},   {0, 0},     {0, 0},     {32, 22},   {32, 24},
    {32, 34},  {32, 36},  {256, 84}, {256, 110}, {256, 144}, {256, 176}, {256, 210}, {256, 292},
    {256, 66}, {256, 74}, {256, 98}, {256, 50},  {32, 18},   {256, 110}, {256, 82},  {256, 136},
    {1, 1},    {1, 2},    {1, 4},    {1, 8},     {1, 8},     {256, 56},  {1, 2},     {0, 0},
    {0, 0},    {0, 0},    {256, 54}, {256, 66},  {0, 0},     {0, 0},     {0, 0},     {32, 17}};

// Walks a GGUF file as llama.cpp's loader does; ok() is whether the loader accepts it. The
// fields it passes are recorded for the mutations.
class gguf_walk {
 public:
  explicit gguf_walk(const bytes_t& b) : b_(b) { ok_ = walk(); }
  bool ok() const { return ok_; }
  const std::vector<field_at>& fields() const { return fields_; }

 private:
  bool num(uint64_t& v, int width) {
    if (b_.size() - pos_ < static_cast<size_t>(width)) return false;
    fields_.push_back({pos_, width});
    v = load(b_, pos_, width);
    pos_ += width;
    return true;
  }
  bool skip(uint64_t n) {
    if (n > b_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  bool str(std::string& s) {
    uint64_t n = 0;
    if (!num(n, 8) || n > (uint64_t{1} << 30) || n > b_.size() - pos_) return false;
    s.assign(b_.begin() + pos_, b_.begin() + pos_ + n);
    pos_ += n;
    return true;
  }
  static uint64_t type_size(uint64_t t) {
    static const uint64_t sizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return sizes[t];
  }
  // One value of type t (not an array); an array of count values of type t.
  bool values(uint64_t t, uint64_t count) {
    if (t > 12 || t == 9 || count > (uint64_t{1} << 30)) return false;
    std::string s;
    if (t == 8) {
      for (uint64_t i = 0; i < count; ++i)
        if (!str(s)) return false;
      return true;
    }
    return count <= (b_.size() - pos_) / type_size(t) && skip(count * type_size(t));
  }
  bool kvs(uint64_t n_kv) {
    std::set<std::string> keys;
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key;
      uint64_t type = 0, elem = 0, count = 1;
      if (!str(key) || !keys.insert(key).second || !num(type, 4)) return false;
      const size_t value_at = pos_;
      if (type == 9 && (!num(elem, 4) || !num(count, 8))) return false;
      if (!values(type == 9 ? elem : type, count)) return false;
      if (key == "general.alignment") {  // read with gguf_get_val_u32, which asserts a u32
        if (type != 4) return false;
        alignment_ = load(b_, value_at, 4);
        if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) return false;
      }
    }
    return true;
  }
  bool tensors(uint64_t n_tensors) {
    std::set<std::string> names;
    unsigned __int128 expected = 0;  // the next tensor's offset
    std::vector<std::pair<uint64_t, unsigned __int128>> extents;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      std::string name;
      uint64_t n_dims = 0, type = 0, offset = 0, ne[4] = {1, 1, 1, 1};
      if (!str(name) || name.size() >= 64 || !names.insert(name).second) return false;
      if (!num(n_dims, 4) || n_dims > 4) return false;
      for (uint64_t d = 0; d < n_dims; ++d)
        if (!num(ne[d], 8) || ne[d] >> 63) return false;  // negative as an int64
      // The loader's check INT64_MAX / ne[d] <= (product so far) divides by ne[1..3].
      unsigned __int128 elems = ne[0];
      for (int d = 1; d < 4; ++d) {
        if (ne[d] == 0 || INT64_MAX / ne[d] <= elems) return false;
        elems *= ne[d];
      }
      if (!num(type, 4) || type >= 40 || ggml_blocks[type][0] == 0) return false;
      if (ne[0] % ggml_blocks[type][0] != 0 || !num(offset, 8) || offset != expected) return false;
      const unsigned __int128 nbytes = elems / ggml_blocks[type][0] * ggml_blocks[type][1];
      extents.emplace_back(offset, nbytes);
      expected += (nbytes + alignment_ - 1) / alignment_ * alignment_;
    }
    // The data section at the next multiple of the alignment; each tensor's data inside the file
    // (llama.cpp's model loader).
    const uint64_t data = n_tensors ? (pos_ + alignment_ - 1) / alignment_ * alignment_ : pos_;
    if (data > b_.size()) return false;
    for (const auto& [offset, nbytes] : extents)
      if (data + offset + nbytes > b_.size()) return false;
    return true;
  }
  bool walk() {
    uint64_t version = 0, n_tensors = 0, n_kv = 0;
    if (b_.size() < 4 || std::memcmp(b_.data(), "GGUF", 4) != 0) return false;
    pos_ = 4;
    if (!num(version, 4) || (version != 2 && version != 3)) return false;
    if (!num(n_tensors, 8) || !num(n_kv, 8) || (n_tensors >> 63) || (n_kv >> 63)) return false;
    return kvs(n_kv) && tensors(n_tensors);
  }

  const bytes_t& b_;
  size_t pos_ = 0;
  uint64_t alignment_ = 32;
  bool ok_ = false;
  std::vector<field_at> fields_;
};

// ---- the .npy oracle: numpy.lib.format's rules ------------------------------------------------

// Python's tokens in a header dict literal: punctuation, 'strings', words, integers.
std::vector<std::string> py_tokens(const std::string& h, int major, bool& ok) {
  static const std::regex token(
      R"(^[ \t\n\r\f]*(?:([{}():,])|('[^'\\\n]*'|"[^"\\\n]*")|([A-Za-z_]+)|([0-9]+L?))?)");
  std::vector<std::string> out;
  ok = true;
  for (auto it = h.begin(); it != h.end();) {
    std::smatch m;
    std::regex_search(it, h.end(), m, token);
    if (m.length(0) == 0) return ok = false, out;
    if (m[1].matched || m[2].matched || m[3].matched || m[4].matched) {
      std::string t = m[1].matched   ? m[1].str()
                      : m[2].matched ? m[2].str()
                      : m[3].matched ? m[3].str()
                                     : m[4].str();
      if (!t.empty() && t.back() == 'L' && major >= 3) return ok = false, out;
      out.push_back(t);
    }
    it += m.length(0);
  }
  return out;
}

// Whether NumPy loads the file as `got` (dtype, shape and data): the header a dict literal of
// exactly 'descr', 'fortran_order' (False; True would be Fortran order) and 'shape' (a tuple of
// integers), descr a dtype of got's kind and size in little-endian or no byte order, and the
// data at least the shape's bytes, equal to got's.
bool npy_oracle(const bytes_t& b, const npy_array& got) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0 || b[7] != 0) return false;
  const int major = b[6];
  if (major < 1 || major > 3) return false;
  const size_t off = major == 1 ? 10 : 12;
  if (b.size() < off) return false;
  const uint64_t hlen = load(b, 8, major == 1 ? 2 : 4);
  if (b.size() < off + hlen) return false;
  bool ok = true;
  const auto t = py_tokens(std::string(b.begin() + off, b.begin() + off + hlen), major, ok);
  // { key : value , ... } with values 'str', True / False or ( int , ... ); last key wins.
  std::map<std::string, std::vector<std::string>> d;
  size_t i = 0;
  auto at = [&](const char* s) { return i < t.size() && t[i] == s; };
  if (!ok || !at("{")) return false;
  ++i;
  while (!at("}")) {
    if (i + 2 >= t.size() || (t[i][0] != '\'' && t[i][0] != '"') || t[i + 1] != ":") return false;
    const std::string key = t[i].substr(1, t[i].size() - 2);
    i += 2;
    std::vector<std::string> value;
    if (at("(")) {
      value.push_back("(");
      for (++i; !at(")"); ++i)
        if (i >= t.size())
          return false;
        else
          value.push_back(t[i]);
      ++i;
    } else {
      value.push_back(t[i++]);
    }
    d[key] = value;
    if (at(","))
      ++i;
    else if (!at("}"))
      return false;
  }
  if (i + 1 != t.size() || d.size() != 3 || !d.count("descr") || !d.count("fortran_order") ||
      !d.count("shape"))
    return false;
  // shape: ( ) or ( n , ) or ( n , m [, ...] [,] )
  const auto& s = d["shape"];
  std::vector<int64_t> shape;
  if (s[0] != "(") return false;
  for (size_t k = 1; k < s.size(); k += 2) {
    if (!std::isdigit(static_cast<unsigned char>(s[k][0]))) return false;
    shape.push_back(std::stoll(s[k]));
    if (k + 1 < s.size() && s[k + 1] != ",") return false;
  }
  if (shape.size() == 1 && s.size() != 3) return false;  // (n) is an int, not a tuple
  if (d["fortran_order"] != std::vector<std::string>{"False"}) return false;
  static const std::regex descr(R"(['"]([<>|=]?)([fiub])([0-9]+)['"])");
  std::smatch m;
  const std::string ds = d["descr"][0];
  if (!std::regex_match(ds, m, descr)) return false;
  const char kind = m[2].str()[0];
  const size_t size = std::stoul(m[3].str());
  const char want_kind = got.type == dtype::f32 || got.type == dtype::f64 || got.type == dtype::f16
                             ? 'f'
                         : got.type == dtype::b1                            ? 'b'
                         : got.type == dtype::i64 || got.type == dtype::i32 ? 'i'
                                                                            : 'u';
  if (kind != want_kind || size != dtype_size(got.type) || (size > 1 && m[1] == ">")) return false;
  if (got.shape != shape) return false;
  const size_t need = static_cast<size_t>(got.numel()) * size;
  return b.size() - off - hlen >= need && got.data.size() == need &&
         (need == 0 || std::memcmp(b.data() + off + hlen, got.data.data(), need) == 0);
}

}  // namespace

namespace {

// ---- the mutations ----------------------------------------------------------------------------

// Values a length, count or type field is overwritten with: huge, at the edges, small.
constexpr uint64_t interesting[] = {~uint64_t{0},
                                    uint64_t{1} << 63,
                                    (uint64_t{1} << 62) + 1,
                                    uint64_t{1} << 40,
                                    (uint64_t{1} << 30) + 1,
                                    uint64_t{1} << 32,
                                    0x7fffffff,
                                    0xffffffff,
                                    65537,
                                    65536,
                                    4096,
                                    64,
                                    63,
                                    40,
                                    13,
                                    12,
                                    9,
                                    8,
                                    4,
                                    2,
                                    1,
                                    0};

void put(bytes_t& b, size_t at, uint64_t v, int width) {
  for (int i = 0; i < width && at + i < b.size(); ++i)
    b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// One to four random edits of `b`; `fields` are the seed's length, count and type fields.
bytes_t mutate(bytes_t b, const std::vector<field_at>& fields) {
  const int n = *rc::gen::inRange(1, 5);
  for (int k = 0; k < n; ++k) {
    if (b.empty()) b.push_back(0);
    const size_t size = b.size();
    const size_t at = *rc::gen::inRange<size_t>(0, size);
    const size_t len = *rc::gen::inRange<size_t>(1, std::min<size_t>(size - at, 64) + 1);
    switch (*rc::gen::inRange(0, 9)) {
      case 0:  // flip bits
        b[at] ^= static_cast<uint8_t>(*rc::gen::inRange(1, 256));
        break;
      case 1:  // set a byte
        b[at] = *rc::gen::arbitrary<uint8_t>();
        break;
      case 2:  // cut
        b.resize(at);
        break;
      case 3: {  // repeat a range
        const bytes_t r(b.begin() + at, b.begin() + at + len);
        b.insert(b.begin() + at, r.begin(), r.end());
        break;
      }
      case 4:  // delete a range
        b.erase(b.begin() + at, b.begin() + at + len);
        break;
      case 5: {  // insert random bytes
        const auto r =
            *rc::gen::container<std::vector<uint8_t>>(len, rc::gen::arbitrary<uint8_t>());
        b.insert(b.begin() + at, r.begin(), r.end());
        break;
      }
      case 6:  // an interesting u64 anywhere
        put(b, at,
            *rc::gen::elementOf(
                std::vector<uint64_t>(std::begin(interesting), std::end(interesting))),
            8);
        break;
      default:  // an interesting value, or one a little off, in a length, count or type field
        if (!fields.empty()) {
          const auto& f = fields[*rc::gen::inRange<size_t>(0, fields.size())];
          if (f.pos + f.width > b.size()) break;
          const uint64_t v = *rc::gen::arbitrary<bool>()
                                 ? *rc::gen::elementOf(std::vector<uint64_t>(
                                       std::begin(interesting), std::end(interesting)))
                                 : load(b, f.pos, f.width) + *rc::gen::inRange<int>(-3, 4);
          put(b, f.pos, v, f.width);
        }
        break;
    }
  }
  return b;
}

// Outcomes by category, printed at the end of each property.
struct tally {
  std::map<std::string, int> counts;
  int cases = 0;
  void print(const char* what) const {
    std::printf("%s: %d mutated inputs (RapidCheck seed 48)\n", what, cases);
    for (const auto& [k, v] : counts) std::printf("  %6d  %s\n", v, k.c_str());
  }
};

// A refusal's category: its field (for GGUF the entry, kv or tensor, without its index and
// name, which may hold any byte) and the kind of reason, by the first of a list of phrases it
// holds (else the first words of m, the message after its field).
std::string category(std::string field, const std::string& m) {
  static const char* phrases[] = {"duplicate",
                                  "runs past the end of the file",
                                  "truncated",
                                  "unknown value type",
                                  "unknown ggml type",
                                  "an array of arrays",
                                  "cannot fit",
                                  "is absurd",
                                  "elements needs",
                                  "bool must be 0 or 1",
                                  "must be in [1, 4]",
                                  "must be a u32 power of two",
                                  "not a multiple",
                                  "has no size",
                                  "dimensions overflow",
                                  "cannot read a zero",
                                  "refuses tensor names",
                                  ", expected",
                                  "not a GGUF file",
                                  "big-endian",
                                  "unsupported"};
  static const std::regex index(R"(\[[0-9]+\]| [0-9]+)"), words(R"([A-Za-z][A-Za-z ]*)");
  field = std::regex_replace(field, index, "");
  for (const char* p : phrases)
    if (m.find(p) != std::string::npos) return "refused: " + field + ": " + p;
  std::smatch w;
  std::regex_search(m, w, words);
  return "refused: " + field + ": " + w.str();
}

// The message checks every refusal must pass; returns its category.
std::string checked_message(const std::string& m, const std::regex& form) {
  RC_ASSERT(m.size() < 300u);
  for (const char ch : m) RC_ASSERT(ch >= 0x20 && ch < 0x7f);
  std::smatch f;
  RC_ASSERT(std::regex_search(m, f, form));
  return category(f[1].str(), f.suffix().str());
}

// The cases run, from RapidCheck's seed 48: about 1 s in Release, 30 s under ASan.
constexpr int gguf_cases = 40000;
constexpr int npy_cases = 40000;

// Runs `prop` for `cases` cases from a fixed seed; fails the test with RapidCheck's report.
template <typename Prop>
void check_fixed(const char* name, int cases, Prop prop) {
  rc::detail::TestParams params;
  params.seed = 48;
  params.maxSuccess = cases;
  rc::detail::TestMetadata meta;
  meta.id = meta.description = name;
  const auto result = rc::detail::checkTestable(prop, meta, params);
  if (!result.template is<rc::detail::SuccessResult>()) {
    std::ostringstream os;
    rc::detail::printResultMessage(result, os);
    ADD_FAILURE() << os.str();
  }
}

std::string golden(const std::string& rel) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/golden/" + rel;
}

}  // namespace

// llama.cpp's converter's files, mutated, through gguf_parse and, when it accepts one, the RoPE
// mapping (which may refuse it, with io_error or invalid_argument; never crash).
TEST(ReaderMutations, Gguf) {
  std::vector<bytes_t> seeds;
  std::vector<std::vector<field_at>> fields;
  for (const auto& e : std::filesystem::directory_iterator(golden("gguf")))
    if (e.path().extension() == ".gguf") seeds.push_back(read_bytes(e.path().string()));
  std::sort(seeds.begin(), seeds.end());
  ASSERT_EQ(seeds.size(), 10u);
  for (const auto& s : seeds) {
    const gguf_walk w(s);
    ASSERT_TRUE(w.ok());  // the oracle accepts every seed, as posenc does
    ASSERT_NO_THROW(gguf_parse(s, "m.gguf"));
    fields.push_back(w.fields());
  }
  static const std::regex form(
      R"(^m\.gguf: offset [0-9]+: (magic|version|tensor_count|kv_count|general\.alignment|kv\[[0-9]+\]|tensor\[[0-9]+\])[: ])");
  tally t;
  check_fixed("GGUF mutations", gguf_cases, [&] {
    const size_t which = *rc::gen::inRange<size_t>(0, seeds.size());
    const bytes_t b = mutate(seeds[which], fields[which]);
    ++t.cases;
    std::string outcome;
    try {
      const gguf_file f = gguf_parse(b, "m.gguf");
      RC_ASSERT(gguf_walk(b).ok());
      try {
        std::vector<std::string> warnings;
        gguf_rope_config(f, b, &warnings);
        outcome = "accepted";
      } catch (const io_error&) {
        outcome = "accepted; RoPE mapping refused it";
      } catch (const invalid_argument&) {
        outcome = "accepted; RoPE mapping refused it";
      }
    } catch (const io_error& e) {
      outcome = checked_message(e.what(), form);
    }
    ++t.counts[outcome];
  });
  t.print("GGUF");
}

namespace {

// A .npy file written here: version `major`.0, the header dict as given, padded with spaces to a
// multiple of 64 and ended with a newline, then the data.
bytes_t npy_file(int major, const std::string& dict, size_t data_bytes, uint8_t fill) {
  const size_t pre = major == 1 ? 10 : 12;
  std::string h = dict;
  while ((pre + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  bytes_t b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i)
    b.push_back(static_cast<uint8_t>(h.size() >> (8 * i)));
  b.insert(b.end(), h.begin(), h.end());
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(fill + 37 * i));
  return b;
}

std::vector<bytes_t> npy_seeds() {
  std::vector<bytes_t> seeds = {
      npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 24, 1),
      npy_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }", 40, 2),
      npy_file(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 3), }", 12, 3),
      npy_file(2, "{'shape': (4,), 'fortran_order': False, 'descr': '<i8'}", 32, 4),
      npy_file(3, "{\"descr\": \"<f2\", \"fortran_order\": False, \"shape\": ()}", 2, 5),
      npy_file(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (0, 7), }", 0, 6),
      npy_file(1, "{'descr':'<u2','fortran_order':False,'shape':(2,3)}", 12, 7),
      npy_file(2, "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 1, 1, 2), }", 8, 8)};
  // NumPy's own files (np.save, as the golden values were written).
  for (const char* f : {"flash_attention/interleaved_full_offb_float64.sin.npy",
                        "flash_attention/interleaved_frac05_off3_float32.out.npy"})
    seeds.push_back(read_bytes(golden(f)));
  return seeds;
}

}  // namespace

// Valid .npy files, mutated, through parse_npy.
TEST(ReaderMutations, Npy) {
  const auto seeds = npy_seeds();
  std::vector<std::vector<field_at>> fields;
  for (const auto& s : seeds) {
    const auto a =
        parse_npy(std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                         reinterpret_cast<const std::byte*>(s.data()) + s.size()),
                  "m.npy");
    ASSERT_TRUE(npy_oracle(s, a));
    fields.push_back({{8, s[6] == 1 ? 2 : 4}});  // the header length
  }
  static const std::regex form(
      R"(^m\.npy is not a valid \.npy file: (magic|version|header length|header byte [0-9]+|header|descr|fortran_order|shape|data): )");
  tally t;
  check_fixed("npy mutations", npy_cases, [&] {
    const size_t which = *rc::gen::inRange<size_t>(0, seeds.size());
    const bytes_t b = mutate(seeds[which], fields[which]);
    ++t.cases;
    std::string outcome;
    try {
      const auto a =
          parse_npy(std::vector<std::byte>(reinterpret_cast<const std::byte*>(b.data()),
                                           reinterpret_cast<const std::byte*>(b.data()) + b.size()),
                    "m.npy");
      RC_ASSERT(npy_oracle(b, a));
      outcome = "accepted";
    } catch (const io_error& e) {
      outcome = checked_message(e.what(), form);
    }
    ++t.counts[outcome];
  });
  t.print(".npy");
}
