"""posenc.KVCache: decoding chunk by chunk equals attention over the whole sequence."""

import numpy as np
import pytest

import posenc


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_chunked_decode_equals_full_attention(rng, dtype):
    T, Hq, Hkv, D = 12, 4, 2, 16
    cfg = posenc.RopeConfig(head_dim=D, scaling="llama3", factor=8.0, theta=500000.0,
                            original_max_position_embeddings=8, low_freq_factor=1.0,
                            high_freq_factor=4.0)
    q = rng.standard_normal((T, Hq, D)).astype(dtype)
    k = rng.standard_normal((T, Hkv, D)).astype(dtype)
    v = rng.standard_normal((T, Hkv, D)).astype(dtype)
    full = posenc.attention(q, k, v, causal=True, rope=cfg, alibi=True)
    cache = posenc.KVCache(Hkv, D, capacity=4, dtype=dtype, rope=cfg)  # grows twice
    outs = []
    for s, e in ((0, 5), (5, 6), (6, 7), (7, 12)):
        cache.append(k[s:e], v[s:e])
        outs.append(cache.attend(q[s:e], alibi=True))
    got = np.concatenate(outs)
    assert len(cache) == T and np.array_equal(cache.positions, np.arange(T))
    # the same rotations and scores; only the tiling of the sums differs between the calls:
    # a few (D + S) u relative to max|v| (tests/python/test_attention.py's derivation)
    u = 2.0**-53 if dtype == np.float64 else 2.0**-24
    smax = np.abs(q).max() * np.abs(k).max() * np.sqrt(D)
    assert np.max(np.abs(got - full)) <= 4 * (D + T) * u * max(1.0, smax) * np.abs(v).max()


def test_cache_errors():
    cache = posenc.KVCache(2, 8)
    with pytest.raises(ValueError, match=r"k must have shape \(T, Hkv, D\) = \(T, 2, 8\)"):
        cache.append(np.zeros((3, 1, 8), np.float32), np.zeros((3, 1, 8), np.float32))
    with pytest.raises(TypeError, match="float32"):
        cache.append(np.zeros((3, 2, 8)), np.zeros((3, 2, 8)))
    with pytest.raises(ValueError, match="cache holds 0"):
        cache.attend(np.zeros((1, 2, 8), np.float32))
