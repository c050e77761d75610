"""Half-precision keys and values: float16 arrays, and bfloat16 bits in uint16 arrays with
kv_dtype="bf16", computed in float32 against the NumPy reference on the stored values."""

import math

import numpy as np
import pytest
import reference as ref

import posenc

torch = pytest.importorskip("torch")


def bound(S, D, smax, vmax):
    # float32 evaluation of the stored values (as tests/python/test_attention.py's tolerance).
    return 4 * (D + S) * ref.U32 * max(1.0, smax) * vmax


@pytest.mark.parametrize("T,S", [(1, 300), (4, 70), (70, 140)])
def test_float16_keys_and_values(rng, T, S):
    Hq, Hkv, D = 8, 2, 32
    q = rng.standard_normal((T, Hq, D)).astype(np.float32)
    k = rng.standard_normal((S, Hkv, D)).astype(np.float16)
    v = rng.standard_normal((S, Hkv, D)).astype(np.float16)
    out = posenc.attention(q, k, v, causal=True)
    assert out.dtype == np.float32
    want, _ = ref.attention(q, k.astype(np.float64), v.astype(np.float64), causal=True)
    smax = float(np.abs(q).max() * np.abs(k.astype(np.float32)).max() * math.sqrt(D))
    vmax = float(np.abs(v.astype(np.float32)).max())
    assert np.abs(out - want).max() <= bound(S, D, smax, vmax)
    # The same as giving the widened values in float32 (widening is exact).
    same = posenc.attention(q, k.astype(np.float32), v.astype(np.float32), causal=True)
    assert np.abs(out - same).max() <= bound(S, D, smax, vmax)


def test_bfloat16_bits_through_uint16(rng):
    T, S, Hq, Hkv, D = 5, 200, 4, 4, 16
    q = rng.standard_normal((T, Hq, D)).astype(np.float32)
    kt = torch.from_numpy(rng.standard_normal((S, Hkv, D)).astype(np.float32)).bfloat16()
    vt = torch.from_numpy(rng.standard_normal((S, Hkv, D)).astype(np.float32)).bfloat16()
    kbits = kt.view(torch.int16).numpy().view(np.uint16)
    vbits = vt.view(torch.int16).numpy().view(np.uint16)
    out = posenc.attention(q, kbits, vbits, causal=True, kv_dtype="bf16")
    kf, vf = kt.float().numpy().astype(np.float64), vt.float().numpy().astype(np.float64)
    want, _ = ref.attention(q, kf, vf, causal=True)
    smax = float(np.abs(q).max() * np.abs(kf).max() * math.sqrt(D))
    assert np.abs(out - want).max() <= bound(S, D, smax, float(np.abs(vf).max()))


def test_half_precision_misuse_is_a_clear_error(rng):
    q = rng.standard_normal((2, 2, 8)).astype(np.float32)
    k16 = rng.standard_normal((3, 2, 8)).astype(np.float16)
    u16 = k16.view(np.uint16)
    with pytest.raises(TypeError, match="kv_dtype=\"bf16\""):
        posenc.attention(q, u16, u16)  # uint16 without saying it holds bfloat16 bits
    with pytest.raises(TypeError, match="does not match"):
        posenc.attention(q, k16, k16, kv_dtype="bf16")
    with pytest.raises(ValueError, match="kv_dtype must be"):
        posenc.attention(q, k16, k16, kv_dtype="f8")
    with pytest.raises(TypeError, match="need float32 q"):
        posenc.attention(q.astype(np.float64), k16, k16)
    with pytest.raises(TypeError, match="v must have the dtype of k"):
        posenc.attention(q, k16, k16.astype(np.float32))
