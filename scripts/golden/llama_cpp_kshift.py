#!/usr/bin/env python3
"""Runs llama.cpp's K-shift on tiny random-weight GGUF models and writes the keys it shifted.

    scripts/golden/llama_cpp_kshift.py --llama-cpp /path/to/llama.cpp [--commit SHA]
        [--build /tmp/posenc-llama-cpp-build] [--out tests/golden/llama_cpp_kshift] [-j 2]

Not run by CI, and nothing of llama.cpp enters posenc's build: the script

  1. configures and builds llama.cpp's CPU backend (target `llama`, shared libraries) from the
     checkout into --build, outside the project: `cmake -DCMAKE_BUILD_TYPE=Release
     -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
     -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
     -DBUILD_SHARED_LIBS=ON` (incremental when --build already holds a build; 10+ minutes on two
     cores the first time);
  2. compiles scripts/golden/llama_cpp_kshift_driver.cpp against its llama.h (g++ -O2);
  3. writes the models with the checkout's gguf-py (GGUFWriter, run unchanged) into --build:
     random float32 weights (numpy, fixed seeds), two layers, GQA 4 query / 2 key-value heads of
     head dim 32, vocabulary "none" with 64 dummy tokens (the driver feeds token ids, so no
     tokenizer is needed), for five RoPE set-ups (CASES below): llama (NORM pairs) unscaled,
     linear, YaRN and Llama 3 rope_freqs (factors computed with the converter's own formula,
     conversion/llama.py, in torch float32), and qwen2 (NEOX pairs, q/k/v biases);
  4. runs the driver on each model for each edit of RUNS (decode 16 tokens, read the F32 key
     cache with llama_state_seq_get_data, llama_memory_seq_rm / seq_add / seq_div, decode one
     token, which runs the K-shift, read the cache again), and checks what it recorded: the
     cells' positions before and after are the edit's, the K-shift's per-cell changes are
     recorded as llama.cpp passed them to ggml.

Output (--out, default tests/golden/llama_cpp_kshift):
  kshift.json      source (repository, commit, build flags, compiler, CPU FMA), and per case:
                   the GGUF's RoPE keys, the model's shape, the forward RoPE parameters of the
                   keys as ggml received them (op_params: n_dims, mode, n_ctx_orig, freq_base,
                   freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, freq factors) and
                   per start position the prefill: positions, the keys before RoPE (the K
                   projection, plus its bias) and the cached keys; per run the edits, the
                   K-shift's parameters and per-cell changes, the cells after (positions, keys,
                   and which prefill cell each one was), and the trigger token's keys. Floats are
                   float32 values written as the shortest decimal that reads back as the
                   same float32, directly or through a double.
  <case>.gguf      each model's metadata (every key the model file has; no tensors but
                   rope_freqs), for posenc's GGUF reader.
The output is deterministic for a given checkout, compiler and CPU (ggml's rope is compiled
with -march=native; GCC contracts its products into FMAs on x86-64 with FMA).
"""
import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DRIVER = HERE / "llama_cpp_kshift_driver.cpp"

CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_OPENMP=OFF", "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF", "-DBUILD_SHARED_LIBS=ON",
]

N_TOKENS = 16
N_VOCAB = 64

# name -> model: arch, n_embd, heads, kv heads, head dim, rope keys ({arch}.rope.*), extras
CASES = {
    "llama_norm": dict(arch="llama", n_embd=64, n_head=4, n_head_kv=2, head_dim=32,
                       rope=dict(freq_base=10000.0)),
    "llama_linear": dict(arch="llama", n_embd=64, n_head=4, n_head_kv=2, head_dim=32,
                         rope=dict(freq_base=500000.0, scaling="linear", factor=8.0)),
    "llama_yarn": dict(arch="llama", n_embd=64, n_head=4, n_head_kv=2, head_dim=32,
                       rope=dict(freq_base=10000.0, scaling="yarn", factor=4.0, orig_ctx=64)),
    "llama3_freqs": dict(arch="llama", n_embd=64, n_head=4, n_head_kv=2, head_dim=32,
                         rope=dict(freq_base=500000.0, llama3=dict(factor=8.0, low=1.0, high=4.0,
                                                                  orig=8192))),
    "qwen2_neox": dict(arch="qwen2", n_embd=128, n_head=4, n_head_kv=2, head_dim=32,
                       rope=dict(freq_base=1000000.0), bias=True),
}

