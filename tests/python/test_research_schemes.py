"""Kerple, FIRE, xPos, CoPE and Llama 4's query temperature through posenc.attention, against
the NumPy references of reference.py (written from the papers), with gradients checked by
central differences in float64."""

import subprocess

import numpy as np
import pytest
import reference as ref
from test_attention import draw, score_max, tolerance

import posenc

T, S, HQ, HKV, D = 6, 9, 4, 2, 16
M = 3  # FIRE's hidden units in these tests


def params(rng, scheme, dtype=np.float64):
    """posenc.attention keyword arguments for one scheme, with random parameters."""
    if scheme == "kerple_log":
        return dict(kerple=rng.standard_normal((2, HQ)).astype(dtype))
    if scheme == "kerple_power":
        return dict(kerple=rng.standard_normal((2, HQ)).astype(dtype), kerple_kernel="power")
    if scheme == "fire":
        w = rng.standard_normal((HQ, 3 * M + 3))
        w[:, 3 * M + 2] = rng.uniform(2.0, 6.0, HQ)  # softplus(a_L) ~ 2..6: queries on both sides
        return dict(fire=w.astype(dtype))
    if scheme == "xpos":
        return dict(xpos=True, xpos_scale_base=8.0, xpos_center=2.0)  # a visible decay
    if scheme == "temperature":
        return dict(attn_temperature_tuning=True, floor_scale=3.0, attn_scale=0.5)
    if scheme == "cope":
        return dict(cope=rng.standard_normal((S + 2, D)).astype(dtype))  # npos > S: no clamp
    raise ValueError(scheme)


def reference(q, k, v, scheme, kw, causal, qpos, kpos):
    """(out, score magnitude) from reference.py for one batch element; the magnitude bounds
    |scores| (the transformed q and k, plus the bias or CoPE's q . e)."""
    smax = score_max(q, k, D)
    if scheme.startswith("kerple"):
        b = ref.kerple_bias(kw["kerple"], qpos, kpos, kw.get("kerple_kernel", "log"))
        return ref.attention(q, k, v, causal=causal, bias=b)[0], smax + float(np.abs(b).max())
    if scheme == "fire":
        b = ref.fire_bias(kw["fire"], qpos, kpos, M)
        return ref.attention(q, k, v, causal=causal, bias=b)[0], smax + float(np.abs(b).max())
    if scheme == "xpos":
        x = dict(scale_base=8.0, center=2.0)
        qr = ref.xpos_transform(q, qpos, **x)
        kr = ref.xpos_transform(k, kpos, key=True, **x)
        return ref.attention(qr, kr, v, causal=causal)[0], score_max(qr, kr, D)
    if scheme == "temperature":
        qs = np.asarray(q, np.float64) * ref.temperature_scale(qpos, 3.0, 0.5)[:, None, None]
        return ref.attention(qs, k, v, causal=causal)[0], score_max(qs, k, D)
    if scheme == "cope":
        zmax = float(np.abs(q).max() * np.abs(kw["cope"]).max() * D)
        return ref.cope_attention(q, k, v, kw["cope"]), smax + zmax
    raise ValueError(scheme)


SCHEMES = ["kerple_log", "kerple_power", "fire", "xpos", "temperature", "cope"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "scheme,causal",
    # CoPE is causal only (its error for causal=False is tested below)
    [(s, c) for s in SCHEMES for c in (True, False) if c or s != "cope"],
)
def test_forward_matches_reference(rng, scheme, causal, dtype):
    q, k, v = draw(rng, T, S, HQ, HKV, D, dtype)
    kw = params(rng, scheme, dtype)
    # positions with a gap, so that relative distances are not the token distances
    kpos = np.concatenate([np.arange(4), np.arange(9, 9 + S - 4)])
    qpos = kpos[S - T :]
    out = posenc.attention(q, k, v, causal=causal, q_positions=qpos, k_positions=kpos, **kw)
    assert out.dtype == dtype and out.shape == (T, HQ, D)
    want, smax = reference(q, k, v, scheme, kw, causal, qpos, kpos)
    tol = tolerance(dtype, S, D, smax, float(np.abs(v).max()))
    assert np.max(np.abs(out - want)) <= tol


