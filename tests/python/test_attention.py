"""posenc.attention and attention_backward against the NumPy reference."""

import math
import subprocess

import numpy as np
import pytest
import reference as ref

import posenc


def tolerance(dtype, S, D, smax, vmax):
    """|posenc - reference| bound for attention outputs.

    Both sides sum D products per score and S terms per softmax and output: float64 errors of
    a few (D + S) u relative to the score and value magnitudes; float32 (posenc's arithmetic in
    the element type, include/posenc/attention/attention.hpp) a few (D + S) u_f times the score
    magnitude, relative to max|v|. Factor 4 for the few roundings per term.
    """
    u = ref.U64 if dtype == np.float64 else ref.U32
    return 4 * (D + S) * u * max(1.0, smax) * vmax


def draw(rng, T, S, Hq, Hkv, D, dtype):
    q = rng.standard_normal((T, Hq, D)).astype(dtype)
    k = rng.standard_normal((S, Hkv, D)).astype(dtype)
    v = rng.standard_normal((S, Hkv, D)).astype(dtype)
    return q, k, v


def score_max(q, k, D):
    return float(np.abs(q).max() * np.abs(k).max() * math.sqrt(D))


CASES = ["plain", "causal_gqa", "alibi", "t5", "shaw", "rope", "masks"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES)
def test_forward_matches_reference(rng, case, dtype):
    T, S, Hq, Hkv, D = 7, 11, 4, 2, 16
    q, k, v = draw(rng, T, S, Hq, Hkv, D, dtype)
    qpos = S - T + np.arange(T)  # the engine's default: a chunk after S - T cached tokens
    kpos = np.arange(S)
    kw, rkw = {}, {}
    bias = None
    vmax = float(np.abs(v).max())
    if case == "causal_gqa":
        kw["causal"] = rkw["causal"] = True
    elif case == "alibi":
        kw.update(causal=True, alibi=True)
        rkw["causal"] = True
        m = ref.alibi_slopes_press(Hq)
        bias = -m[:, None, None] * (qpos[:, None] - kpos[None, :])[None]
    elif case == "t5":
        table = rng.standard_normal((32, Hq)).astype(dtype)
        kw.update(t5_table=table, t5_bidirectional=True)
        b = ref.t5_bucket(kpos[None, :] - qpos[:, None], True)
        bias = np.transpose(table.astype(np.float64)[b], (2, 0, 1))
    elif case == "shaw":
        K = 3
        ak = rng.standard_normal((2 * K + 1, D)).astype(dtype)
        av = rng.standard_normal((2 * K + 1, D)).astype(dtype)
        kw.update(shaw_keys=ak, shaw_values=av, shaw_clip=K)
        rkw.update(shaw=(ak.astype(np.float64), av.astype(np.float64), K), qpos=qpos, kpos=kpos)
        vmax += float(np.abs(av).max())
    elif case == "rope":
        cfg = posenc.RopeConfig(head_dim=D, theta=10000.0)
        kw.update(causal=True, rope=cfg, rope_layout="interleaved")
        rkw["causal"] = True
        inv = ref.inv_freq_default(10000.0, D)
        qr = ref.rope_rotate(q, qpos, inv, "interleaved")
        kr = ref.rope_rotate(k, kpos, inv, "interleaved")
    elif case == "masks":
        pad = np.ones(S, dtype=bool)
        pad[[2, 5]] = False
        kw.update(causal=True, window=4, key_padding=pad)
        mask = pad[None, :] & ((S - T + np.arange(T))[:, None] - np.arange(S)[None, :] < 4)
        rkw.update(causal=True, mask=mask)
    out, lse = posenc.attention(q, k, v, return_lse=True, **kw)
    assert out.dtype == dtype and lse.dtype == dtype
    assert out.shape == (T, Hq, D) and lse.shape == (T, Hq)
    if case == "rope":
        want, wlse = ref.attention(qr, kr, v, bias=bias, **rkw)
    else:
        want, wlse = ref.attention(q, k, v, bias=bias, **rkw)
    tol = tolerance(dtype, S, D, score_max(q, k, D), vmax)
    assert np.max(np.abs(out - want)) <= tol
    fin = np.isfinite(wlse)
    assert np.array_equal(np.isfinite(lse), fin)
    assert np.max(np.abs(lse[fin] - wlse[fin])) <= tolerance(dtype, S, D, score_max(q, k, D), 1.0)


def test_packed_documents_and_fully_masked_rows(rng):
    T = S = 9
    q, k, v = draw(rng, T, S, 2, 2, 8, np.float64)
    cu = np.array([0, 4, 9])
    out = posenc.attention(q, k, v, causal=True, cu_seqlens=cu)
    doc = np.repeat([0, 1], [4, 5])
    want, _ = ref.attention(q, k, v, causal=True, mask=doc[:, None] == doc[None, :])
    assert np.max(np.abs(out - want)) <= tolerance(np.float64, S, 8, score_max(q, k, 8), 3.0 * 2)
    # a row that sees no key: zeros and lse -inf, never NaN
    pad = np.zeros(S, dtype=bool)
    out, lse = posenc.attention(q, k, v, key_padding=pad, return_lse=True)
    assert np.all(out == 0) and np.all(lse == -np.inf)


