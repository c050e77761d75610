"""Attention sinks (gpt-oss's convention: one logit per head joins the softmax denominator,
with no value) through posenc.attention, posenc.attention_backward and posenc.torch, against a
softmax written here from the definition and against finite differences of dsinks."""
import numpy as np
import pytest

import posenc


def _inputs(seed=0, T=5, S=7, Hq=4, Hkv=2, D=8):
    r = np.random.default_rng(seed)
    q = r.standard_normal((T, Hq, D))
    k = r.standard_normal((S, Hkv, D))
    v = r.standard_normal((S, Hkv, D))
    sinks = 1.5 * r.standard_normal(Hq)
    return q, k, v, sinks


def _by_definition(q, k, v, sinks):
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    out = np.zeros_like(q)
    lse = np.zeros((T, Hq))
    for h in range(Hq):
        kh, vh = k[:, h // (Hq // Hkv)], v[:, h // (Hq // Hkv)]
        for i in range(T):
            s = kh @ q[i, h] / np.sqrt(D)
            s = np.where(np.arange(S) <= S - T + i, s, -np.inf)  # causal, bottom-right
            z = np.concatenate([s, [sinks[h]]])
            m = z.max()
            w = np.exp(z - m)
            out[i, h] = (w[:-1] / w.sum()) @ vh
            lse[i, h] = m + np.log(w.sum())
    return out, lse


def test_forward_matches_the_definition():
    q, k, v, sinks = _inputs()
    out, lse = posenc.attention(q, k, v, causal=True, sinks=sinks, return_lse=True)
    want_out, want_lse = _by_definition(q, k, v, sinks)
    np.testing.assert_allclose(out, want_out, rtol=0, atol=1e-13)
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-13)
    plain = posenc.attention(q, k, v, causal=True)
    assert not np.allclose(out, plain)


def test_dsinks_against_finite_differences():
    q, k, v, sinks = _inputs(1)
    dout = np.random.default_rng(2).standard_normal(q.shape)
    out, lse = posenc.attention(q, k, v, causal=True, sinks=sinks, return_lse=True)
    g = posenc.attention_backward(q, k, v, out, lse, dout, causal=True, sinks=sinks,
                                  param_grads=True)
    h = 1e-6
    for j in range(len(sinks)):
        sp, sm = sinks.copy(), sinks.copy()
        sp[j] += h
        sm[j] -= h
        fd = (np.sum(dout * posenc.attention(q, k, v, causal=True, sinks=sp))
              - np.sum(dout * posenc.attention(q, k, v, causal=True, sinks=sm))) / (2 * h)
        assert abs(fd - g["dsinks"][j]) < 1e-7, (j, fd, g["dsinks"][j])


def test_torch_learns_the_sinks():
    torch = pytest.importorskip("torch")
    import posenc.torch as pt
    q, k, v, sinks = (torch.from_numpy(x) for x in _inputs(3))
    s = sinks.clone().requires_grad_(True)
    out = pt.attention(q, k, v, causal=True, sinks=s)
    out.sum().backward()
    g = posenc.attention_backward(q.numpy(), k.numpy(), v.numpy(),
                                  *posenc.attention(q.numpy(), k.numpy(), v.numpy(), causal=True,
                                                    sinks=sinks.numpy(), return_lse=True),
                                  np.ones(tuple(q.shape)), causal=True, sinks=sinks.numpy(),
                                  param_grads=True)
    np.testing.assert_array_equal(s.grad.numpy(), g["dsinks"])


def test_bad_sinks_raise():
    q, k, v, sinks = _inputs()
    with pytest.raises(ValueError, match="sinks must have shape"):
        posenc.attention(q, k, v, sinks=sinks[:3])
    with pytest.raises(ValueError, match="finite"):
        posenc.attention(q, k, v, sinks=np.array([np.inf, 0, 0, 0]))
