#!/usr/bin/env python3
"""tests/golden/fla/forgetting_attn.json: flash-linear-attention's naive_forgetting_attn (Forgetting
Attention's reference, fla/ops/forgetting_attn/naive.py) run unchanged on the CPU over every case
of its own test file (tests/ops/test_forgetting_attn.py: test_parallel, test_parallel_varlen and
test_parallel_swa, 11 cases), with the inputs those tests draw (torch.manual_seed(42), the same
calls in the same order, float16), forward and backward.

  scripts/golden/fla_forgetting.py --fla DIR --commit SHA > tests/golden/fla/forgetting_attn.json

DIR holds fla's package `fla/` at SHA; only fla/ops/forgetting_attn/naive.py is loaded (by path:
the package's __init__ imports Triton). The one shim: einops (scripts/golden/shims/einops;
Debian has no einops). The naive form computes in float32 (it calls .float()); its gradients of
the float16 leaves are float16.

Stored per case: the inputs' fingerprint (sum and sum of squares of each, math.fsum, to prove a
reader regenerated the same draws) and, at 400 sampled entries of o, dq, dk, dv and dg, the
reference's values; tests/python/test_golden_fla_forgetting.py regenerates the inputs and holds
posenc's values against these.
"""
import argparse
import importlib.util
import json
import math
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "shims"))

ap = argparse.ArgumentParser()
ap.add_argument("--fla", required=True)
ap.add_argument("--commit", required=True)
args = ap.parse_args()
spec = importlib.util.spec_from_file_location(
    "fla_naive", os.path.join(args.fla, "fla/ops/forgetting_attn/naive.py"))
naive = importlib.util.module_from_spec(spec)
spec.loader.exec_module(naive)

# The cases of tests/ops/test_forgetting_attn.py at the commit.
PARALLEL = [(1, 63, 1, 1, 64, 1.0), (3, 111, 2, 2, 100, 1.0), (3, 1024, 2, 8, 60, 0.1),
            (3, 1024, 2, 8, 128, 0.1), (4, 2048, 2, 8, 64, 0.1)]
VARLEN = [(2, 2, 64, [0, 15]), (2, 8, 64, [0, 256, 500, 1000]),
          (2, 2, 100, [0, 15, 100, 300, 1200, 2000])]
SWA = [(1, 63, 1, 1, 64, 16), (3, 111, 2, 2, 100, 32), (3, 1024, 2, 8, 128, 64)]


def draw(B, T, H, HQ, D, varlen=False):
    """The test's draws, in its order (test_parallel_varlen draws g with torch.rand)."""
    torch.manual_seed(42)
    dt = torch.float16
    q = torch.randn((B, T, HQ, D), dtype=dt).requires_grad_(True)
    k = torch.randn((B, T, H, D), dtype=dt).requires_grad_(True)
    v = torch.randn((B, T, H, D), dtype=dt).requires_grad_(True)
    g0 = torch.rand((B, T, HQ), dtype=dt) if varlen else torch.randn((B, T, HQ), dtype=dt)
    g = g0.uniform_(-0.1, -0.01).requires_grad_(True)
    do = torch.randn((B, T, HQ, D), dtype=dt)
    return q, k, v, g, do


def fingerprint(x):
    """Sum and sum of squares, correctly rounded (math.fsum; a float16 value's square is exact
    in float64): the same numbers for the same values, whatever the summation order."""
    x = x.detach().double().reshape(-1).tolist()
    return [math.fsum(x), math.fsum(e * e for e in x)]


def samples(x, n, gen):
    flat = x.detach().reshape(-1)
    idx = torch.randint(0, flat.numel(), (n,), generator=gen)
    return {"index": [int(i) for i in idx], "value": [float(flat[i]) for i in idx],
            "max_abs": float(flat.abs().max())}


def record(name, params, q, k, v, g, do, run):
    o = run()
    o.backward(do)
    gen = torch.Generator().manual_seed(7)
    return {"test": name, **params,
            "fingerprint": {n: fingerprint(t) for n, t in
                            (("q", q), ("k", k), ("v", v), ("g", g), ("do", do))},
            "o": samples(o, 400, gen), "dq": samples(q.grad, 400, gen),
            "dk": samples(k.grad, 400, gen), "dv": samples(v.grad, 400, gen),
            "dg": samples(g.grad, 400, gen), "o_dtype": str(o.dtype), "grad_dtype": str(q.grad.dtype)}


cases = []
for B, T, H, HQ, D, scale in PARALLEL:
    q, k, v, g, do = draw(B, T, H, HQ, D)
    cases.append(record("test_parallel", dict(B=B, T=T, H=H, HQ=HQ, D=D, scale=scale), q, k, v, g,
                        do, lambda: naive.naive_forgetting_attn(q, k, v, g, scale)))
for H, HQ, D, cu in VARLEN:
    q, k, v, g, do = draw(1, cu[-1], H, HQ, D, varlen=True)

    def run():
        ref = q.new_empty(1, cu[-1], HQ, D)
        for bos, eos in zip(cu[:-1], cu[1:]):
            ref[:, bos:eos] = naive.naive_forgetting_attn(q=q[:, bos:eos], k=k[:, bos:eos],
                                                          v=v[:, bos:eos], g=g[:, bos:eos])
        return ref
    cases.append(record("test_parallel_varlen", dict(B=1, T=cu[-1], H=H, HQ=HQ, D=D, cu_seqlens=cu),
                        q, k, v, g, do, run))
for B, T, H, HQ, D, W in SWA:
    q, k, v, g, do = draw(B, T, H, HQ, D)
    cases.append(record("test_parallel_swa", dict(B=B, T=T, H=H, HQ=HQ, D=D, window=W), q, k, v, g,
                        do, lambda: naive.naive_forgetting_attn(q, k, v, g, window_size=W)))

json.dump({"source": "fla-org/flash-linear-attention fla/ops/forgetting_attn/naive.py "
                     "(naive_forgetting_attn), cases of tests/ops/test_forgetting_attn.py",
           "commit": args.commit, "torch": torch.__version__, "cases": cases}, sys.stdout)
