// python/src/kv_cache.cpp: posenc.KVCache over the library's cache (posenc/attention/kv_cache.hpp).
//
// The library stores the keys, transformed once by the cache's q/k transform (RoPE, xPos or
// M-RoPE) at their positions, and the values, head-major, keys in 8-key blocks when D % 8 == 0,
// in float32, float64, float16 or bfloat16 (kv_storage); attend is attention_forward_cached
// (split decode and the rest as the engine decides by shape). This file converts arrays, owns
// the RoPE frequencies the cache's attention_position points to, and orders appends against
// attends from several Python threads (a shared mutex, taken with the GIL released).
#include <pybind11/stl.h>

#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "common.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/half.hpp"
#include "posenc/formats/hf_config.hpp"

namespace posenc::py_bind {

// attention.cpp: q over S cached keys with posenc.attention's options; run calls the library.
template <typename Real>
py::object attend_cached(const py::array& q, const py::dict& opts, int64_t S, int64_t Hkv,
                         int64_t rows, const std::function<void(attention_params<Real>&)>& run,
                         bool return_lse);

namespace {

// One posenc._posenc._KVCache: a float32 cache (f32, f16 or bf16 storage) or a float64 one.
struct py_kv_cache {
  std::unique_ptr<rope_freqs> freqs;  // what the cache's position points to (RoPE, M-RoPE)
  std::unique_ptr<kv_cache<float>> f;
  std::unique_ptr<kv_cache<double>> d;
  mutable std::shared_mutex lock;  // append / clear exclusive, attend / reads shared

  // fn(cache) on whichever cache this is.
  template <typename F>
  auto visit(F&& fn) const {
    return f ? fn(*f) : fn(*d);
  }
};

kv_storage storage_from(const py::object& kv_dtype) {
  if (kv_dtype.is_none()) return kv_storage::f32;
  const auto s = kv_dtype.cast<std::string>();
  if (s == "f16") return kv_storage::f16;
  if (s == "bf16") return kv_storage::bf16;
  fail("kv_dtype must be None (keys and values in dtype), \"f16\" or \"bf16\", got \"{}\"", s);
}

// The NumPy dtype of the stored words: Real, float16, or uint16 holding bfloat16 bits (NumPy has
// no bfloat16; posenc.attention's kv_dtype="bf16" takes the same arrays).
template <typename Real>
py::dtype stored_dtype(const kv_cache<Real>& c) {
  if (c.storage() == kv_storage::f16) return py::dtype("float16");
  if (c.storage() == kv_storage::bf16) return py::dtype::of<uint16_t>();
  return py::dtype::of<Real>();
}

template <typename Real>
std::unique_ptr<kv_cache<Real>> make_cache(py_kv_cache& box, int64_t Hkv, int64_t D,
                                           int64_t capacity, kv_storage storage,
                                           const py::object& rope, const std::string& layout,
                                           const std::string& angle, const py::object& seq_len,
                                           int64_t start, const std::vector<named_scheme>& named,
                                           kv_shift_mode mode) {
  attention_position<Real> pos;
  if (!rope.is_none()) {
    const auto& c = rope.cast<const rope_config&>();
    if (c.head_dim != D) fail("rope.head_dim must equal head_dim = {}, got {}", D, c.head_dim);
    const int64_t n = seq_len.is_none() ? capacity : seq_len.cast<int64_t>();
    if (n < 0) fail("rope_seq_len must be >= 0, got {}", n);
    box.freqs = std::make_unique<rope_freqs>(rope_frequencies(c, n));
    const auto lay = rope_layout_from_name(layout, "rope_layout");
    const auto ang = rope_angle_from_name(angle, "rope_angle");
    pos.named = named;
    if (c.mrope_section.empty()) {
      pos.named.push_back(rope_scheme(*box.freqs, lay, ang));
    } else {
      if (c.mrope_section.size() != 3)
        fail("rope.mrope_section must have 3 entries (temporal, height, width), got {}",
             c.mrope_section.size());
      std::array<int64_t, 3> section{};
      std::copy(c.mrope_section.begin(), c.mrope_section.end(), section.begin());
      pos.named.push_back(mrope_scheme(*box.freqs, section, c.mrope_interleaved, lay, ang, {}, {}));
    }
  } else {
    pos.named = named;
  }
  return std::make_unique<kv_cache<Real>>(capacity, Hkv, D, pos, start, storage, mode);
}

// Keys or values as (size(), Hkv, D) in the stored format, copied out of the cache's layout.
template <typename Real>
py::array token_major(const kv_cache<Real>& c, bool keys) {
  const int64_t n = c.size(), H = c.kv_heads(), D = c.head_dim();
  const bool half = c.storage() != kv_storage::f32;
  py::array out(stored_dtype(c), std::vector<py::ssize_t>{n, H, D});
  auto copy = [&](auto* dst, const auto* src) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t hk = 0; hk < H; ++hk)
        for (int64_t e = 0; e < D; ++e)
          dst[(j * H + hk) * D + e] = src[keys ? c.key_offset(j, hk, e) : c.row_offset(j, hk) + e];
  };
  if (half)
    copy(static_cast<uint16_t*>(out.mutable_data()), keys ? c.keys16() : c.values16());
  else
    copy(static_cast<Real*>(out.mutable_data()), keys ? c.keys() : c.values());
  return out;
}

