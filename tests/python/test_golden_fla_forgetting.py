"""posenc's Forgetting Attention (fox=) against flash-linear-attention's naive_forgetting_attn run
unchanged (tests/golden/fla/forgetting_attn.json, scripts/golden/fla_forgetting.py at the commit
it names), over every case of fla's own test file: B x T x heads x D, GQA, scales, packed
sequences (cu_seqlens) and sliding windows, forward and backward (dq, dk, dv and the log gates'
gradient dg = posenc's dfox).

The inputs are regenerated here with the test's draws (torch.manual_seed(42), float16) and must
match the golden's fingerprint exactly. posenc computes in float64 on those float16 values; the
reference in float32 (u = 2^-24), so the bounds are the reference's rounding:
- o: per sampled entry of row i, with p_j the row's probabilities and e_j the error of score j
  (the product of D float32 terms, (D + 2) u scale sum |q_e k_e|; the float32 running sum of the
  gates, each entry rounded once from a wider accumulator, and their difference, 3 u (|c_i| +
  |c_j|)): max |v| (2 sum_j p_j e_j + 2 (n + 4) u) over the n visible keys; plus the float16
  rounding 2^-11 |o| + 2^-25 where the reference stores o in float16 (the packed test's rows);
- dq, dk, dv, dg: the reference's float16 rounding of its float32 gradient, 2^-11 |g| + 2^-25,
  plus 8 (T + D) u max |g| for its float32 backward (four products and sums of at most T + D
  terms each, every one bounded by the array's largest entry).
"""

import json
import math
import pathlib

import numpy as np
import pytest

import posenc

torch = pytest.importorskip("torch")

GOLD = json.loads((pathlib.Path(__file__).resolve().parents[1] / "golden" / "fla" /
                   "forgetting_attn.json").read_text())
U = 2.0 ** -24


def draw(c):
    torch.manual_seed(42)
    dt = torch.float16
    B, T, H, HQ, D = c["B"], c["T"], c["H"], c["HQ"], c["D"]
    q = torch.randn((B, T, HQ, D), dtype=dt)
    k = torch.randn((B, T, H, D), dtype=dt)
    v = torch.randn((B, T, H, D), dtype=dt)
    varlen = c["test"] == "test_parallel_varlen"
    g0 = torch.rand((B, T, HQ), dtype=dt) if varlen else torch.randn((B, T, HQ), dtype=dt)
    g = g0.uniform_(-0.1, -0.01)
    do = torch.randn((B, T, HQ, D), dtype=dt)
    return [x.double().numpy() for x in (q, k, v, g, do)]


def run_posenc(c, q, k, v, g, do):
    kw = dict(causal=True, scale=c.get("scale", c["D"] ** -0.5))
    if "window" in c:
        kw["window"] = c["window"]
    if "cu_seqlens" in c:  # one packed row: unbatched, the gates (T, HQ)
        q, k, v, g, do = q[0], k[0], v[0], g[0], do[0]
        kw["cu_seqlens"] = np.array(c["cu_seqlens"], dtype=np.int64)
    out, lse = posenc.attention(q, k, v, fox=g, return_lse=True, **kw)
    gr = posenc.attention_backward(q, k, v, out, lse, do, fox=g, **kw)
    r = {"o": out, "dq": gr["dq"], "dk": gr["dk"], "dv": gr["dv"], "dg": gr["dfox"]}
    if "cu_seqlens" in c:
        r = {n: x[None] for n, x in r.items()}
    return r


def o_bound(c, q, k, v, g, index):
    """The reference's float32 rounding bound for entry `index` of o (B, T, HQ, D)."""
    B, T, H, HQ, D = c["B"], c["T"], c["H"], c["HQ"], c["D"]
    b, rest = divmod(index, T * HQ * D)
    i, rest = divmod(rest, HQ * D)
    h = rest // D
    lo = 0
    for s, e in zip(c.get("cu_seqlens", [0, T])[:-1], c.get("cu_seqlens", [0, T])[1:]):
        if s <= i < e:
            lo = s
    lo = max(lo, i - c["window"] + 1) if "window" in c else lo
    scale = c.get("scale", D ** -0.5)
    gh = g[b, :, h]
    # The reference sums the gates from token 0 (from the document's first within a packed row).
    cs = np.cumsum(gh[lo:i + 1]) if "cu_seqlens" in c else np.cumsum(gh)[lo:i + 1]
    kh = k[b, lo:i + 1, h // (HQ // H)]
    prod = kh * q[b, i, h]
    s = scale * prod.sum(1) + cs[-1] - cs
    p = np.exp(s - s.max())
    p /= p.sum()
    e = scale * (D + 2) * U * np.abs(prod).sum(1) + 3 * U * (abs(cs[-1]) + np.abs(cs))
    vmax = np.abs(v[b, lo:i + 1, h // (HQ // H)]).max()
    return vmax * (2 * (p * e).sum() + 2 * (i + 1 - lo + 4) * U)


@pytest.mark.parametrize("c", GOLD["cases"], ids=lambda c: f"{c['test']}-B{c['B']}-T{c['T']}-"
                         f"H{c['H']}-HQ{c['HQ']}-D{c['D']}")
def test_matches_fla_naive(c):
    assert GOLD["commit"] == "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89"
    q, k, v, g, do = draw(c)
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("do", do)):
        flat = x.reshape(-1).tolist()
        assert [math.fsum(flat), math.fsum(e * e for e in flat)] == c["fingerprint"][name], name
    got = run_posenc(c, q, k, v, g, do)
    worst = {}
    for name in ("o", "dq", "dk", "dv", "dg"):
        ref = c[name]
        flat = got[name].reshape(-1)
        for idx, want in zip(ref["index"], ref["value"]):
            if name == "o":  # float16 when the reference writes its rows into q.new_empty
                tol = o_bound(c, q, k, v, g, idx)
                if c["o_dtype"] == "torch.float16":
                    tol += 2.0 ** -11 * abs(want) + 2.0 ** -25
            else:
                tol = (2.0 ** -11 * abs(want) + 2.0 ** -25 +
                       8 * (c["T"] + c["D"]) * U * ref["max_abs"])
            err = abs(flat[idx] - want)
            worst[name] = max(worst.get(name, 0.0), err / tol)
            assert err <= tol, f"{name}[{idx}]: posenc {flat[idx]!r}, fla {want!r}, tol {tol:.3g}"
    assert all(w <= 1 for w in worst.values()), worst
