"""posenc.flash_attn.RotaryEmbedding against FlashAttention's module (0251105a,
flash_attn/layers/rotary.py) written out here in plain torch: its cos / sin cache (float32
torch.outer of float32 positions and 1 / base ** (arange(0, dim, 2) / dim), xPos's
zeta ** ((t - seqlen // 2) / scale_base) in float32) and its rotation of q and k in place.

The expected values are torch's own float32 arithmetic, not posenc's. posenc rounds cos / sin
correctly where torch's CPU cos / sin are within 1 ulp, and may hold a frequency 1 ulp from
torch's pow at a pair or two; so the tables agree to 2 ulp of 1 (4 ulp times zeta^power with
xPos), and outputs within those table errors times |x| plus the float32 rounding of the
products: 8 * 2^-24 * max|x| * max(zeta^power) per element.
"""

import numpy as np
import pytest
import torch

from posenc import flash_attn as rotary

U32 = 2.0**-24


def fa_tables(dim, base, seqlen, scale_base=None):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    t = torch.arange(seqlen, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    cos, sin = torch.cos(freqs), torch.sin(freqs)
    if scale_base is None:
        return cos, sin, cos, sin
    zeta = (torch.arange(0, dim, 2, dtype=torch.float32) + 0.4 * dim) / (1.4 * dim)
    power = (torch.arange(seqlen, dtype=torch.float32) - seqlen // 2) / scale_base
    scale = zeta ** power[:, None]
    return cos * scale, sin * scale, cos / scale, sin / scale


def rotate(x, cos, sin, offset, interleaved):
    """FlashAttention's apply_rotary_emb_torch semantics in float64: x (B, T, H, D), rows
    offset .. offset + T of the tables, rotary width 2 * cos.shape[1]."""
    x = x.double()
    T, R = x.shape[1], 2 * cos.shape[1]
    c = cos[offset:offset + T].double()[None, :, None, :]
    s = sin[offset:offset + T].double()[None, :, None, :]
    out = x.clone()
    if interleaved:
        a, b = x[..., 0:R:2], x[..., 1:R:2]
        out[..., 0:R:2], out[..., 1:R:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., : R // 2], x[..., R // 2:R]
        out[..., : R // 2], out[..., R // 2:R] = a * c - b * s, a * s + b * c
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("scale_base", [None, 512])
@pytest.mark.parametrize("offset", [0, 7])
def test_packed_qkv_in_place(interleaved, scale_base, offset):
    B, T, H, D, dim = 2, 9, 3, 32, 24
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(B, T, 3, H, D, generator=g)
    before = qkv.clone()
    rope = rotary.RotaryEmbedding(dim, base=10000.0, interleaved=interleaved, scale_base=scale_base)
    out = rope(qkv, seqlen_offset=offset)
    assert out.data_ptr() == qkv.data_ptr()
    cq, sq, ck, sk = fa_tables(dim, 10000.0, T + offset, scale_base)
    wq = rotate(before[:, :, 0], cq, sq, offset, interleaved)
    wk = rotate(before[:, :, 1], ck, sk, offset, interleaved)
    amp = 1.0 if scale_base is None else float(torch.cat([cq.abs(), ck.abs()]).max()) + 1
    bound = 8 * U32 * float(before.abs().max()) * amp
    assert float((qkv[:, :, 0].double() - wq).abs().max()) <= bound
    assert float((qkv[:, :, 1].double() - wk).abs().max()) <= bound
    assert torch.equal(qkv[:, :, 2], before[:, :, 2])  # v untouched
    assert torch.equal(qkv[..., dim:], before[..., dim:])  # past the rotary width


def test_tables_within_two_ulp_of_flash_attention():
    rope = rotary.RotaryEmbedding(64, base=500000.0)
    q = torch.zeros(1, 3000, 1, 64)
    rope(q, torch.zeros(1, 3000, 2, 1, 64))
    cos, sin, _, _ = fa_tables(64, 500000.0, 3000)
    assert rope._cos_cached.dtype == torch.float32
    assert float((rope._cos_cached - cos).abs().max()) <= 2 * U32
    assert float((rope._sin_cached - sin).abs().max()) <= 2 * U32


def test_gqa_q_and_kv_and_tensor_offsets():
    B, T, Hq, Hk, D = 2, 5, 4, 2, 16
    g = torch.Generator().manual_seed(2)
    qkv = torch.randn(B, T, Hq + 2 * Hk, D, generator=g)
    before = qkv.clone()
    rope = rotary.RotaryEmbedding(D)
    offsets = torch.tensor([0, 3])
    rope(qkv, seqlen_offset=offsets, max_seqlen=T + 3, num_heads_q=Hq)
    cos, sin, _, _ = fa_tables(D, 10000.0, T + 3)
    for b, off in enumerate((0, 3)):
        wq = rotate(before[b:b + 1, :, :Hq], cos, sin, off, False)
        wk = rotate(before[b:b + 1, :, Hq:Hq + Hk], cos, sin, off, False)
        bound = 8 * U32 * float(before.abs().max())
        assert float((qkv[b:b + 1, :, :Hq].double() - wq).abs().max()) <= bound
        assert float((qkv[b:b + 1, :, Hq:Hq + Hk].double() - wk).abs().max()) <= bound
    assert torch.equal(qkv[:, :, Hq + Hk:], before[:, :, Hq + Hk:])
    # q and a separate kv
    q = torch.randn(B, T, Hq, D, generator=g)
    kv = torch.randn(B, T, 2, Hk, D, generator=g)
    q0, kv0 = q.clone(), kv.clone()
    q1, kv1 = rope(q, kv, seqlen_offset=2)
    assert q1.data_ptr() == q.data_ptr() and kv1.data_ptr() == kv.data_ptr()
    cos, sin, _, _ = fa_tables(D, 10000.0, T + 2)
    assert float((q.double() - rotate(q0, cos, sin, 2, False)).abs().max()) <= 8 * U32 * 5
    assert float((kv[:, :, 0].double() - rotate(kv0[:, :, 0], cos, sin, 2, False)).abs().max()) <= 8 * U32 * 5
    assert torch.equal(kv[:, :, 1], kv0[:, :, 1])


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="dim must be an even integer"):
        rotary.RotaryEmbedding(7)
    with pytest.raises(ValueError, match="base must be finite"):
        rotary.RotaryEmbedding(8, base=float("nan"))
    with pytest.raises(ValueError, match="scale_base"):
        rotary.RotaryEmbedding(8, scale_base=0)
    rope = rotary.RotaryEmbedding(8)
    with pytest.raises(ValueError, match="max_seqlen"):
        rope(torch.zeros(1, 2, 3, 1, 8), seqlen_offset=torch.tensor([1]))


def test_the_module_offers_flash_attentions_names():
    for name in ("RotaryEmbedding", "apply_rotary_emb", "apply_rotary_emb_func",
                 "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_"):
        assert hasattr(rotary, name), name
    assert rotary.apply_rotary_emb_func is rotary.apply_rotary_emb
    assert np.isclose(rotary.RotaryEmbedding(8).inv_freq[1].item(), 10000.0 ** -0.25, rtol=1e-7)
