"""Forgetting Attention from Python (fox=, the log forget gates, and dfox among the gradients):
against attention written out here in NumPy from the paper's sum of log gates, batched, through
posenc.torch's autograd, through a KVCache, and its errors."""

import numpy as np
import pytest

import posenc


def draw(T=23, Hq=4, Hkv=2, D=8, B=None, seed=0):
    r = np.random.default_rng(seed)
    lead = () if B is None else (B,)
    q = r.standard_normal(lead + (T, Hq, D))
    k = r.standard_normal(lead + (T, Hkv, D))
    v = r.standard_normal(lead + (T, Hkv, D))
    g = -np.log1p(np.exp(-(1 + 2 * r.standard_normal(lead + (T, Hq)))))  # log sigmoid
    return q, k, v, g


def written_out(q, k, v, g):
    """softmax_j(q_i.k_j / sqrt(D) + sum_{l=j+1..i} log f_l) v_j over j <= i, in float64."""
    T, Hq, D = q.shape
    G = Hq // k.shape[1]
    out = np.zeros_like(q)
    for h in range(Hq):
        for i in range(T):
            s = np.array([q[i, h] @ k[j, h // G] / np.sqrt(D) + g[j + 1:i + 1, h].sum()
                          for j in range(i + 1)])
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[:i + 1, h // G]
    return out


def test_matches_the_papers_sum_of_log_gates():
    q, k, v, g = draw()
    out = posenc.attention(q, k, v, causal=True, fox=g)
    assert np.abs(out - written_out(q, k, v, g)).max() < 1e-12


def test_batched_gates_have_a_row_per_token_of_each_element():
    q, k, v, g = draw(B=3)
    out = posenc.attention(q, k, v, causal=True, fox=g)
    for b in range(3):
        assert np.abs(out[b] - posenc.attention(q[b], k[b], v[b], causal=True, fox=g[b])).max() == 0
    o, lse = posenc.attention(q, k, v, causal=True, fox=g, return_lse=True)
    gr = posenc.attention_backward(q, k, v, o, lse, np.ones_like(o), causal=True, fox=g)
    assert gr["dfox"].shape == g.shape


def test_torch_gradient_is_the_backwards():
    torch = pytest.importorskip("torch")
    import posenc.torch as pt
    q, k, v, g = draw()
    dout = np.random.default_rng(5).standard_normal(q.shape)
    o, lse = posenc.attention(q, k, v, causal=True, fox=g, return_lse=True)
    want = posenc.attention_backward(q, k, v, o, lse, dout, causal=True, fox=g)
    gt = torch.tensor(g, requires_grad=True)
    qt = torch.tensor(q, requires_grad=True)
    ot = pt.attention(qt, torch.tensor(k), torch.tensor(v), causal=True, fox=gt)
    (ot * torch.tensor(dout)).sum().backward()
    assert np.array_equal(gt.grad.numpy(), want["dfox"])
    assert np.array_equal(qt.grad.numpy(), want["dq"])


def test_kv_cache_decode_with_every_cached_tokens_gates():
    q, k, v, g = draw(T=12)
    full = posenc.attention(q, k, v, causal=True, fox=g)
    cache = posenc.KVCache(2, 8, capacity=12, dtype=np.float64)
    rows = []
    for t in range(12):
        cache.append(k[t:t + 1], v[t:t + 1])
        rows.append(cache.attend(q[t:t + 1], fox=g[:t + 1]))
    assert np.abs(np.concatenate(rows) - full).max() < 1e-13
    with pytest.raises(ValueError, match=r"fox must have shape \(S, Hq\) = \(12, 4\), got \(3, 4\)"):
        cache.attend(q[:1], fox=g[:3])


def test_errors_name_the_argument():
    q, k, v, g = draw()
    with pytest.raises(ValueError, match="pass log f"):
        posenc.attention(q, k, v, causal=True, fox=np.exp(g))  # the gates, not their logs
    with pytest.raises(ValueError, match="fox needs causal attention"):
        posenc.attention(q, k, v, fox=g)
    with pytest.raises(ValueError, match=r"fox must have shape \(S, Hq\) = \(23, 4\)"):
        posenc.attention(q, k, v, causal=True, fox=g[:, :3])
    with pytest.raises(TypeError, match="fox"):
        posenc.attention(q, k, v, causal=True, fox="gates")
