"""bfloat16 queries, keys and values and bfloat16 products (products="bf16"): NumPy arrays of
bfloat16 bits (uint16, kv_dtype="bf16") and torch bfloat16 tensors, read in place, against the
NumPy float64 reference on the stored values. The bound (include/posenc/attention/
attention_cases.hpp, "bfloat16 products"): with q, k, v stored in bfloat16 and no RoPE the
operands enter exactly; the probabilities' rounding adds at most 2^-8 max|v|, on top of the
float32 terms (tests/python/test_half_kv.py's bound)."""

import math

import numpy as np
import pytest
import reference as ref

import posenc

torch = pytest.importorskip("torch")
import posenc.torch as pt  # noqa: E402


def bits(x):
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).bfloat16()
    return t, t.view(torch.int16).numpy().view(np.uint16), t.float().numpy().astype(np.float64)


def float32_bound(S, D, smax, vmax):
    return 4 * (D + S) * ref.U32 * max(1.0, smax) * vmax


# (T, S): a packed prefill (vdpbf16ps where the CPU has it) and a decode step.
@pytest.mark.parametrize("T,S", [(100, 100), (1, 300)])
def test_bf16_products_against_reference(rng, T, S):
    Hq, Hkv, D = 8, 2, 64
    qt, qb, qf = bits(rng.standard_normal((T, Hq, D)))
    kt, kb, kf = bits(rng.standard_normal((S, Hkv, D)))
    vt, vb, vf = bits(rng.standard_normal((S, Hkv, D)))
    want, _ = ref.attention(qf, kf, vf, causal=True)
    smax = float(np.abs(qf).max() * np.abs(kf).max() * math.sqrt(D))
    vmax = float(np.abs(vf).max())
    tol32 = float32_bound(S, D, smax, vmax)
    f32 = posenc.attention(qb, kb, vb, causal=True, kv_dtype="bf16")
    bf = posenc.attention(qb, kb, vb, causal=True, kv_dtype="bf16", products="bf16")
    assert f32.dtype == np.float32 and bf.dtype == np.float32
    assert np.abs(f32 - want).max() <= tol32
    assert np.abs(bf - want).max() <= 2.0**-8 * vmax + tol32
    # 16-bit q read in place gives the bits of the widened float32 q.
    same = posenc.attention(qf.astype(np.float32), kb, vb, causal=True, kv_dtype="bf16")
    assert np.array_equal(f32, same)
    # torch: bfloat16 tensors read in place; out in bfloat16, the float32 result rounded once.
    out = pt.attention(qt, kt, vt, causal=True, products="bf16")
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, torch.from_numpy(bf).bfloat16())
    out32 = pt.attention(qt, kt, vt, causal=True)
    assert torch.equal(out32, pt.attention(qt.float(), kt.float(), vt.float(), causal=True).bfloat16())


def test_bf16_tensors_backward_widens_them(rng):
    T, S, Hq, Hkv, D = 20, 20, 4, 2, 16
    qt, _, _ = bits(rng.standard_normal((T, Hq, D)))
    kt, _, _ = bits(rng.standard_normal((S, Hkv, D)))
    vt, _, _ = bits(rng.standard_normal((S, Hkv, D)))
    wide = [t.float().requires_grad_(True) for t in (qt, kt, vt)]
    pt.attention(*wide, causal=True).sum().backward()
    # Float32 products: the forward's out and lse are the widened call's bits, and so are the
    # gradients (the backward widens the stored inputs).
    leaves = [t.clone().requires_grad_(True) for t in (qt, kt, vt)]
    pt.attention(*leaves, causal=True).float().sum().backward()
    for a, b in zip(leaves, wide):
        assert a.grad.dtype == torch.bfloat16
        assert torch.equal(a.grad, b.grad.bfloat16())
    # bfloat16 products: the backward (float32 products) starts from the forward's out, whose
    # error is below 2^-8 max|v|; the gradients move by about as much, relative to their scale.
    leaves = [t.clone().requires_grad_(True) for t in (qt, kt, vt)]
    pt.attention(*leaves, causal=True, products="bf16").float().sum().backward()
    for a, b in zip(leaves, wide):
        scale = float(b.grad.abs().max())
        assert float((a.grad.float() - b.grad).abs().max()) <= 0.05 * scale


def test_bf16_products_misuse_is_a_clear_error(rng):
    q = rng.standard_normal((4, 2, 8))
    with pytest.raises(ValueError, match="products must be"):
        posenc.attention(q.astype(np.float32), q.astype(np.float32), q.astype(np.float32),
                         products="bf8")
    with pytest.raises(ValueError, match="needs a float32 call"):
        posenc.attention(q, q, q, products="bf16")
    _, qb, _ = bits(q)
    with pytest.raises(TypeError, match="16-bit q must have the dtype of k"):
        posenc.attention(qb, q.astype(np.float16), q.astype(np.float16))
    assert isinstance(posenc.bf16_products_native(), bool)
