// llama_cpp_kshift_driver.cpp: runs llama.cpp's K-shift on a tiny GGUF model and prints the
// key cache before and after it, for scripts/golden/llama_cpp_kshift.py (which builds this file
// against a llama.cpp checkout, outside posenc's build; it is not part of the project).
//
//   llama_cpp_kshift_driver MODEL.gguf N_TOKENS START OUT.json OP...
//   OP: rm P0 P1 | add P0 P1 DELTA | div P0 P1 D   (llama_memory_seq_rm / seq_add / seq_div on
//       sequence 0, applied in order)
//
// What it does, through llama.h only:
//   1. loads MODEL.gguf on the CPU and makes a context with an F32 key and value cache
//      (type_k = type_v = GGML_TYPE_F32: the cached keys are the float32 outputs of ggml's RoPE,
//      copied, not rounded to half precision), one sequence, one thread;
//   2. decodes tokens (7 i + 3) mod n_vocab at positions START .. START + N_TOKENS - 1 in one
//      batch;
//   3. reads the cache of sequence 0 with llama_state_seq_get_data ("pre"): per cell its
//      position and per layer its key row (n_embd_k_gqa floats: Hkv heads of head_dim);
//   4. applies the OPs; they only change the cells' positions and queue each cell's change
//      (llama_kv_cells::shift); the keys move when the next llama_decode runs its memory
//      update (llama_kv_cache::update: the K-shift graph, ggml_rope_ext_inplace on every layer's
//      K view with the per-cell changes as positions);
//   5. decodes one more token at seq_pos_max + 1 (the "trigger"), which runs that K-shift;
//   6. reads the cache again ("post").
// A graph callback (cb_eval) records, without changing anything: the keys before RoPE of every
// decode (the node named "Kcur-<layer>" that feeds the RoPE: the K projection, plus its bias
// where the model has one), and the parameters of every GGML_OP_ROPE node as ggml receives them
// (op_params: n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor,
// beta_fast, beta_slow; the freq factors tensor if any), for the forward RoPE of the keys and
// for the K-shift, whose int32 position input (the per-cell changes) it records as well.
//
// Floats are printed as their IEEE-754 bit patterns (uint32), so nothing is rounded on the way.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

struct rope_record {
  std::string name;
  int n_dims = 0, mode = 0, n_ctx_orig = 0;
  float freq_base = 0, freq_scale = 0, ext_factor = 0, attn_factor = 0, beta_fast = 0,
        beta_slow = 0;
  std::vector<float> freq_factors;
  std::vector<int32_t> positions;  // the position input (K-shift: the per-cell changes)
  int64_t ne[4] = {0, 0, 0, 0};
};

struct capture {
  std::string phase;  // "prefill", "trigger"
  // phase -> layer -> the pre-RoPE keys, (n_tokens, n_embd_k_gqa) row-major
  std::map<std::string, std::map<int, std::vector<float>>> raw_k;
  std::map<std::string, std::map<int, int64_t>> raw_k_rows;
  std::vector<rope_record> forward_rope, shift_rope;
};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

bool starts_with(const char* s, const char* p) {
  return std::strncmp(s, p, std::strlen(p)) == 0;
}

// "Kcur-<il>" exactly: returns il, else -1.
int kcur_layer(const char* name) {
  if (!starts_with(name, "Kcur-")) return -1;
  const char* d = name + 5;
  if (!*d) return -1;
  for (const char* c = d; *c; ++c)
    if (*c < '0' || *c > '9') return -1;
  return std::atoi(d);
}

rope_record read_rope(const ggml_tensor* t) {
  rope_record r;
  r.name = t->name;
  const int32_t* op = reinterpret_cast<const int32_t*>(t->op_params);
  r.n_dims = op[1];
  r.mode = op[2];
  r.n_ctx_orig = op[4];
  std::memcpy(&r.freq_base, op + 5, sizeof(float));
  std::memcpy(&r.freq_scale, op + 6, sizeof(float));
  std::memcpy(&r.ext_factor, op + 7, sizeof(float));
  std::memcpy(&r.attn_factor, op + 8, sizeof(float));
  std::memcpy(&r.beta_fast, op + 9, sizeof(float));
  std::memcpy(&r.beta_slow, op + 10, sizeof(float));
  for (int i = 0; i < 4; ++i) r.ne[i] = t->ne[i];
  const ggml_tensor* pos = t->src[1];
  if (pos && pos->type == GGML_TYPE_I32) {
    r.positions.resize(ggml_nelements(pos));
    ggml_backend_tensor_get(pos, r.positions.data(), 0, ggml_nbytes(pos));
  }
  const ggml_tensor* ff = t->src[2];
  if (ff && ff->type == GGML_TYPE_F32) {
    r.freq_factors.resize(ggml_nelements(ff));
    ggml_backend_tensor_get(ff, r.freq_factors.data(), 0, ggml_nbytes(ff));
  }
  return r;
}