def test_batched_equals_per_element(rng):
    B, T, S, Hq, Hkv, D = 3, 5, 8, 4, 1, 16
    q = rng.standard_normal((B, T, Hq, D)).astype(np.float32)
    k = rng.standard_normal((B, S, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, S, Hkv, D)).astype(np.float32)
    pad = rng.random((B, S)) > 0.2
    pad[:, -1] = True
    out = posenc.attention(q, k, v, causal=True, alibi=True, key_padding=pad)
    for b in range(B):
        ob = posenc.attention(q[b], k[b], v[b], causal=True, alibi=True, key_padding=pad[b])
        assert np.array_equal(out[b], ob)


def test_backward_matches_finite_differences(rng):
    # central differences in float64 of L = <out, G> for a few entries of q, k, v and the slopes
    T, S, Hq, Hkv, D = 4, 6, 2, 1, 8
    q, k, v = draw(rng, T, S, Hq, Hkv, D, np.float64)
    G = rng.standard_normal((T, Hq, D))
    slopes = np.array([0.5, 0.25])
    kw = dict(causal=True, alibi=slopes)

    def loss(q, k, v, s):
        return float(np.vdot(posenc.attention(q, k, v, causal=True, alibi=s), G))

    out, lse = posenc.attention(q, k, v, return_lse=True, **kw)
    g = posenc.attention_backward(q, k, v, out, lse, G, **kw)
    h = 1e-6
    for name, arr in (("dq", q), ("dk", k), ("dv", v)):
        for idx in [(0, 0, 0), (arr.shape[0] - 1, 0, D - 1), (1, arr.shape[1] - 1, 3)]:
            p, m = arr.copy(), arr.copy()
            p[idx] += h
            m[idx] -= h
            args_p = {"dq": (p, k, v), "dk": (q, p, v), "dv": (q, k, p)}[name]
            args_m = {"dq": (m, k, v), "dk": (q, m, v), "dv": (q, k, m)}[name]
            fd = (loss(*args_p, slopes) - loss(*args_m, slopes)) / (2 * h)
            # truncation O(h^2 |f'''|) and rounding u |L| / h: 1e-7 absolute for |L| ~ 10
            assert g[name][idx] == pytest.approx(fd, abs=1e-7)
    for hh in range(Hq):
        sp, sm = slopes.copy(), slopes.copy()
        sp[hh] += h
        sm[hh] -= h
        fd = (loss(q, k, v, sp) - loss(q, k, v, sm)) / (2 * h)
        assert g["dalibi"][hh] == pytest.approx(fd, abs=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_cli_attend(cli, tmp_path, rng, dtype):
    q, k, v = draw(rng, 4, 6, 4, 2, 16, dtype)
    for name, a in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", a)
    subprocess.run(
        [str(cli), "attend", "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy"),
         "--v", str(tmp_path / "v.npy"), "--causal", "--alibi", "--out", str(tmp_path / "o.npy")],
        check=True, capture_output=True,
    )
    out = posenc.attention(q, k, v, causal=True, alibi=True)
    assert np.array_equal(out, np.load(tmp_path / "o.npy"))


def test_no_tokens_with_three_row_ids():
    # T = S = 0 with (3, 0) M-RoPE ids: empty results from the forward, the backward and
    # posenc.torch, as for one-row ids, not a crash (the ids' rows were split by dividing by T).
    cfg = posenc.RopeConfig.from_hf(
        {"head_dim": 8, "rope_scaling": {"type": "mrope", "mrope_section": [1, 2, 1]}})
    q = np.zeros((0, 4, 8), np.float32)
    k = np.zeros((0, 2, 8), np.float32)
    ids = np.zeros((3, 0), np.int64)
    kw = dict(causal=True, rope=cfg, q_positions=ids, k_positions=ids)
    out, lse = posenc.attention(q, k, k, return_lse=True, **kw)
    assert out.shape == (0, 4, 8) and lse.size == 0
    g = posenc.attention_backward(q, k, k, out, lse, out, **kw)
    assert g["dq"].shape == (0, 4, 8) and g["dk"].shape == (0, 2, 8)
    torch = pytest.importorskip("torch")
    import posenc.torch as pt
    tq = torch.zeros((0, 4, 8), requires_grad=True)
    tk = torch.zeros((0, 2, 8), requires_grad=True)
    tids = torch.zeros((3, 0), dtype=torch.int64)
    o = pt.attention(tq, tk, tk, causal=True, rope=cfg, q_positions=tids, k_positions=tids)
    assert tuple(o.shape) == (0, 4, 8)
