"""Self-Extend (Jin et al. 2024), Dual Chunk Attention (An et al. 2024) and StreamingLLM (Xiao
et al. 2024) through
posenc.attention and posenc.attention_backward: the keywords come from the declarations, the
forward against a per-pair RoPE attention written here from the papers (and vLLM's DCA
positions), the backward against finite differences, DCA read from a config.json, the errors."""
import numpy as np
import pytest

import posenc
from reference import inv_freq_default, rope_rotate


def _inputs(seed=0, S=23, Hq=4, Hkv=2, D=8):
    r = np.random.default_rng(seed)
    return (r.standard_normal((S, Hq, D)), r.standard_normal((S, Hkv, D)),
            r.standard_normal((S, Hkv, D)))


def _self_extend_positions(G, w):
    def f(i, j):
        if i - j < w:
            return i, j
        return i // G + w - w // G, j // G
    return f


def _dca_positions(chunk_size, local_size):
    s = chunk_size - local_size

    def f(i, j):
        if j // s >= i // s:
            return i % s, j % s
        if j // s == i // s - 1:
            return min(i % s + s, chunk_size), j % s
        return min(2 * s - 1, chunk_size), j % s
    return f


def _streaming_positions(n, W):
    def f(i, j):
        if i - j < W:
            return i, j
        return (min(i, n + W - 1), j) if j < n else None  # evicted
    return f


def _by_definition(q, k, v, positions, theta=10000.0):
    """Causal attention, every pair's q and k rotated at the pair's positions (float64).
    Error: the rotations' (p omega + 4) u per entry (reference.rope_rotate), then the dot, the
    softmax and the sum: a few hundred u on these sizes."""
    S, Hq, D = q.shape
    Hkv = k.shape[1]
    inv = inv_freq_default(theta, D)
    out = np.zeros_like(q)
    for h in range(Hq):
        hk = h // (Hq // Hkv)
        for i in range(S):
            s = np.full(S, -np.inf)
            for j in range(i + 1):
                if positions(i, j) is None:
                    continue
                a, b = positions(i, j)
                qa = rope_rotate(q[i:i + 1, h:h + 1], a, inv, "half")[0, 0]
                kb = rope_rotate(k[j:j + 1, hk:hk + 1], b, inv, "half")[0, 0]
                s[j] = qa @ kb / np.sqrt(D)
            w = np.exp(s - s.max())
            out[i, h] = (w / w.sum()) @ v[:, hk]
    return out


def test_keywords_come_from_the_declarations():
    import inspect
    sig = inspect.signature(posenc.attention)
    for name, default in [("self_extend", False), ("self_extend_group", 4),
                          ("self_extend_window", 512), ("dca", False), ("dca_chunk_size", 262144),
                          ("dca_local_size", 8192), ("dca_original_max_position_embeddings", 0)]:
        assert sig.parameters[name].default == default, name
    decl = {d["name"]: d for d in posenc.schemes()}
    assert decl["self_extend"]["rides_on"] == "rope"
    assert "alibi" in decl["dca"]["conflicts_with"]


@pytest.mark.parametrize("scheme,kw,positions", [
    ("self_extend", dict(self_extend=True, self_extend_group=3, self_extend_window=5),
     _self_extend_positions(3, 5)),
    ("dca", dict(dca=True, dca_chunk_size=8, dca_local_size=3), _dca_positions(8, 3)),
    ("streaming_llm", dict(streaming_llm=True, streaming_sink_tokens=2, streaming_window=6),
     _streaming_positions(2, 6)),
])
def test_forward_matches_the_definition(scheme, kw, positions):
    q, k, v = _inputs()
    cfg = posenc.rope_config(head_dim=8)
    out = posenc.attention(q, k, v, rope=cfg, causal=True, **kw)
    want = _by_definition(q, k, v, positions)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)
    plain = posenc.attention(q, k, v, rope=cfg, causal=True)
    assert np.abs(out - plain).max() > 1e-3, scheme


def test_dca_length_scaling_multiplies_the_scores():
    # vLLM: m = max(1, 0.1 ln(S / L0) + 1), scores times m^2; the same as scale * m^2.
    q, k, v = _inputs(3)
    cfg = posenc.rope_config(head_dim=8)
    S, L0 = q.shape[0], 6
    m = max(1.0, 0.1 * np.log(S / L0) + 1)
    kw = dict(dca=True, dca_chunk_size=8, dca_local_size=3)
    scaled = posenc.attention(q, k, v, rope=cfg, causal=True,
                              dca_original_max_position_embeddings=L0, **kw)
    by_scale = posenc.attention(q, k, v, rope=cfg, causal=True, scale=m * m / np.sqrt(8), **kw)
    np.testing.assert_allclose(scaled, by_scale, rtol=0, atol=1e-13)