# name -> (start position of the prefill, edits); the driver's ops, applied in order.
RUNS = {
    # llama.cpp's context shift (n_keep 4, n_discard 8): seq_rm then seq_add by -n_discard.
    "context_shift": (0, [("rm", 4, 12), ("add", 12, -1, -8)]),
    # a forward move, the cells below 6 untouched.
    "add_forward": (0, [("add", 6, -1, 1000)]),
    # Self-Extend's grouping: positions [6, 16) become p / 3.
    "divide": (0, [("div", 6, -1, 3)]),
    # far positions moved far back: angles of 10^5 radians and more.
    "far_back": (200000, [("add", 0, -1, -150001)]),
}


def short32(x):
    """The shortest decimal that names float32 x both as a float32 and through a double
    (strtod, then a cast to float: how a JSON reader that parses doubles gets it back)."""
    f = np.float32(x)
    for s in (np.format_float_positional(f, unique=True, trim="-") if abs(f) >= 1e-4 or f == 0
              else np.format_float_scientific(f, unique=True, trim="-"), repr(float(f))):
        if np.float32(float(s)) == f and float(f) == float(np.float32(float(s))):
            return s
    raise AssertionError(f"{x!r} does not round-trip")


def same32(a, b):
    """a (read back) equals b with every float compared as float32."""
    if isinstance(b, float):
        return isinstance(a, (int, float)) and np.float32(a) == np.float32(b)
    if isinstance(b, dict):
        return a.keys() == b.keys() and all(same32(a[k], b[k]) for k in b)
    if isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same32(x, y) for x, y in zip(a, b))
    return a == b


