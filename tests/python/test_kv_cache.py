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
    cache = posenc.KVCache(Hkv, D, capacity=T, dtype=dtype, rope=cfg)
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
    with pytest.raises(ValueError, match="cache holds only 0 tokens"):
        cache.attend(np.zeros((1, 2, 8), np.float32))
    with pytest.raises(TypeError, match="rope is the cache's"):
        cache.attend(np.zeros((1, 2, 8), np.float32), rope=posenc.RopeConfig(head_dim=8))
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        posenc.KVCache(2, 8, dtype=np.float16)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        posenc.KVCache(2, 8, capacity=0)
    with pytest.raises(ValueError, match="kv_dtype must be None"):
        posenc.KVCache(2, 8, kv_dtype="f8")
    with pytest.raises(ValueError, match="needs a float32 cache"):
        posenc.KVCache(2, 8, dtype=np.float64, kv_dtype="f16")


def test_capacity_is_fixed_and_positions_follow_the_library(rng):
    # The library's cache: an append past capacity is refused and changes nothing; the next
    # position is one past the largest so far; clear() restarts at start_position.
    k = rng.standard_normal((5, 1, 8)).astype(np.float32)
    cache = posenc.KVCache(1, 8, capacity=4, start_position=3)
    assert cache.append(k[:2], k[:2]).tolist() == [3, 4]
    with pytest.raises(ValueError, match=r"3 new tokens do not fit: the cache holds 2 of its "
                                         r"capacity 4 \(2 free\)"):
        cache.append(k[:3], k[:3])
    assert len(cache) == 2 and cache.next_position == 5
    cache.append(k[2:4], k[2:4], positions=[9, 6])
    assert cache.positions.tolist() == [3, 4, 9, 6] and cache.next_position == 10
    assert np.array_equal(cache.values, k[:4])
    cache.clear()
    assert len(cache) == 0 and cache.next_position == 3
