"""posenc.torch: FlashAttention's apply_rotary_emb contract, gradcheck in double, attention
autograd against plain PyTorch."""

import math

import numpy as np
import pytest
import reference as ref
import torch  # scripts/install-deps installs python3-torch: without it these tests fail

import posenc
import posenc.torch as pt


# ---- FlashAttention's reference, transcribed (flash_attn/layers/rotary.py, without einops) --


def rotate_half(x, interleaved=False):
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_emb_torch(x, cos, sin, interleaved=False):
    """x: (batch, seqlen, nheads, headdim); cos, sin: (seqlen, rotary_dim / 2)."""
    ro_dim = cos.shape[-1] * 2
    if interleaved:
        cos = cos.repeat_interleave(2, dim=-1)
        sin = sin.repeat_interleave(2, dim=-1)
    else:
        cos = torch.cat((cos, cos), dim=-1)
        sin = torch.cat((sin, sin), dim=-1)
    cos, sin = cos[..., None, :], sin[..., None, :]  # "... d -> ... 1 d"
    return torch.cat(
        [x[..., :ro_dim] * cos + rotate_half(x[..., :ro_dim], interleaved) * sin, x[..., ro_dim:]],
        dim=-1,
    )


def tables(seqlen, rotary_dim, dtype=torch.float64, theta=10000.0):
    inv = torch.tensor(ref.inv_freq_default(theta, rotary_dim))
    ang = torch.arange(seqlen, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [32, 20])
def test_apply_rotary_emb_matches_flash_attention_reference(interleaved, rotary_dim):
    g = torch.Generator().manual_seed(1)
    B, T, H, D = 2, 9, 3, 32
    x = torch.randn(B, T, H, D, dtype=torch.float64, generator=g)
    cos, sin = tables(40, rotary_dim)
    got = pt.apply_rotary_emb(x, cos[:T], sin[:T], interleaved=interleaved)
    want = apply_rotary_emb_torch(x, cos[:T], sin[:T], interleaved)
    # one FMA per output against two products and a sum: <= 2 u (|u c| + |v s|) <= 4 u max|x|
    assert torch.max(torch.abs(got - want)) <= 4 * ref.U64 * torch.max(torch.abs(x))
    assert torch.equal(got[..., rotary_dim:], x[..., rotary_dim:])
    # seqlen_offsets: int and per-sequence tensor
    off = torch.tensor([3, 11])
    got = pt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=off)
    for b in range(B):
        o = int(off[b])
        want = apply_rotary_emb_torch(x[b : b + 1], cos[o : o + T], sin[o : o + T], interleaved)
        assert torch.max(torch.abs(got[b : b + 1] - want)) <= 4 * ref.U64 * torch.max(torch.abs(x))
    got = pt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=5)
    want = apply_rotary_emb_torch(x, cos[5 : 5 + T], sin[5 : 5 + T], interleaved)
    assert torch.max(torch.abs(got - want)) <= 4 * ref.U64 * torch.max(torch.abs(x))


def test_apply_rotary_emb_varlen():
    g = torch.Generator().manual_seed(2)
    cu = torch.tensor([0, 3, 8, 12], dtype=torch.int32)
    x = torch.randn(12, 2, 16, dtype=torch.float64, generator=g)
    cos, sin = tables(16, 16)
    got = pt.apply_rotary_emb(x, cos, sin, cu_seqlens=cu, max_seqlen=5)
    for b in range(3):
        s, e = int(cu[b]), int(cu[b + 1])
        want = apply_rotary_emb_torch(x[None, s:e], cos[: e - s], sin[: e - s])[0]
        assert torch.max(torch.abs(got[s:e] - want)) <= 4 * ref.U64 * torch.max(torch.abs(x))


def test_apply_rotary_emb_bfloat16_with_float32_tables_and_inplace():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 6, 2, 16, generator=g).to(torch.bfloat16)
    cos, sin = tables(6, 16, torch.float32)
    got = pt.apply_rotary_emb(x, cos, sin)
    assert got.dtype == torch.bfloat16
    want = apply_rotary_emb_torch(x.double(), cos.double(), sin.double())
    # computed in float32, rounded once to bfloat16 (u = 2^-8 relative to the pair's size)
    assert torch.max(torch.abs(got.double() - want)) <= 2 * 2.0**-8 * 2 * x.abs().max().double()
    y = torch.randn(1, 6, 2, 16, generator=g)
    expect = pt.apply_rotary_emb(y, cos, sin)
    r = pt.apply_rotary_emb(y, cos, sin, inplace=True)
    assert r.data_ptr() == y.data_ptr() and torch.equal(y, expect)


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rotary_emb_gradcheck(interleaved):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 4, 2, 12, dtype=torch.float64, generator=g, requires_grad=True)
    cos, sin = tables(10, 8)
    off = torch.tensor([0, 6])
    assert torch.autograd.gradcheck(
        lambda x: pt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=off),
        (x,),
    )


