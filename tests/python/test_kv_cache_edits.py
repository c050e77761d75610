"""posenc.KVCache position edits (remove, shift, divide: llama.cpp's seq_rm, seq_add, seq_div)
through Python: exact mode equals a fresh append at the final positions bit for bit, rerotate
mode turns keys by the change without a second attention factor, bad edits raise and change
nothing."""
import numpy as np
import pytest

import posenc


def _cache(mode, kv_dtype=None, rope=None):
    rope = rope or posenc.RopeConfig(head_dim=16, theta=10000.0)
    return posenc.KVCache(2, 16, capacity=32, rope=rope, kv_dtype=kv_dtype, shift_mode=mode)


def _kv(n, seed=0):
    r = np.random.default_rng(seed)
    return (r.standard_normal((n, 2, 16)).astype(np.float32),
            r.standard_normal((n, 2, 16)).astype(np.float32))


@pytest.mark.parametrize("kv_dtype", [None, "f16", "bf16"])
def test_exact_mode_equals_a_fresh_append(kv_dtype):
    k, v = _kv(12)
    c = _cache("exact", kv_dtype)
    assert c.shift_mode == "exact"
    c.append(k, v, np.arange(50, 62))
    assert c.remove(50, 52) == 2
    assert c.shift(55, None, -10) == 0
    c.divide(0, 50, 2)
    want = []
    for p in range(52, 62):
        p = p - 10 if p >= 55 else p
        want.append(p // 2 if p < 50 else p)
    fresh = _cache("exact", kv_dtype)
    fresh.append(k[2:], v[2:], np.array(want))
    np.testing.assert_array_equal(c.positions, want)
    np.testing.assert_array_equal(c.keys, fresh.keys)
    np.testing.assert_array_equal(c.values, fresh.values)
    q = np.random.default_rng(1).standard_normal((1, 4, 16)).astype(np.float32)
    np.testing.assert_array_equal(c.attend(q), fresh.attend(q))


def test_rerotate_keeps_the_magnitude_and_drifts_in_half_precision():
    k, v = _kv(8)
    yarn = posenc.RopeConfig(head_dim=16, theta=10000.0, scaling="yarn", factor=4.0,
                             original_max_position_embeddings=64)
    c = _cache("rerotate", rope=yarn)
    c.append(k, v, np.arange(100, 108))
    before = c.keys.copy()
    c.shift(0, None, 7)
    c.shift(0, None, -7)
    np.testing.assert_allclose(c.keys, before, rtol=0, atol=2e-6)  # no a^2 from two shifts
    h = _cache("rerotate", "f16")
    h.append(k, v, np.arange(100, 108))
    h0 = h.keys.astype(np.float32)
    for _ in range(50):
        h.shift(0, None, 3)
        h.shift(0, None, -3)
    assert not np.array_equal(h.keys.astype(np.float32), h0)  # rounded 100 more times


def test_bad_edits_raise_and_change_nothing():
    k, v = _kv(4)
    c = _cache("rerotate")
    c.append(k, v)
    keys, pos = c.keys.copy(), c.positions.copy()
    with pytest.raises(ValueError, match="p0 <= p1"):
        c.remove(3, 1)
    with pytest.raises(ValueError, match="d must be >= 1"):
        c.divide(0, None, 0)
    with pytest.raises(TypeError, match="delta"):
        c.shift(0, None, 1.5)
    with pytest.raises(TypeError, match="p0"):
        c.remove("0")
    np.testing.assert_array_equal(c.keys, keys)
    np.testing.assert_array_equal(c.positions, pos)
    with pytest.raises(ValueError, match="shift_mode"):
        _cache("lazy")
    assert c.shift(0, None, -2) == 2  # positions 0, 1 fall below 0: dropped, as llama.cpp
    np.testing.assert_array_equal(c.positions, [0, 1])
    assert c.next_position == 2