def dumps(v):
    """JSON with every float written by short32 (all floats here are float32 values)."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, float):
        return short32(v)
    if isinstance(v, (int, str)):
        return json.dumps(v)
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + dumps(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dumps(x) for x in v) + "]"
    raise TypeError(type(v))


def from_bits(u):
    return float(np.array([u], dtype=np.uint32).view(np.float32)[0])


def floats(bits_list):
    return np.array(bits_list, dtype=np.uint32).view(np.float32)


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def build_llama(llama, build, jobs):
    run(["cmake", "-S", str(llama), "-B", str(build)] + CMAKE_FLAGS, stdout=subprocess.DEVNULL)
    run(["nice", "cmake", "--build", str(build), "-j", str(jobs), "--target", "llama"],
        stdout=subprocess.DEVNULL)
    lib = build / "bin"
    if not (lib / "libllama.so").exists():
        sys.exit(f"no libllama.so under {lib} after the build")
    exe = build / "posenc_kshift_driver"
    run(["g++", "-O2", "-std=c++17", str(DRIVER), "-o", str(exe),
         "-I", str(llama / "include"), "-I", str(llama / "ggml" / "include"),
         "-L", str(lib), "-lllama", "-lggml", "-lggml-base", "-Wl,-rpath," + str(lib)])
    return exe


def llama3_factors(base, dim, p):
    """rope_freqs as convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors computes it
    (conversion/llama.py at the recorded commit): the same expressions, torch float32."""
    import math
    import torch
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high, old = p["factor"], p["low"], p["high"], p["orig"]
    low_wl, high_wl = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wl:
            out.append(1)
        elif wavelen > low_wl:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def add_kv(w, gguf, name, c):
    r = c["rope"]
    w.add_name(name)
    w.add_context_length(4096)
    w.add_embedding_length(c["n_embd"])
    w.add_block_count(2)
    w.add_feed_forward_length(64)
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(c["head_dim"])
    w.add_rope_freq_base(r["freq_base"])
    if r.get("scaling") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(r["factor"])
    elif r.get("scaling") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(r["factor"])
        w.add_rope_scaling_orig_ctx_len(r["orig_ctx"])
    w.add_vocab_size(N_VOCAB)
    w.add_tokenizer_model("none")


def write_model(gguf, path, name, c, seed):
    """The model file: every tensor llama.cpp's loader needs for c["arch"], random F32."""
    rng = np.random.default_rng(seed)
    E, H, Hkv, D, F = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], 64

    def t(*shape, scale=None):
        # numpy shape (rows, cols) is ggml ne (cols, rows): weight {in, out} is (out, in) here.
        s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return (rng.standard_normal(shape) * s).astype(np.float32)

    w = gguf.GGUFWriter(str(path), c["arch"])
    add_kv(w, gguf, name, c)
    w.add_tensor("token_embd.weight", t(N_VOCAB, E, scale=1.0))
    w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
    for i in range(2):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * t(E, scale=1.0)).astype(np.float32))
        w.add_tensor(p + "attn_q.weight", t(H * D, E))
        w.add_tensor(p + "attn_k.weight", t(Hkv * D, E))
        w.add_tensor(p + "attn_v.weight", t(Hkv * D, E))
        if c.get("bias"):
            w.add_tensor(p + "attn_q.bias", t(H * D, scale=0.5))
            w.add_tensor(p + "attn_k.bias", t(Hkv * D, scale=0.5))
            w.add_tensor(p + "attn_v.bias", t(Hkv * D, scale=0.5))
        w.add_tensor(p + "attn_output.weight", t(E, H * D))
        w.add_tensor(p + "ffn_norm.weight", np.ones(E, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", t(F, E))
        w.add_tensor(p + "ffn_up.weight", t(F, E))
        w.add_tensor(p + "ffn_down.weight", t(E, F))
    if "llama3" in c["rope"]:
        w.add_tensor("rope_freqs.weight",
                     llama3_factors(c["rope"]["freq_base"], D, c["rope"]["llama3"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_meta(gguf, path, name, c):
    """The same keys, no tensors but rope_freqs (what posenc's GGUF reader reads)."""
    w = gguf.GGUFWriter(str(path), c["arch"])
    add_kv(w, gguf, name, c)
    if "llama3" in c["rope"]:
        w.add_tensor("rope_freqs.weight",
                     llama3_factors(c["rope"]["freq_base"], c["head_dim"], c["rope"]["llama3"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def rope_params(r):
    out = {k: r[k] for k in ("name", "n_dims", "mode", "n_ctx_orig")}
    for k in ("freq_base", "freq_scale", "ext_factor", "attn_factor", "beta_fast", "beta_slow"):
        out[k] = from_bits(r[k])
    out["freq_factors"] = None if r["freq_factors"] is None else [
        float(x) for x in floats(r["freq_factors"])]
    return out


def expected_positions(start, ops):
    """Each prefill cell's position after the edits (None: removed), as llama_kv_cells does it
    (positions are >= 0, so C's integer division is floor division)."""
    pos = list(range(start, start + N_TOKENS))
    for op in ops:
        kind, p0, p1 = op[0], op[1], op[2]
        hi = 2**31 - 1 if p1 < 0 else p1
        for i, p in enumerate(pos):
            if p is None or not (p0 <= p < hi):
                continue
            if kind == "rm":
                pos[i] = None
            elif kind == "add":
                pos[i] = p + op[3] if p + op[3] >= 0 else None
            else:
                pos[i] = p // op[3]
    return pos


def keys(flat_bits, cells, row):
    """(cells, row) float32 from the driver's bit patterns, as nested lists of exact floats."""
    a = floats(flat_bits).reshape(cells, row)
    return [[float(x) for x in r] for r in a]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp checkout")
    ap.add_argument("--commit", help="its commit (needed when the checkout is not a git work tree)")
    ap.add_argument("--build", type=Path,
                    default=Path(tempfile.gettempdir()) / "posenc-llama-cpp-build",
                    help="build folder outside the project (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "llama_cpp_kshift")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    args = ap.parse_args()
    llama = args.llama_cpp.resolve()
    for p in ("include/llama.h", "src/llama-kv-cache.cpp", "gguf-py/gguf"):
        if not (llama / p).exists():
            sys.exit(f"--llama-cpp: {llama} has no {p}; pass a llama.cpp checkout")
    commit = args.commit
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", str(llama), "rev-parse", "HEAD"], check=True,
                                    capture_output=True, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            sys.exit(f"{llama} is not a git work tree: pass --commit SHA (the goldens record it)")
    build = args.build.resolve()
    if ROOT in build.parents or build == ROOT:
        sys.exit("--build must lie outside the project (llama.cpp is not built with posenc)")
    sys.path.insert(0, str(llama / "gguf-py"))
    import gguf

    exe = build_llama(llama, build, args.jobs)
    cxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    cpu_flags = set()
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                cpu_flags = set(line.split(":", 1)[1].split())
                break

    args.out.mkdir(parents=True, exist_ok=True)
    models = build / "posenc_kshift_models"
    models.mkdir(exist_ok=True)
    golden = {
        "source": {
            "repository": "https://github.com/EricNie-Git/llama.cpp-tq3-release (a fork; its "
                          "gguf-py and loader upstream-identical; ggml's CPU rope op, "
                          "build_rope_shift / build_graph_shift, set_input_k_shift, "
                          "llama_kv_cells pos_add / pos_div and llama_context's "
                          "yarn_attn_factor identical to those of another llama.cpp copy, "
                          "kmbandy/llama.cpp of 2026-05)",
            "commit": commit,
            "run": "scripts/golden/llama_cpp_kshift.py with scripts/golden/"
                   "llama_cpp_kshift_driver.cpp (llama.h only; llama.cpp run unchanged)",
            "cmake": CMAKE_FLAGS,
            "compiler": cxx,
            "machine": platform.machine(),
            "cpu_fma": "fma" in cpu_flags,
            "context": "n_ctx 256, n_seq_max 1, type_k = type_v = F32, flash attention off, "
                       "one thread, CPU only",
            "n_tokens": N_TOKENS,
        },
        "cases": [],
    }
    for ci, (name, c) in enumerate(CASES.items()):
        model = models / f"{name}.gguf"
        write_model(gguf, model, name, c, seed=1000 + ci)
        write_meta(gguf, args.out / f"{name}.gguf", name, c)
        D, Hkv = c["head_dim"], c["n_head_kv"]
        row = Hkv * D
        case = {"name": name, "gguf": f"{name}.gguf", "arch": c["arch"], "rope_keys": c["rope"],
                "n_layer": 2, "n_head": c["n_head"], "n_head_kv": Hkv, "head_dim": D,
                "prefill": {}, "runs": []}
        for rname, (start, ops) in RUNS.items():
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "out.json"
                cmd = [str(exe), str(model), f"{N_TOKENS}", str(start), str(out)]
                for op in ops:
                    cmd += [str(x) for x in op]
                run(cmd, stderr=subprocess.DEVNULL)
                d = json.loads(out.read_text())
            assert d["n_head_kv"] == Hkv and d["n_layer"] == 2, d["desc"]
            assert len(d["forward_rope"]) == 2 and len(d["shift_rope"]) == 2
            fwd = [rope_params(r) for r in d["forward_rope"]]
            if "forward_rope" not in case:
                case["forward_rope"] = fwd
                case["rope_type"] = d["rope_type"]
            assert fwd == case["forward_rope"], "forward RoPE parameters differ between runs"
            pre, post = d["pre"], d["post"]
            assert pre["row_bytes"] == 4 * row and post["row_bytes"] == 4 * row
            assert pre["pos"] == list(range(start, start + N_TOKENS)), pre["pos"]
            if str(start) not in case["prefill"]:
                case["prefill"][str(start)] = {
                    "pos": pre["pos"],
                    "raw_k": [keys(l, N_TOKENS, row) for l in d["raw_k"]["prefill"]],
                    "k": [keys(l, N_TOKENS, row) for l in pre["k"]],
                }
            else:
                p = case["prefill"][str(start)]
                assert p["k"] == [keys(l, N_TOKENS, row) for l in pre["k"]]
            # Post cells: in cell order, the prefill cells that remain, the trigger token in the
            # first free cell. The trigger is the only cell at trigger_pos.
            want = expected_positions(start, ops)
            tp = d["trigger_pos"]
            assert post["pos"].count(tp) == 1, (post["pos"], tp)
            t_at = post["pos"].index(tp)
            n_post = len(post["pos"])
            src = [i for i, p in enumerate(want) if p is not None]
            got = [p for j, p in enumerate(post["pos"]) if j != t_at]
            assert got == [want[i] for i in src], (got, want)
            post_k = [keys(l, n_post, row) for l in post["k"]]
            shift = d["shift_rope"]
            deltas = [shift[0]["positions"][i] for i in range(N_TOKENS)]
            assert all(s["positions"] == shift[0]["positions"] for s in shift)
            case["runs"].append({
                "name": rname,
                "start": start,
                "ops": [list(op) + [0] * (4 - len(op)) for op in ops],
                "shift_rope": [rope_params(r) for r in shift],
                # the K-shift's position input for prefill cell i (cells 0 .. N-1; llama.cpp
                # zeroes empty cells)
                "shift_delta": deltas,
                "post": {
                    "from": src,
                    "pos": got,
                    "k": [[l[j] for j in range(n_post) if j != t_at] for l in post_k],
                },
                "trigger": {
                    "pos": tp,
                    "token": d["trigger_token"],
                    "raw_k": [keys(l, 1, row)[0] for l in d["raw_k"]["trigger"]],
                    "k": [l[t_at] for l in post_k],
                },
            })
            print(f"{name} {rname}: {len(src)} cells moved by {sorted(set(deltas))}",
                  file=sys.stderr)
        golden["cases"].append(case)
    path = args.out / "kshift.json"
    text = dumps(golden)
    assert same32(json.loads(text), golden)
    path.write_text(text + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes) and {len(CASES)} GGUF files")


if __name__ == "__main__":
    main()
