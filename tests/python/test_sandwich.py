"""Sandwich (Chi et al. 2023), a scheme reached by name: its keywords come from its declaration;
posenc.attention against the formula written in NumPy and against NeMo's bias (run unchanged,
tests/golden/nemo/sandwich.json); the backward against finite differences through
posenc.torch; the KV cache; the rule."""

import inspect
import json
import os

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "golden", "nemo", "sandwich.json")


def softmax_attention(q, k, v, bias, causal):
    """q (T, H, D), k, v (S, H, D) (MHA), bias (H, T, S): softmax(q.k / sqrt(D) + bias) v."""
    T, H, D = q.shape
    S = k.shape[0]
    out = np.zeros_like(q)
    for h in range(H):
        s = q[:, h] @ k[:, h].T / np.sqrt(D) + bias[h]
        if causal:
            s = np.where(np.arange(S)[None, :] <= np.arange(T)[:, None] + (S - T), s, -np.inf)
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, h] = (p / p.sum(1, keepdims=True)) @ v[:, h]
    return out


def sandwich_numpy(H, T, S, dim):
    """Chi et al. 2023, sec. 5: (sum_{i=1}^{d'/2} cos((n - m) 10000^(-2i/d')) - d'/2) / r_h,
    r_h = 8 (h + 1) / H, query m = S - T + i, key n = j."""
    w = 10000.0 ** (-2.0 * np.arange(1, dim // 2 + 1) / dim)
    off = np.arange(S)[None, :] - (np.arange(T)[:, None] + S - T)
    inner = np.cos(off[..., None] * w).sum(-1)
    return np.stack([(inner - dim / 2) / (8 * (h + 1) / H) for h in range(H)])


def test_keywords_come_from_the_declaration():
    decl = next(d for d in posenc.schemes() if d["name"] == "sandwich")
    assert decl["named"] and decl["bias_properties"] == {"offset_only": True, "symmetric": True,
                                                          "bounded": True}
    for fn in (posenc.attention, posenc.attention_backward, pt.attention):
        sig = inspect.signature(fn)
        assert sig.parameters["sandwich"].default is False
        assert sig.parameters["sandwich_dim"].default == 128
        assert "sandwich_dim" in fn.__doc__


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_attention_against_the_formula(dtype, tol):
    rng = np.random.default_rng(7)
    T, S, H, D = 5, 11, 4, 8
    q = rng.standard_normal((T, H, D)).astype(dtype)
    k, v = (rng.standard_normal((S, H, D)).astype(dtype) for _ in range(2))
    for causal in (True, False):
        out = posenc.attention(q, k, v, causal=causal, sandwich=True, sandwich_dim=16)
        assert out.dtype == dtype
        ref = softmax_attention(q.astype(np.float64), k.astype(np.float64),
                                v.astype(np.float64), sandwich_numpy(H, T, S, 16), causal)
        assert np.abs(out - ref).max() <= tol


def test_attention_against_nemo():
    # NeMo's bias (float32) for 300 positions, 4 heads, d' = 16, as the bias of the last query
    # row; posenc's attention of that row against the softmax over NeMo's bias.
    g = json.load(open(GOLDEN))
    case = next(c for c in g["cases"] if c["heads"] == 4)
    L, H, dim = len(case["kpos"]), case["heads"], case["sandwich_dim"]
    rng = np.random.default_rng(9)
    q = rng.standard_normal((1, H, 8))
    k, v = (rng.standard_normal((L, H, 8)) for _ in range(2))
    out = posenc.attention(q, k, v, causal=True, sandwich=True, sandwich_dim=dim)
    nemo = np.array(case["bias"])[:, None, :]
    ref = softmax_attention(q, k, v, nemo, True)
    # NeMo's float32 bias is within 2e-5 of the exact one at these distances (the C++ test
    # derives the bound per entry); through the softmax, outputs move by at most that times
    # max|v| times 2.
    assert np.abs(out - ref).max() <= 2 * 2e-5 * np.abs(v).max()


def test_backward_through_torch_against_finite_differences():
    torch.manual_seed(0)
    q = torch.randn(5, 2, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 2, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(7, 2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: pt.attention(a, b, c, causal=True, sandwich=True, sandwich_dim=8),
        (q, k, v))


def test_kv_cache_and_the_rule():
    rng = np.random.default_rng(2)
    T, H, D = 6, 2, 8
    q, k, v = (rng.standard_normal((T, H, D)) for _ in range(3))
    full = posenc.attention(q, k, v, causal=True, sandwich=True, sandwich_dim=32)
    cache = posenc.KVCache(H, D, dtype=np.float64)
    cache.append(k, v)
    assert np.array_equal(cache.attend(q, sandwich=True, sandwich_dim=32), full)
    with pytest.raises(ValueError, match="cope cannot be combined with sandwich"):
        posenc.attention(q, k, v, causal=True, sandwich=True, cope=np.zeros((3, D)))
    with pytest.raises(ValueError, match="sandwich_dim needs sandwich=True"):
        posenc.attention(q, k, v, sandwich_dim=32)
    with pytest.raises(ValueError, match="sandwich_dim must be an even integer"):
        posenc.attention(q, k, v, sandwich=True, sandwich_dim=31)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sandwch'"):
        posenc.attention(q, k, v, sandwch=True)
