#!/usr/bin/python3
"""Runs the `posenc bench` cases and the same computations in PyTorch eager, in one run, on the
same threads, and prints posenc / PyTorch speed ratios.

PyTorch does each case the way the public implementations do it in eager mode:
  RoPE:       q * cos + rotate_half(q) * sin (half layout, Hugging Face) or the pairwise
              (x0 cos - x1 sin, x1 cos + x0 sin) form on a (.., D/2, 2) view (interleaved), for
              q and k; cos/sin tables are built outside the timed region (favouring PyTorch).
  attention:  K/V repeated per query head (HF repeat_kv), Q K^T * scale + bias + causal mask,
              softmax, P V; ALiBi and T5 biases materialised as (H, T, S) tensors.
  sinusoidal: the paper's table, angle = pos * omega, sin into even channels, cos into odd.
  backward:   the attention forward above with q, k, v requiring grad, then backward(dO)
              through torch.autograd; compared with posenc's forward + backward cases of the
              same shape from the same run (attention/... + attention_backward/...).

Usage: bench/compare_torch.py [--posenc build/release/posenc] [--threads 2] [--quick]
       [--filter NAME] [--json OUT.json]
Needs Debian's python3-torch (scripts/install-bench-deps). Reports which BLAS kernel ran.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch


def blas_info():
    try:
        lib = ctypes.CDLL("libblas.so.3")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return "OpenBLAS %s (%s)" % (lib.openblas_get_corename().decode(),
                                     lib.openblas_get_config().decode())
    except (OSError, AttributeError):
        return "not OpenBLAS (reference libblas or MKL)"


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


def rope_tables(T, D, theta=10000.0):
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    pos = torch.arange(T, dtype=torch.float32)
    ang = torch.outer(pos, inv_freq)  # (T, D/2)
    return ang.cos(), ang.sin()


def rope_case(T, H, D, layout):
    q = torch.randn(T, H, D)
    k = torch.randn(T, H, D)
    c, s = rope_tables(T, D)
    if layout == "half":
        cos = torch.cat((c, c), -1)[:, None, :]
        sin = torch.cat((s, s), -1)[:, None, :]

        def run():
            q2 = q * cos + rotate_half(q) * sin
            k2 = k * cos + rotate_half(k) * sin
            return q2, k2
    else:
        cos = c[:, None, :]
        sin = s[:, None, :]

        def rot(x):
            x2 = x.view(T, H, D // 2, 2)
            a, b = x2[..., 0], x2[..., 1]
            return torch.stack((a * cos - b * sin, b * cos + a * sin), -1).view(T, H, D)

        def run():
            return rot(q), rot(k)
    return run


def alibi_slopes(n):
    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    p = 2 ** math.floor(math.log2(n))
    return pow2(p) + pow2(2 * p)[0::2][: n - p]


def t5_bucket(rel, num_buckets=32, max_distance=128):
    # causal (unidirectional) T5 buckets, as HF T5Attention._relative_position_bucket
    n = -torch.clamp(rel, max=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact) /
                         math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return torch.where(is_small, n, large)


def attention_case(T, S, Hq, Hkv, D, scheme, backward=False):
    q = torch.randn(1, Hq, T, D, requires_grad=backward)
    k = torch.randn(1, Hkv, S, D, requires_grad=backward)
    v = torch.randn(1, Hkv, S, D, requires_grad=backward)
    dout = torch.randn(1, Hq, T, D)
    scale = 1.0 / math.sqrt(D)
    i = torch.arange(S - T, S)[:, None]
    j = torch.arange(S)[None, :]
    mask = torch.zeros(T, S).masked_fill(j > i, float("-inf"))
    bias = None
    if scheme == "alibi":
        slopes = torch.tensor(alibi_slopes(Hq))[:, None, None]
        bias = -slopes * (i - j).clamp(min=0).float()[None]
    elif scheme == "t5":
        table = torch.randn(32, Hq)
        bias = table[t5_bucket(j - i)].permute(2, 0, 1)
    cos = sin = None
    if scheme == "rope":
        c, s = rope_tables(S, D)
        cos = torch.cat((c, c), -1)
        sin = torch.cat((s, s), -1)
    rep = Hq // Hkv

    def run():
        qq, kk = q, k
        if cos is not None:
            qq = q * cos[S - T:] + rotate_half(q) * sin[S - T:]
            kk = k * cos + rotate_half(k) * sin
        kr = kk.repeat_interleave(rep, dim=1)
        vr = v.repeat_interleave(rep, dim=1)
        sc = torch.matmul(qq, kr.transpose(-1, -2)) * scale
        if bias is not None:
            sc = sc + bias
        sc = sc + mask
        p = torch.softmax(sc, dim=-1)
        return torch.matmul(p, vr)

    def run_backward():
        q.grad = k.grad = v.grad = None
        run().backward(dout)
        return q.grad
    return run_backward if backward else run


def sinusoidal_case(N, d):
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pos = torch.arange(N, dtype=torch.float64)

    def run():
        ang = torch.outer(pos, omega)
        t = torch.empty(N, d, dtype=torch.float32)
        t[:, 0::2] = ang.sin()
        t[:, 1::2] = ang.cos()
        return t
    return run


def torch_case(name, quick):
    """Maps a posenc bench case name to the PyTorch computation of the same shape."""
    parts = dict(p.split("=", 1) for p in name.split("/")[1:] if "=" in p)
    kind = name.split("/")[0]
    g = lambda key: int(parts[key])
    if kind == "rope":
        return rope_case(g("T"), g("H"), g("D"), parts["layout"])
    if kind in ("attention", "attention_backward"):
        return attention_case(g("T"), g("S"), g("Hq"), g("Hkv"), g("D"), parts["scheme"],
                              kind == "attention_backward")
    if kind == "sinusoidal_table":
        return sinusoidal_case(g("N"), g("d"))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--posenc", default="build/release/posenc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--filter", action="append", default=[])
    ap.add_argument("--json", help="write the combined results here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cmd = [a.posenc, "bench", "--format", "json", "--threads", str(a.threads)]
    if a.quick:
        cmd.append("--quick")
    for f in a.filter:
        cmd += ["--filter", f]
    print("running:", " ".join(cmd), file=sys.stderr)
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    m = res["machine"]
    print("PyTorch %s, %d threads, BLAS: %s" % (torch.__version__, torch.get_num_threads(),
                                                  blas_info()))
    print("posenc machine: %s, copy %.1f GB/s, FMA peak %.1f GFLOP/s" %
          (m["simd"], m["bandwidth_gbps"], m["peak_gflops"]))
    print("%-58s %12s %12s %8s" % ("case", "posenc ms", "torch ms", "speedup"))
    out = []
    by_name = {c["name"]: c for c in res["cases"]}
    for c in res["cases"]:
        fn = torch_case(c["name"], a.quick)
        if fn is None or c.get("error") or c["seconds_min"] is None:
            continue
        posenc_s = c["seconds_min"]
        name = c["name"]
        if name.startswith("attention_backward/"):
            # torch times forward + backward: add posenc's forward case of the same shape.
            fwd = by_name.get(name.replace("attention_backward/", "attention/", 1))
            if fwd is None or fwd.get("error") or fwd["seconds_min"] is None:
                print("skipping %s: its forward case did not run" % name, file=sys.stderr)
                continue
            posenc_s += fwd["seconds_min"]
            name += " (forward + backward)"
        tmin, tmed = timeit(fn)
        ratio = tmin / posenc_s
        print("%-58s %12.3f %12.3f %7.1fx" % (name, posenc_s * 1e3, tmin * 1e3, ratio))
        out.append({"name": name, "posenc_seconds_min": posenc_s,
                    "torch_seconds_min": tmin, "torch_seconds_median": tmed,
                    "speedup": ratio})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": m, "torch": torch.__version__, "blas": blas_info(),
                       "threads": a.threads, "cases": out}, f, indent=2)


if __name__ == "__main__":
    main()
