#!/usr/bin/python3
"""Speed of the Python package against the C++ kernels and against PyTorch eager, in one run.

  rope_call_overhead  posenc.apply_rope(x, inplace=True) on q and k, (1, T, 32, 128) float32,
                      against `posenc bench`'s rope/T=<T>/H=32/D=128/layout=half case (the same
                      rotation of q and k in place, fused, from C++), run first in this process's
                      machine state. Goal: Python / C++ <= 1.2.
  rope_torch          posenc.torch.RotaryEmbedding forward + backward on q, k (1, T, 32, 128)
                      against Hugging Face's eager apply_rotary_pos_emb (q * cos + rotate_half(q)
                      * sin on (1, 32, T, 128), cos/sin built outside the timed region) forward +
                      backward through torch.autograd. Goal: >= 10x.
  attention_overhead  posenc.torch.attention forward + backward, causal, T = S = 2048, Hq = 32,
                      Hkv = 8, D = 128, float32, against `posenc bench`'s attention/... +
                      attention_backward/... cases of that shape (scheme=none), run first.
                      Python / C++ near 1 means the binding adds nothing measurable.
  attention_torch     posenc.torch.attention forward + backward, causal, T = S = 2048, Hq = 32,
                      Hkv = 8, D = 128, float32, against PyTorch eager autograd attention (HF
                      repeat_kv, Q K^T * scale + mask, softmax, P V). Goal: >= 3x.

Times are the minimum of at least 5 repetitions after a warm-up (median printed too); all
use --threads threads (posenc.set_num_threads and torch.set_num_threads).

Usage: PYTHONPATH=build/release/python /usr/bin/python3 bench/bench_python.py
           [--posenc build/release/posenc] [--threads 2] [--quick] [--only NAME]
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

import posenc
import posenc.torch as pt


def timeit(fn, reps=5, min_seconds=0.5):
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < reps or (time.perf_counter() - start < min_seconds and len(times) < 1000):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def report(name, a_name, a, b_name, b, goal):
    ratio = b[0] / a[0]
    print(f"{name:18s} {a_name} {a[0] * 1e3:9.3f} ms (median {a[1] * 1e3:.3f})  "
          f"{b_name} {b[0] * 1e3:9.3f} ms (median {b[1] * 1e3:.3f})  ratio {ratio:6.2f}  {goal}")
    return {"name": name, a_name: a[0], b_name: b[0], "ratio": ratio}


def rope_call_overhead(a, T):
    case = f"rope/T={T}/H=32/D=128/layout=half"
    cmd = [a.posenc, "bench", "--format", "json", "--threads", str(a.threads), "--filter", case]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    cpp = [c for c in res["cases"] if c["name"] == case]
    if not cpp or cpp[0].get("error") or cpp[0]["seconds_min"] is None:
        sys.exit(f"posenc bench did not run {case}: {res}")
    cpp_t = (cpp[0]["seconds_min"], cpp[0].get("seconds_median", cpp[0]["seconds_min"]))
    cfg = posenc.RopeConfig(head_dim=128, theta=10000.0)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, T, 32, 128), dtype=np.float32)
    k = rng.standard_normal((1, T, 32, 128), dtype=np.float32)

    def run():
        posenc.apply_rope(q, cfg=cfg, inplace=True)
        posenc.apply_rope(k, cfg=cfg, inplace=True)

    py_t = timeit(run)
    return report("rope_call_overhead", "cpp", cpp_t, "python", py_t,
                  "(python / C++, goal <= 1.2)")


def rope_torch(a, T):
    cfg = posenc.RopeConfig(head_dim=128, theta=10000.0)
    rot = pt.RotaryEmbedding(cfg)
    q = torch.randn(1, T, 32, 128, requires_grad=True)
    k = torch.randn(1, T, 32, 128, requires_grad=True)
    gq, gk = torch.randn(1, T, 32, 128), torch.randn(1, T, 32, 128)

    def run_posenc():
        q.grad = k.grad = None
        q2, k2 = rot(q, k)
        torch.autograd.backward((q2, k2), (gq, gk))

    inv = 1.0 / (10000.0 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))
    ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]  # (1, 1, T, D): HF unsqueeze_dim=1
    qh = torch.randn(1, 32, T, 128, requires_grad=True)
    kh = torch.randn(1, 32, T, 128, requires_grad=True)
    gqh, gkh = gq.transpose(1, 2).contiguous(), gk.transpose(1, 2).contiguous()

    def run_hf():
        qh.grad = kh.grad = None
        q2 = (qh * cos) + (rotate_half(qh) * sin)
        k2 = (kh * cos) + (rotate_half(kh) * sin)
        torch.autograd.backward((q2, k2), (gqh, gkh))

    return report("rope_torch", "posenc", timeit(run_posenc), "torch", timeit(run_hf),
                  "(speed-up, goal >= 10)")


def attention_overhead(a):
    shape = "T=2048/S=2048/Hq=32/Hkv=8/D=128/scheme=none"
    names = [f"attention/{shape}", f"attention_backward/{shape}"]
    cmd = [a.posenc, "bench", "--format", "json", "--threads", str(a.threads)]
    for n in names:
        cmd += ["--filter", n]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    by = {c["name"]: c for c in res["cases"]}
    if any(n not in by or by[n].get("error") or by[n]["seconds_min"] is None for n in names):
        sys.exit(f"posenc bench did not run {names}: {res}")
    cpp = sum(by[n]["seconds_min"] for n in names)
    cpp_med = sum(by[n].get("seconds_median", by[n]["seconds_min"]) for n in names)
    q = torch.randn(2048, 32, 128, requires_grad=True)
    k = torch.randn(2048, 8, 128, requires_grad=True)
    v = torch.randn(2048, 8, 128, requires_grad=True)
    dout = torch.randn(2048, 32, 128)

    def run():
        q.grad = k.grad = v.grad = None
        pt.attention(q, k, v, causal=True).backward(dout)

    return report("attention_overhead", "cpp", (cpp, cpp_med), "python", timeit(run),
                  "(python / C++, forward + backward)")


def attention_torch(a, T, Hq, Hkv, D):
    S = T
    q = torch.randn(T, Hq, D, requires_grad=True)
    k = torch.randn(S, Hkv, D, requires_grad=True)
    v = torch.randn(S, Hkv, D, requires_grad=True)
    dout = torch.randn(T, Hq, D)

    def run_posenc():
        q.grad = k.grad = v.grad = None
        pt.attention(q, k, v, causal=True).backward(dout)

    qt = torch.randn(1, Hq, T, D, requires_grad=True)
    kt = torch.randn(1, Hkv, S, D, requires_grad=True)
    vt = torch.randn(1, Hkv, S, D, requires_grad=True)
    doutt = dout.transpose(0, 1)[None].contiguous()
    i = torch.arange(S - T, S)[:, None]
    j = torch.arange(S)[None, :]
    mask = torch.zeros(T, S).masked_fill(j > i, float("-inf"))
    rep = Hq // Hkv

    def run_torch():
        qt.grad = kt.grad = vt.grad = None
        kr = kt.repeat_interleave(rep, dim=1)
        vr = vt.repeat_interleave(rep, dim=1)
        sc = torch.matmul(qt, kr.transpose(-1, -2)) * (1.0 / math.sqrt(D)) + mask
        torch.matmul(torch.softmax(sc, dim=-1), vr).backward(doutt)

    name = f"attention_torch T={T} Hq={Hq} Hkv={Hkv} D={D}"
    return report(name, "posenc", timeit(run_posenc), "torch", timeit(run_torch),
                  "(speed-up, goal >= 3)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--posenc", default="build/release/posenc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    ap.add_argument("--only", action="append", default=[],
                    help="rope_call_overhead, rope_torch, attention_overhead or attention_torch "
                         "(repeatable)")
    a = ap.parse_args()
    posenc.set_num_threads(a.threads)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"posenc {posenc.__file__}, {posenc.num_threads()} threads; PyTorch {torch.__version__},"
          f" {torch.get_num_threads()} threads")
    T = 256 if a.quick else 4096
    run = lambda n: not a.only or n in a.only  # noqa: E731
    if run("rope_call_overhead"):
        rope_call_overhead(a, 4096)  # a posenc bench shape (8 ms per call), also with --quick
    if run("rope_torch"):
        rope_torch(a, T)
    if run("attention_overhead") and not a.quick:
        attention_overhead(a)
    if run("attention_torch"):
        if a.quick:
            attention_torch(a, 256, 8, 2, 64)
        else:
            attention_torch(a, 2048, 32, 8, 128)


if __name__ == "__main__":
    main()