// The stored words themselves, (Hkv, head_capacity() * D), read-only, sharing the cache's memory.
template <typename Real>
py::array storage_view(const kv_cache<Real>& c, bool keys, py::handle owner) {
  const bool half = c.storage() != kv_storage::f32;
  const void* data = half ? static_cast<const void*>(keys ? c.keys16() : c.values16())
                          : static_cast<const void*>(keys ? c.keys() : c.values());
  py::array a(stored_dtype(c), std::vector<py::ssize_t>{c.kv_heads(), c.head_stride()}, data,
              owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// append's k or v: (n, Hkv, D) in the dtype the cache computes in (float32 for f16 / bf16).
template <typename Real>
py::array_t<Real, py::array::c_style> kv_input(py::handle obj, const char* name,
                                               const kv_cache<Real>& c) {
  const py::array a = as_array(obj, name);
  if (!a.dtype().is(py::dtype::of<Real>()))
    type_fail(std::string(name) + " must be " + dtype_name(py::dtype::of<Real>()) +
              " (the cache's dtype; half-precision storage rounds float32 keys and values), "
              "got " +
              dtype_str(a));
  if (a.ndim() != 3 || a.shape(1) != c.kv_heads() || a.shape(2) != c.head_dim())
    fail("{} must have shape (T, Hkv, D) = (T, {}, {}), got {}", name, c.kv_heads(), c.head_dim(),
         shape_str(a));
  return contiguous_as<Real>(a);
}

template <typename Real>
py::array append(const py_kv_cache& box, kv_cache<Real>& c, py::handle k0, py::handle v0,
                 py::handle positions) {
  const auto k = kv_input<Real>(k0, "k", c), v = kv_input<Real>(v0, "v", c);
  const int64_t n = k.shape(0), rows = c.ids_per_token();
  if (v.shape(0) != n)
    fail("v must have the shape of k ({}, {}, {}), got ({}, {}, {})", n, c.kv_heads(), c.head_dim(),
         v.shape(0), v.shape(1), v.shape(2));
  // ids: empty, (n,), or (rows, n) row-major; a 1-D id p of an M-RoPE cache is (p, p, p).
  std::vector<int64_t> ids;
  if (!positions.is_none()) {
    const py::array a = as_array(positions, "positions");
    const bool one = a.ndim() == 1 && a.shape(0) == n;
    if (!one && !(rows > 1 && a.ndim() == 2 && a.shape(0) == rows && a.shape(1) == n))
      fail("positions must have shape (T,) = ({},){}, got {}", n,
           rows > 1 ? fmt::format(" or ({}, T) = ({}, {})", rows, rows, n) : "", shape_str(a));
    ids = int_values(a, "positions");
    for (int64_t r = 1; one && r < rows; ++r) ids.insert(ids.end(), ids.begin(), ids.begin() + n);
  }
  std::vector<int64_t> used;
  {
    py::gil_scoped_release nogil;
    std::unique_lock l(box.lock);
    used = c.append(k.data(), v.data(), n, ids);
  }
  py::array_t<int64_t> out(rows > 1 ? std::vector<py::ssize_t>{rows, n}
                                    : std::vector<py::ssize_t>{n});
  std::copy(used.begin(), used.end(), out.mutable_data());
  return out;
}

}  // namespace

py::object kv_cache_attend(py::handle obj, const py::array& q, const py::dict& opts,
                           bool return_lse) {
  if (!py::isinstance<py_kv_cache>(obj)) return py::object();
  const auto& box = obj.cast<const py_kv_cache&>();
  return box.visit([&](const auto& c) {
    using Real = std::remove_cvref_t<decltype(*c.keys())>;
    const std::function<void(attention_params<Real>&)> run = [&](attention_params<Real>& p) {
      std::shared_lock l(box.lock);
      attention_forward_cached(p, c);
    };
    return attend_cached<Real>(q, opts, c.size(), c.kv_heads(), c.ids_per_token(), run, return_lse);
  });
}

namespace {

// Binds _KVCache's constructor.
void bind_kv_cache_init(py::class_<py_kv_cache>& cls) {
  cls.def(
      py::init([](int64_t Hkv, int64_t D, int64_t capacity, const std::string& dtype,
                  const py::object& kv_dtype, const py::object& rope, const std::string& layout,
                  const std::string& angle, const py::object& seq_len, int64_t start,
                  const py::list& named_list, const std::string& shift_mode) {
        // named_list: the q/k transforms reached by name, [(name, {param: value}, {})], as
        // posenc/__init__.py builds them from the declarations' keywords.
        std::vector<named_scheme> named;
        for (const py::handle item : named_list) {
          const auto t = item.cast<py::tuple>();
          named_scheme n{t[0].cast<std::string>(), {}};
          if (!scheme_decl_of(n.name).transform)
            fail("{} is no q/k transform: a KV cache takes the keywords of those alone", n.name);
          for (const auto& [key, value] : t[1].cast<py::dict>())
            n.params.emplace_back(key.cast<std::string>(), value.cast<double>());
          named.push_back(std::move(n));
        }
        auto box = std::make_unique<py_kv_cache>();
        const kv_storage storage = storage_from(kv_dtype);
        const kv_shift_mode mode = kv_shift_mode_from_name(shift_mode, "shift_mode");
        if (dtype == "float32")
          box->f = make_cache<float>(*box, Hkv, D, capacity, storage, rope, layout, angle, seq_len,
                                     start, named, mode);
        else if (dtype == "float64")
          box->d = make_cache<double>(*box, Hkv, D, capacity, storage, rope, layout, angle, seq_len,
                                      start, named, mode);
        else
          type_fail("dtype must be float32 or float64, got " + dtype);
        return box;
      }),
      py::arg("n_kv_heads"), py::arg("head_dim"), py::arg("capacity"), py::arg("dtype"),
      py::arg("kv_dtype"), py::arg("rope"), py::arg("rope_layout"), py::arg("rope_angle"),
      py::arg("rope_seq_len"), py::arg("start_position"), py::arg("named"), py::arg("shift_mode"));
}

// Binds _KVCache's mutators: append, clear, edit.
void bind_kv_cache_mutators(py::class_<py_kv_cache>& cls) {
  cls.def(
         "append",
         [](py_kv_cache& box, py::handle k, py::handle v, py::handle positions) {
           return box.f ? append(box, *box.f, k, v, positions)
                        : append(box, *box.d, k, v, positions);
         },
         py::arg("k"), py::arg("v"), py::arg("positions") = py::none())
      .def("clear",
           [](py_kv_cache& box) {
             py::gil_scoped_release nogil;
             std::unique_lock l(box.lock);
             box.f ? box.f->clear() : box.d->clear();
           })
      .def(
          "edit",
          [](py_kv_cache& box, const std::string& op, int64_t p0, int64_t p1, int64_t arg) {
            py::gil_scoped_release nogil;
            std::unique_lock l(box.lock);
            auto run = [&](auto& c) -> int64_t {
              if (op == "remove") return c.remove(p0, p1);
              if (op == "shift") return c.shift(p0, p1, arg);
              if (op == "evict_streaming") return c.evict_streaming(p0, arg);
              c.divide(p0, p1, arg);
              return 0;
            };
            return box.f ? run(*box.f) : run(*box.d);
          },
          py::arg("op"), py::arg("p0"), py::arg("p1"), py::arg("arg"));
}

// Binds _KVCache's readers of the stored tokens: shift_mode, keys, values, ids, stored, key_index.
void bind_kv_cache_contents(py::class_<py_kv_cache>& cls) {
  cls.def_property_readonly("shift_mode",
                            [](const py_kv_cache& b) {
                              return std::string(kv_shift_mode_name(
                                  b.visit([](const auto& c) { return c.shift_mode(); })));
                            })
      .def("keys",
           [](const py_kv_cache& b) {
             std::shared_lock l(b.lock);
             return b.visit([](const auto& c) { return token_major(c, true); });
           })
      .def("values",
           [](const py_kv_cache& b) {
             std::shared_lock l(b.lock);
             return b.visit([](const auto& c) { return token_major(c, false); });
           })
      .def("ids",
           [](const py_kv_cache& b) {
             // (ids_per_token, size) int64: row 0 the positions, rows 1, 2 M-RoPE's height, width.
             std::shared_lock l(b.lock);
             return b.visit([](const auto& c) {
               py::array_t<int64_t> a(std::vector<py::ssize_t>{c.ids_per_token(), c.size()});
               for (int64_t r = 0; r < c.ids_per_token(); ++r)
                 std::copy(c.ids(r).begin(), c.ids(r).end(), a.mutable_data() + r * c.size());
               return a;
             });
           })
      .def("stored",
           [](py::object self, bool keys) {
             const auto& b = self.cast<const py_kv_cache&>();
             return b.visit([&](const auto& c) { return storage_view(c, keys, self); });
           })
      .def("key_index", [](const py_kv_cache& b, int64_t j, int64_t hk, int64_t e) {
        return b.visit([&](const auto& c) {
          if (j < 0 || j >= c.head_capacity() || hk < 0 || hk >= c.kv_heads() || e < 0 ||
              e >= c.head_dim())
            fail(
                "key_index: (j, hk, e) must lie in [0, {}) x [0, {}) x [0, {}), got ({}, "
                "{}, {})",
                c.head_capacity(), c.kv_heads(), c.head_dim(), j, hk, e);
          return c.key_offset(j, hk, e) - hk * c.head_stride();
        });
      });
}

// Binds _KVCache's size and shape properties.
void bind_kv_cache_properties(py::class_<py_kv_cache>& cls) {
  cls.def_property_readonly("size",
                            [](const py_kv_cache& b) {
                              std::shared_lock l(b.lock);
                              return b.visit([](const auto& c) { return c.size(); });
                            })
      .def_property_readonly("next_position",
                             [](const py_kv_cache& b) {
                               std::shared_lock l(b.lock);
                               return b.visit([](const auto& c) { return c.next_position(); });
                             })
      .def_property_readonly(
          "capacity",
          [](const py_kv_cache& b) { return b.visit([](const auto& c) { return c.capacity(); }); })
      .def_property_readonly(
          "kv_heads",
          [](const py_kv_cache& b) { return b.visit([](const auto& c) { return c.kv_heads(); }); })
      .def_property_readonly(
          "head_dim",
          [](const py_kv_cache& b) { return b.visit([](const auto& c) { return c.head_dim(); }); })
      .def_property_readonly("head_capacity",
                             [](const py_kv_cache& b) {
                               return b.visit([](const auto& c) { return c.head_capacity(); });
                             })
      .def_property_readonly("keys_blocked",
                             [](const py_kv_cache& b) {
                               return b.visit([](const auto& c) { return c.keys_blocked(); });
                             })
      .def_property_readonly("ids_per_token",
                             [](const py_kv_cache& b) {
                               return b.visit([](const auto& c) { return c.ids_per_token(); });
                             })
      .def_property_readonly("kv_dtype",
                             [](const py_kv_cache& b) {
                               return b.visit([](const auto& c) { return name(c.storage()); });
                             })
      .def_property_readonly("dtype",
                             [](const py_kv_cache& b) {
                               return b.f ? py::dtype::of<float>() : py::dtype::of<double>();
                             })
      .def_property_readonly("nbytes", [](const py_kv_cache& b) {
        // Bytes of key and value storage, allocated up front: 2 * Hkv * head_capacity * D words.
        return b.visit([](const auto& c) {
          return 2 * c.head_stride() * c.kv_heads() *
                 static_cast<int64_t>(stored_dtype(c).itemsize());
        });
      });
}

}  // namespace

void bind_kv_cache(py::module_& m) {
  py::class_<py_kv_cache> cls(m, "_KVCache", "The library's KV cache (posenc.KVCache wraps it).");
  bind_kv_cache_init(cls);
  bind_kv_cache_mutators(cls);
  bind_kv_cache_contents(cls);
  bind_kv_cache_properties(cls);
}

}  // namespace posenc::py_bind