def test_schemes_change_the_output(rng):
    # each scheme's parameters matter (guards against an option silently ignored)
    q, k, v = draw(rng, T, S, HQ, HKV, D, np.float64)
    plain = posenc.attention(q, k, v, causal=True)
    for scheme in SCHEMES:
        out = posenc.attention(q, k, v, causal=True, **params(rng, scheme))
        assert np.max(np.abs(out - plain)) > 1e-3, scheme


def loss_and_grads(q, k, v, G, kw, causal=True, param_grads=True):
    out, lse = posenc.attention(q, k, v, causal=causal, return_lse=True, **kw)
    g = posenc.attention_backward(q, k, v, out, lse, G, causal=causal, param_grads=param_grads,
                                  **kw)
    return float(np.vdot(out, G)), g


GRAD_NAME = {"kerple": "dkerple", "fire": "dfire", "cope": "dcope"}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_backward_matches_finite_differences(rng, scheme):
    q, k, v = draw(rng, T, S, HQ, HKV, D, np.float64)
    G = rng.standard_normal((T, HQ, D))
    kw = params(rng, scheme)
    _, g = loss_and_grads(q, k, v, G, kw)

    def loss(q, k, v, kw):
        return float(np.vdot(posenc.attention(q, k, v, causal=True, **kw), G))

    # Central differences, h = 1e-6: truncation O(h^2 |f'''|) and rounding u |L| / h, about
    # 1e-8 for |L| ~ 10; 1e-7 absolute leaves room for the third derivative.
    h = 1e-6
    for name, arr in (("dq", q), ("dk", k), ("dv", v)):
        for idx in [(0, 0, 0), (arr.shape[0] - 1, 0, D - 1), (2, arr.shape[1] - 1, 5)]:
            p, m = arr.copy(), arr.copy()
            p[idx] += h
            m[idx] -= h
            args = {"dq": lambda a: (a, k, v), "dk": lambda a: (q, a, v),
                    "dv": lambda a: (q, k, a)}[name]
            fd = (loss(*args(p), kw) - loss(*args(m), kw)) / (2 * h)
            assert g[name][idx] == pytest.approx(fd, abs=1e-7), (name, idx)
    key = next((x for x in ("kerple", "fire", "cope") if x in kw), None)
    if key is None:
        assert set(g) == {"dq", "dk", "dv"}
        return
    P = kw[key]
    dP = g[GRAD_NAME[key]]
    assert dP.shape == P.shape and dP.dtype == P.dtype
    idxs = list(np.ndindex(*P.shape)) if P.size <= 16 else [
        (0, 0), (1, M), (2, 2 * M + 1), (3, 3 * M), (0, 3 * M + 1), (1, 3 * M + 2), (HQ - 1, 1),
    ] if key == "fire" else [(0, 0), (3, 7), (S + 1, D - 1), (5, 2)]
    for idx in idxs:
        p, m = P.copy(), P.copy()
        p[idx] += h
        m[idx] -= h
        fd = (loss(q, k, v, {**kw, key: p}) - loss(q, k, v, {**kw, key: m})) / (2 * h)
        assert dP[idx] == pytest.approx(fd, abs=1e-7), (key, idx)
    # param_grads=False returns only dq, dk, dv
    _, g2 = loss_and_grads(q, k, v, G, kw, param_grads=False)
    assert set(g2) == {"dq", "dk", "dv"}