def test_rotary_embedding_module_gradcheck_and_values():
    cfg = posenc.RopeConfig(head_dim=16, scaling="yarn", factor=2.0,
                            original_max_position_embeddings=32)
    rot = pt.RotaryEmbedding(cfg)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 5, 4, 16, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 5, 2, 16, dtype=torch.float64, generator=g, requires_grad=True)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 40]])
    assert torch.autograd.gradcheck(lambda q, k: rot(q, k, positions=pos), (q, k))
    qr, _ = rot(q, k, positions=pos)
    inv, a = ref.yarn(10000.0, 16, 2.0, 32)
    want = ref.rope_rotate(q.detach().numpy(), pos.numpy(), inv, "half", a=a)
    assert np.max(np.abs(qr.detach().numpy() - want)) <= 64 * ref.U64 * np.abs(want).max()


# ---- attention -----------------------------------------------------------------------------


def torch_attention(q, k, v, causal=False, bias=None, mask=None):
    """Plain PyTorch eager attention, (T, H, D) layout, GQA by repeating k and v."""
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    k = k.repeat_interleave(Hq // Hkv, dim=1)
    v = v.repeat_interleave(Hq // Hkv, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D)
    if bias is not None:
        s = s + bias
    vis = torch.ones(T, S, dtype=torch.bool) if mask is None else mask
    if causal:
        vis = vis & (torch.arange(S)[None, :] <= (S - T + torch.arange(T))[:, None])
    s = s.masked_fill(~vis, float("-inf"))
    return torch.einsum("hts,shd->thd", torch.softmax(s, dim=-1), v)


def inputs(seed, T=5, S=7, Hq=4, Hkv=2, D=8):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g, requires_grad=True)  # noqa
    return mk(T, Hq, D), mk(S, Hkv, D), mk(S, Hkv, D)


GRADCHECK_CASES = {
    "none": {},
    "causal": dict(causal=True),
    "window_padding": dict(causal=True, window=3,
                           key_padding=torch.tensor([1, 1, 0, 1, 1, 1, 1], dtype=torch.bool)),
    "rope": dict(causal=True, rope=posenc.RopeConfig(head_dim=8), rope_layout="interleaved"),
    "alibi_fixed": dict(causal=True, alibi=True),
    "packed": dict(causal=True, cu_seqlens=torch.tensor([0, 3, 7])),
    "xpos": dict(causal=True, xpos=True, xpos_scale_base=8.0, xpos_center=3.0),
    "temperature": dict(causal=True, attn_temperature_tuning=True, floor_scale=2.0,
                        attn_scale=0.5),
    "mrope": dict(causal=True, rope=posenc.RopeConfig.from_hf(
        {"head_dim": 8, "rope_scaling": {"type": "mrope", "mrope_section": [1, 2, 1]}}),
        q_positions=torch.tensor(posenc.positions_mrope([(2, 1, 2, 2), (1,)])[:, 2:]),
        k_positions=torch.tensor(posenc.positions_mrope([(2, 1, 2, 2), (1,)]))),
}


@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_attention_gradcheck(case):
    q, k, v = inputs(10)
    kw = GRADCHECK_CASES[case]
    assert torch.autograd.gradcheck(lambda q, k, v: pt.attention(q, k, v, **kw), (q, k, v))


def test_attention_gradcheck_parameters():
    q, k, v = inputs(11)
    g = torch.Generator().manual_seed(12)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v, s: pt.attention(q, k, v, causal=True, alibi=s), (q, k, v, slopes))
    t5 = torch.randn(8, 4, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v, t: pt.attention(q, k, v, t5_table=t, t5_max_distance=16,
                                        t5_bidirectional=True), (q, k, v, t5))
    ak = torch.randn(5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    av = torch.randn(5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v, ak, av: pt.attention(q, k, v, causal=True, shaw_keys=ak,
                                                   shaw_values=av, shaw_clip=2),
        (q, k, v, ak, av))


@pytest.mark.parametrize("scheme", ["kerple_log", "kerple_power", "fire", "cope"])
def test_attention_gradcheck_research_parameters(scheme):
    q, k, v = inputs(17)
    g = torch.Generator().manual_seed(18)
    mk = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g, requires_grad=True)  # noqa
    if scheme.startswith("kerple"):
        kernel = scheme.split("_")[1]
        assert torch.autograd.gradcheck(
            lambda q, k, v, a: pt.attention(q, k, v, causal=True, kerple=a, kerple_kernel=kernel),
            (q, k, v, mk(2, 4)))
    elif scheme == "fire":
        w = torch.randn(4, 3 * 4 + 3, dtype=torch.float64, generator=g)
        w[:, -1] = 3.0  # threshold L = softplus(3) ~ 3: queries on both sides of it
        w.requires_grad_()
        assert torch.autograd.gradcheck(
            lambda q, k, v, w: pt.attention(q, k, v, fire=w), (q, k, v, w))
    else:
        assert torch.autograd.gradcheck(
            lambda q, k, v, e: pt.attention(q, k, v, causal=True, cope=e), (q, k, v, mk(9, 8)))