bool on_node(ggml_tensor* t, bool ask, void* user) {
  auto* c = static_cast<capture*>(user);
  const bool rope = t->op == GGML_OP_ROPE;
  const int il = kcur_layer(t->name);
  const bool raw = il >= 0 && !rope && t->op != GGML_OP_VIEW && t->op != GGML_OP_RESHAPE;
  if (ask) return rope || raw;
  if (raw) {
    if (!ggml_is_contiguous(t) || t->type != GGML_TYPE_F32) {
      std::fprintf(stderr, "driver: %s is not a contiguous F32 tensor\n", t->name);
      std::exit(1);
    }
    // The last "Kcur-<il>" before the RoPE wins (the projection, then its bias where added).
    auto& v = c->raw_k[c->phase][il];
    v.resize(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
    c->raw_k_rows[c->phase][il] = ggml_nelements(t) / t->ne[0];
  } else if (rope && starts_with(t->name, "Kcur-")) {
    if (c->phase == "prefill") c->forward_rope.push_back(read_rope(t));
  } else if (rope && !starts_with(t->name, "Qcur-")) {
    c->shift_rope.push_back(read_rope(t));
  }
  return true;
}

struct snapshot {
  std::vector<int32_t> pos;
  std::vector<std::vector<float>> k;  // per layer: (cells, n_embd_k_gqa)
  uint64_t row = 0;                   // bytes per key row
};

template <typename T>
T take(const std::vector<uint8_t>& b, size_t& at) {
  if (at + sizeof(T) > b.size()) {
    std::fprintf(stderr, "driver: state truncated at %zu\n", at);
    std::exit(1);
  }
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

// The layout of llama_state_seq_get_data (src/llama-context.cpp state_seq_get_data, then
// src/llama-kv-cache.cpp state_write / state_write_meta / state_write_data): u32 magic, i32
// seq_id, u32 n_stream, per stream u32 cell_count and, if nonzero, per cell {i32 pos, u32
// n_seq_id, n_seq_id x i32}, then u32 v_trans, u32 n_layer, per layer {i32 k_type, u64
// k_size_row, cell_count rows}, then the values (not read).
snapshot read_state(llama_context* ctx) {
  const size_t n = llama_state_seq_get_size(ctx, 0);
  std::vector<uint8_t> b(n);
  if (llama_state_seq_get_data(ctx, b.data(), n, 0) != n) {
    std::fprintf(stderr, "driver: llama_state_seq_get_data failed\n");
    std::exit(1);
  }
  size_t at = 0;
  take<uint32_t>(b, at);  // magic
  take<int32_t>(b, at);   // seq_id
  const uint32_t n_stream = take<uint32_t>(b, at);
  if (n_stream != 1) {
    std::fprintf(stderr, "driver: expected one stream, got %u\n", n_stream);
    std::exit(1);
  }
  const uint32_t cells = take<uint32_t>(b, at);
  snapshot s;
  for (uint32_t i = 0; i < cells; ++i) {
    s.pos.push_back(take<int32_t>(b, at));
    const uint32_t n_seq = take<uint32_t>(b, at);
    for (uint32_t j = 0; j < n_seq; ++j) take<int32_t>(b, at);
  }
  take<uint32_t>(b, at);  // v_trans
  const uint32_t n_layer = take<uint32_t>(b, at);
  for (uint32_t l = 0; l < n_layer; ++l) {
    const int32_t type = take<int32_t>(b, at);
    if (type != GGML_TYPE_F32) {
      std::fprintf(stderr, "driver: layer %u key type %d, expected F32\n", l, type);
      std::exit(1);
    }
    s.row = take<uint64_t>(b, at);
    std::vector<float> k(cells * s.row / sizeof(float));
    if (at + cells * s.row > b.size()) {
      std::fprintf(stderr, "driver: state truncated in layer %u keys\n", l);
      std::exit(1);
    }
    std::memcpy(k.data(), b.data() + at, cells * s.row);
    at += cells * s.row;
    s.k.push_back(std::move(k));
  }
  return s;
}

void decode(llama_context* ctx, const std::vector<llama_token>& tok,
            const std::vector<llama_pos>& pos) {
  llama_batch batch = llama_batch_init(static_cast<int32_t>(tok.size()), 0, 1);
  for (size_t i = 0; i < tok.size(); ++i) {
    batch.token[i] = tok[i];
    batch.pos[i] = pos[i];
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = i + 1 == tok.size();
  }
  batch.n_tokens = static_cast<int32_t>(tok.size());
  const int rc = llama_decode(ctx, batch);
  llama_batch_free(batch);
  if (rc != 0) {
    std::fprintf(stderr, "driver: llama_decode returned %d\n", rc);
    std::exit(1);
  }
}

void print_floats(FILE* f, const float* x, size_t n) {
  std::fputc('[', f);
  for (size_t i = 0; i < n; ++i) std::fprintf(f, i ? ",%u" : "%u", bits(x[i]));
  std::fputc(']', f);
}

void print_rope(FILE* f, const rope_record& r) {
  std::fprintf(f,
               "{\"name\":\"%s\",\"n_dims\":%d,\"mode\":%d,\"n_ctx_orig\":%d,\"freq_base\":%u,"
               "\"freq_scale\":%u,\"ext_factor\":%u,\"attn_factor\":%u,\"beta_fast\":%u,"
               "\"beta_slow\":%u,\"ne\":[%lld,%lld,%lld,%lld],\"freq_factors\":",
               r.name.c_str(), r.n_dims, r.mode, r.n_ctx_orig, bits(r.freq_base),
               bits(r.freq_scale), bits(r.ext_factor), bits(r.attn_factor), bits(r.beta_fast),
               bits(r.beta_slow), static_cast<long long>(r.ne[0]), static_cast<long long>(r.ne[1]),
               static_cast<long long>(r.ne[2]), static_cast<long long>(r.ne[3]));
  if (r.freq_factors.empty())
    std::fputs("null", f);
  else
    print_floats(f, r.freq_factors.data(), r.freq_factors.size());
  std::fputs(",\"positions\":[", f);
  for (size_t i = 0; i < r.positions.size(); ++i) std::fprintf(f, i ? ",%d" : "%d", r.positions[i]);
  std::fputs("]}", f);
}

void print_snapshot(FILE* f, const snapshot& s) {
  std::fputs("{\"pos\":[", f);
  for (size_t i = 0; i < s.pos.size(); ++i) std::fprintf(f, i ? ",%d" : "%d", s.pos[i]);
  std::fprintf(f, "],\"row_bytes\":%llu,\"k\":[", static_cast<unsigned long long>(s.row));
  for (size_t l = 0; l < s.k.size(); ++l) {
    if (l) std::fputc(',', f);
    print_floats(f, s.k[l].data(), s.k[l].size());
  }
  std::fputs("]}", f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: %s MODEL.gguf N_TOKENS START OUT.json [rm P0 P1 | add P0 P1 DELTA | "
                 "div P0 P1 D]...\n",
                 argv[0]);
    return 2;
  }
  const char* model_path = argv[1];
  const int n_tokens = std::atoi(argv[2]);
  const int start = std::atoi(argv[3]);
  const char* out_path = argv[4];
  struct op_t {
    std::string kind;
    int p0, p1, arg;
  };
  std::vector<op_t> ops;
  for (int i = 5; i < argc;) {
    const std::string k = argv[i];
    if (k != "rm" && k != "add" && k != "div") {
      std::fprintf(stderr, "driver: unknown op '%s' (rm, add or div)\n", k.c_str());
      return 2;
    }
    const int need = k == "rm" ? 2 : 3;
    if (i + need >= argc) {
      std::fprintf(stderr, "driver: op '%s' needs %d arguments\n", k.c_str(), need);
      return 2;
    }
    op_t o{k, std::atoi(argv[i + 1]), std::atoi(argv[i + 2]),
           need == 3 ? std::atoi(argv[i + 3]) : 0};
    ops.push_back(o);
    i += need + 1;
  }

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(model_path, mp);
  if (!model) {
    std::fprintf(stderr, "driver: cannot load %s\n", model_path);
    return 1;
  }
  capture cap;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_ubatch = 256;
  cp.n_seq_max = 1;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.cb_eval = on_node;
  cp.cb_eval_user_data = &cap;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "driver: cannot create a context\n");
    return 1;
  }
  llama_memory_t mem = llama_get_memory(ctx);
  if (!llama_memory_can_shift(mem)) {
    std::fprintf(stderr, "driver: this cache cannot shift\n");
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  std::vector<llama_token> tok;
  std::vector<llama_pos> pos;
  for (int i = 0; i < n_tokens; ++i) {
    tok.push_back((7 * i + 3) % n_vocab);
    pos.push_back(start + i);
  }
  cap.phase = "prefill";
  decode(ctx, tok, pos);
  const snapshot pre = read_state(ctx);

  cap.shift_rope.clear();
  for (const auto& o : ops) {
    if (o.kind == "rm") {
      if (!llama_memory_seq_rm(mem, 0, o.p0, o.p1)) {
        std::fprintf(stderr, "driver: seq_rm failed\n");
        return 1;
      }
    } else if (o.kind == "add") {
      llama_memory_seq_add(mem, 0, o.p0, o.p1, o.arg);
    } else {
      llama_memory_seq_div(mem, 0, o.p0, o.p1, o.arg);
    }
  }
  const llama_pos trigger_pos = llama_memory_seq_pos_max(mem, 0) + 1;
  const llama_token trigger_tok = (7 * n_tokens + 3) % n_vocab;
  cap.phase = "trigger";
  decode(ctx, {trigger_tok}, {trigger_pos});
  const snapshot post = read_state(ctx);

  FILE* f = std::fopen(out_path, "w");
  if (!f) {
    std::fprintf(stderr, "driver: cannot write %s\n", out_path);
    return 1;
  }
  char desc[256];
  std::fprintf(f, "{\"n_vocab\":%d,\"n_layer\":%d,\"n_head\":%d,\"n_head_kv\":%d,\"n_embd\":%d,",
               n_vocab, llama_model_n_layer(model), llama_model_n_head(model),
               llama_model_n_head_kv(model), llama_model_n_embd(model));
  llama_model_desc(model, desc, sizeof desc);
  std::fprintf(f, "\"desc\":\"%s\",\"rope_type\":%d,\"freq_scale_train\":%u,", desc,
               static_cast<int>(llama_model_rope_type(model)),
               bits(llama_model_rope_freq_scale_train(model)));
  std::fprintf(f, "\"n_tokens\":%d,\"tokens\":[", n_tokens);
  for (int i = 0; i < n_tokens; ++i) std::fprintf(f, i ? ",%d" : "%d", tok[i]);
  std::fprintf(f, "],\"trigger_token\":%d,\"trigger_pos\":%d,\"ops\":[", trigger_tok, trigger_pos);
  for (size_t i = 0; i < ops.size(); ++i)
    std::fprintf(f, "%s[\"%s\",%d,%d,%d]", i ? "," : "", ops[i].kind.c_str(), ops[i].p0, ops[i].p1,
                 ops[i].arg);
  std::fputs("],\"forward_rope\":[", f);
  for (size_t i = 0; i < cap.forward_rope.size(); ++i) {
    if (i) std::fputc(',', f);
    print_rope(f, cap.forward_rope[i]);
  }
  std::fputs("],\"shift_rope\":[", f);
  for (size_t i = 0; i < cap.shift_rope.size(); ++i) {
    if (i) std::fputc(',', f);
    print_rope(f, cap.shift_rope[i]);
  }
  std::fputs("],\"raw_k\":{", f);
  bool first = true;
  for (const auto& [phase, layers] : cap.raw_k) {
    std::fprintf(f, "%s\"%s\":[", first ? "" : ",", phase.c_str());
    first = false;
    for (const auto& [il, v] : layers) {
      if (il) std::fputc(',', f);
      print_floats(f, v.data(), v.size());
    }
    std::fputc(']', f);
  }
  std::fputs("},\"pre\":", f);
  print_snapshot(f, pre);
  std::fputs(",\"post\":", f);
  print_snapshot(f, post);
  std::fputs("}\n", f);
  std::fclose(f);

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