def test_batched_parameter_gradients_sum_over_the_batch(rng):
    B = 3
    q = rng.standard_normal((B, T, HQ, D))
    k = rng.standard_normal((B, S, HKV, D))
    v = rng.standard_normal((B, S, HKV, D))
    G = rng.standard_normal((B, T, HQ, D))
    kw = dict(kerple=rng.standard_normal((2, HQ)), fire=params(rng, "fire")["fire"])
    _, g = loss_and_grads(q, k, v, G, kw)
    per = [loss_and_grads(q[b], k[b], v[b], G[b], kw)[1] for b in range(B)]
    for name in ("dkerple", "dfire"):
        assert np.allclose(g[name], sum(p[name] for p in per), rtol=1e-12, atol=1e-14)
    for name in ("dq", "dk", "dv"):
        assert np.array_equal(g[name], np.stack([p[name] for p in per]))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_kv_cache_decode_equals_full_attention(rng, scheme):
    # keys are stored as given, or transformed by xPos (the cache's q/k transform, given to
    # attend as well); the temperature scales q inside each call, CoPE counts over the cached
    # keys
    n = 10
    q, k, v = draw(rng, n, n, HQ, HKV, D, np.float64)
    kw = params(rng, scheme)
    if scheme == "cope":
        kw["cope"] = rng.standard_normal((n + 2, D))
    full = posenc.attention(q, k, v, causal=True, **kw)
    xpos = {key: val for key, val in kw.items() if key.startswith("xpos")}
    cache = posenc.KVCache(HKV, D, capacity=n, dtype=np.float64, **xpos)
    outs = []
    for s, e in ((0, 4), (4, 5), (5, 10)):
        cache.append(k[s:e], v[s:e])
        outs.append(cache.attend(q[s:e], **kw))
    got = np.concatenate(outs)
    # the same scores summed in other tiles: the forward's bound (test_attention.tolerance)
    # with the scheme's score magnitude
    pos = np.arange(n)
    _, smax = reference(q, k, v, scheme, kw, True, pos, pos)
    tol = tolerance(np.float64, n, D, smax, float(np.abs(v).max()))
    assert np.max(np.abs(got - full)) <= tol


def test_half_kv(rng):
    q, k, v = draw(rng, T, S, HQ, HKV, D, np.float32)
    k16, v16 = k.astype(np.float16), v.astype(np.float16)
    kw = params(rng, "kerple_log", np.float32)
    # the half-precision call is the float32 attention of the widened values (both in float32,
    # possibly with other blockings): the float32 bound against the float64 reference
    got = posenc.attention(q, k16, v16, causal=True, **kw)
    kw64, vw64 = k16.astype(np.float64), v16.astype(np.float64)
    want, smax = reference(q, kw64, vw64, "kerple_log", kw, True, np.arange(3, 9), np.arange(9))
    assert np.max(np.abs(got - want)) <= tolerance(np.float32, S, D, smax, np.abs(vw64).max())
    with pytest.raises(ValueError, match="CoPE runs its own double path"):
        posenc.attention(q, k16, v16, causal=True, cope=np.zeros((4, D), np.float32))


def test_equals_cli_attend(cli, tmp_path, rng):
    # the same call through `posenc attend`: the same bits, forward and parameter gradients
    q, k, v = draw(rng, T, S, HQ, HKV, D, np.float64)
    G = rng.standard_normal((T, HQ, D))
    ke = rng.standard_normal((2, HQ))
    fi = params(rng, "fire")["fire"]
    files = dict(q=q, k=k, v=v, dout=G, kerple=ke, fire=fi)
    for name, a in files.items():
        np.save(tmp_path / f"{name}.npy", a)
    p = {n: str(tmp_path / f"{n}.npy") for n in list(files) + ["o", "dq", "dk", "dv", "dke",
                                                                "dfi"]}
    subprocess.run(
        [str(cli), "attend", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--causal",
         "--kerple", p["kerple"], "--kerple-kernel", "power", "--fire", p["fire"],
         "--fire-hidden", str(M), "--xpos", "--out", p["o"], "--dout", p["dout"], "--dq", p["dq"],
         "--dk", p["dk"], "--dv", p["dv"], "--dkerple", p["dke"], "--dfire", p["dfi"]],
        check=True, capture_output=True,
    )
    kw = dict(kerple=ke, kerple_kernel="power", fire=fi, xpos=True)
    out, lse = posenc.attention(q, k, v, causal=True, return_lse=True, **kw)
    g = posenc.attention_backward(q, k, v, out, lse, G, causal=True, **kw)
    assert np.array_equal(out, np.load(p["o"]))
    for name, f in (("dq", "dq"), ("dk", "dk"), ("dv", "dv"), ("dkerple", "dke"),
                    ("dfire", "dfi")):
        assert np.array_equal(g[name], np.load(p[f])), name