@pytest.mark.parametrize("kw", [dict(self_extend=True, self_extend_group=3, self_extend_window=5),
                                dict(dca=True, dca_chunk_size=8, dca_local_size=3),
                                dict(streaming_llm=True, streaming_sink_tokens=2,
                                     streaming_window=4)])
def test_backward_against_finite_differences(kw):
    q, k, v = _inputs(1, S=11)
    cfg = posenc.rope_config(head_dim=8)
    dout = np.random.default_rng(2).standard_normal(q.shape)
    out, lse = posenc.attention(q, k, v, rope=cfg, causal=True, return_lse=True, **kw)
    g = posenc.attention_backward(q, k, v, out, lse, dout, rope=cfg, causal=True, **kw)
    h = 1e-6
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        for idx in [(0, 0, 0), (5, 1, 3), (10, 1, 7)]:
            xp, xm = x.copy(), x.copy()
            xp[idx] += h
            xm[idx] -= h
            args = {"dq": (xp, k, v), "dk": (q, xp, v), "dv": (q, k, xp)}[name]
            argm = {"dq": (xm, k, v), "dk": (q, xm, v), "dv": (q, k, xm)}[name]
            fd = (np.sum(dout * posenc.attention(*args, rope=cfg, causal=True, **kw))
                  - np.sum(dout * posenc.attention(*argm, rope=cfg, causal=True, **kw))) / (2 * h)
            assert abs(fd - g[name][idx]) < 1e-7, (name, idx, fd, g[name][idx])


def test_hf_dca_reads_qwen_style_configs():
    cfg = {"model_type": "qwen2", "rope_theta": 10000000.0,
           "dual_chunk_attention_config": {"chunk_size": 262144, "local_size": 8192,
                                           "original_max_position_embeddings": 262144}}
    assert posenc.hf_dca(cfg) == {"dca": True, "dca_chunk_size": 262144, "dca_local_size": 8192,
                                  "dca_original_max_position_embeddings": 262144}
    assert posenc.hf_dca({"model_type": "qwen2"}) == {}
    with pytest.warns(UserWarning, match="no original_max_position_embeddings"):
        d = posenc.hf_dca({"dual_chunk_attention_config": {"chunk_size": 16, "local_size": 4}})
    assert d["dca_original_max_position_embeddings"] == 0
    with pytest.raises(ValueError, match="local_size < chunk_size"):
        posenc.hf_dca({"dual_chunk_attention_config": {"chunk_size": 16, "local_size": 16}})


def test_errors_name_what_is_needed():
    q, k, v = _inputs()
    cfg = posenc.rope_config(head_dim=8)
    with pytest.raises(ValueError, match="self_extend needs RoPE on"):
        posenc.attention(q, k, v, causal=True, self_extend=True)
    with pytest.raises(ValueError, match="dca needs causal attention"):
        posenc.attention(q, k, v, rope=cfg, dca=True)
    with pytest.raises(ValueError, match="self_extend cannot be combined with alibi"):
        posenc.attention(q, k, v, rope=cfg, causal=True, alibi=True, self_extend=True)
    with pytest.raises(ValueError, match="self_extend_group must be an integer in"):
        posenc.attention(q, k, v, rope=cfg, causal=True, self_extend=True, self_extend_group=0)
    with pytest.raises(ValueError, match="self_extend_window need"):
        posenc.attention(q, k, v, rope=cfg, causal=True, self_extend_window=4)


@pytest.mark.parametrize("mode,tol", [("exact", 1e-13), ("rerotate", 1e-12)])
def test_streaming_cache_policy_matches_the_scheme(mode, tol):
    # KVCache.evict_streaming after each append, then the token's query at the cache's last
    # position: the streaming_llm keywords' row, the keys moved by the cache's shift_mode.
    q, k, v = _inputs(4, S=25)
    cfg = posenc.rope_config(head_dim=8)
    n, W = 2, 6
    want = posenc.attention(q, k, v, rope=cfg, causal=True, streaming_llm=True,
                            streaming_sink_tokens=n, streaming_window=W)
    cache = posenc.KVCache(2, 8, capacity=n + W + 1, dtype=np.float64, rope=cfg, shift_mode=mode)
    forgotten = 0
    for i in range(q.shape[0]):
        cache.append(k[i:i + 1], v[i:i + 1])
        forgotten += cache.evict_streaming(n, W)
        assert len(cache) == min(i + 1, n + W)
        got = cache.attend(q[i:i + 1])
        np.testing.assert_allclose(got[0], want[i], rtol=0, atol=tol)
    assert forgotten == q.shape[0] - (n + W)
    with pytest.raises(ValueError, match="window must be >= 1"):
        cache.evict_streaming(2, 0)