def test_attention_research_parameters_must_be_tensors():
    q, k, v = inputs(20)
    with pytest.raises(TypeError, match="kerple must be a torch.Tensor, got ndarray"):
        pt.attention(q, k, v, kerple=np.zeros((2, 4)))
    with pytest.raises(TypeError, match="cope must be a torch.Tensor"):
        pt.attention(q, k, v, causal=True, cope=[[0.0] * 8])


def test_attention_research_parameters_match_torch_autograd():
    # Kerple's bias written in PyTorch from the paper (reference.kerple_bias's formula), added
    # to eager attention: posenc's gradient of the parameters equals autograd's
    q, k, v = inputs(19)
    a = torch.tensor([[0.3, -1.0, 0.5, 2.0], [1.0, 0.2, -0.7, 0.0]], dtype=torch.float64,
                     requires_grad=True)
    out = pt.attention(q, k, v, causal=True, kerple=a)
    (out.sum()).backward()
    got = a.grad.clone()
    a.grad = None
    qpos, kpos = torch.arange(2, 7), torch.arange(7)
    d = (qpos[:, None] - kpos[None, :]).abs().double()
    r1 = torch.nn.functional.softplus(a[0])[:, None, None]
    r2 = torch.nn.functional.softplus(a[1])[:, None, None]
    want = torch_attention(q, k, v, causal=True, bias=-r1 * torch.log1p(r2 * d))
    want.sum().backward()
    assert torch.max(torch.abs(out - want)) <= 1e-13
    assert torch.max(torch.abs(got - a.grad)) <= 1e-12


def test_attention_matches_torch_autograd_float32():
    g = torch.Generator().manual_seed(13)
    T, S, Hq, Hkv, D = 16, 16, 4, 2, 32
    q = torch.randn(T, Hq, D, generator=g, requires_grad=True)
    k = torch.randn(S, Hkv, D, generator=g, requires_grad=True)
    v = torch.randn(S, Hkv, D, generator=g, requires_grad=True)
    slopes = posenc.alibi_slopes(Hq)
    qpos, kpos = torch.arange(T), torch.arange(S)
    bias = torch.tensor(-slopes)[:, None, None] * (qpos[:, None] - kpos[None, :]).double()
    out = pt.attention(q, k, v, causal=True, alibi=True)
    dout = torch.randn(T, Hq, D, generator=g)
    (out * dout).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch_attention(q64, k64, v64, causal=True, bias=bias)
    (want * dout.double()).sum().backward()
    # float32 against float64: a few (D + S) u_f times the score size (|s| <~ 4 |q||k|)
    smax = float(q.abs().max() * k.abs().max() * math.sqrt(D))
    tol = 4 * (D + S) * ref.U32 * max(1.0, smax)
    assert torch.max(torch.abs(out.double() - want)) <= tol * float(v.abs().max())
    for got, t in zip(grads, (q64, k64, v64)):
        assert torch.max(torch.abs(got.double() - t.grad)) <= tol * float(t.grad.abs().max() + 1)


def test_training_step_reduces_the_loss():
    # a step of SGD on q, k, v through posenc.torch.attention lowers a regression loss
    g = torch.Generator().manual_seed(14)
    T, H, D = 8, 2, 16
    params = [torch.randn(T, H, D, generator=g, requires_grad=True) for _ in range(3)]
    target = torch.randn(T, H, D, generator=g)
    opt = torch.optim.SGD(params, lr=0.5)

    def loss():
        out = pt.attention(*params, causal=True, alibi=True)
        return ((out - target) ** 2).mean()

    before = loss()
    opt.zero_grad()
    before.backward()
    opt.step()
    assert loss().item() < before.item()


def test_attention_bfloat16_returns_bfloat16():
    q, k, v = (t.detach().to(torch.bfloat16).requires_grad_() for t in inputs(15))
    out = pt.attention(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert q.grad.dtype == torch.bfloat16


def test_batched_attention_gradcheck_with_per_sequence_padding():
    g = torch.Generator().manual_seed(16)
    mk = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g, requires_grad=True)  # noqa
    q, k, v = mk(2, 4, 4, 8), mk(2, 6, 2, 8), mk(2, 6, 2, 8)
    pad = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    kpos = torch.tensor([[0, 1, 2, 3, 4, 5], [-1, -1, 0, 1, 2, 3]])  # left padding: ids -1
    cfg = posenc.RopeConfig(head_dim=8)
    assert torch.autograd.gradcheck(
        lambda q, k, v: pt.attention(q, k, v, causal=True, key_padding=pad, k_positions=kpos,
                                     rope=cfg, alibi=True),
        (q, k, v),
    )
