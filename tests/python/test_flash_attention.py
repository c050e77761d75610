"""posenc.torch.apply_rotary_emb held to FlashAttention's apply_rotary_emb: the in-place
semantics of flash_attn/layers/rotary.py (ApplyRotaryEmb) and golden values of its reference
apply_rotary_emb_torch (tests/golden/flash_attention, scripts/golden/flash_attention.py).

Error bound used throughout (u = 2^-24 in float32, 2^-53 in float64). For one output pair
element posenc computes fl(a - fl(b)) with a fused multiply-add (forward: u' = fma(u, c,
-(v s)), v' = fma(u, s, v c); backward: u' = fma(u, c, v s), v' = fma(v, c, -(u s))), where
FlashAttention's reference computes fl(fl(a) + fl(b')) (x * cos + rotate_half(x) * sin, and
autograd's g * cos + rotate_half^T(g * sin), with b' = -b or b). Writing fl(t) = t (1 + e),
|e| <= u, with y = a - b the exact value:
    posenc  p = (y - d_b)(1 + e1),            |d_b| <= u |b|
    FA      r = (y + d_a - d_b)(1 + e2),      |d_a| <= u |a|
    p - r = -d_a + e1 (y - d_b) - e2 (y + d_a - d_b),
so |p - r| <= u |a| + 2 u |y| + 2 u^2 (|a| + |b|) <= (3 u + 2 u^2) (|a| + |b|): the d_b
terms cancel, the same rounded product sits in both. Against the exact rotation of the same
(rounded) inputs, |p - y| <= u |b| + u |y| + u^2 |b| <= (2 u + u^2) (|a| + |b|). |a| + |b|
is the rotation of |x| by |cos|, |sin| (`magnitude` below). Bit-identical where no product
rounds: channels past rotary_dim (copied) and rows with cos = 1, sin = 0 (position 0).
"""

import json
import pathlib

import numpy as np
import pytest
import torch  # scripts/install-deps installs python3-torch: without it these tests fail

import posenc.torch as pt

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden" / "flash_attention"
UNIT = {torch.float32: 2.0**-24, torch.float64: 2.0**-53}
# unit roundoff of the storage type a float32 result is rounded to once
STORE_UNIT = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
# half the smallest subnormal: the absolute rounding error near zero
STORE_TINY = {torch.bfloat16: 2.0**-134, torch.float16: 2.0**-25, torch.float32: 2.0**-150}


def positions_of(shape_btd, seqlen_offsets, cu_seqlens):
    """(tokens,) cos/sin row of each token, tokens in x's order (flattened B, T or total)."""
    if cu_seqlens is None:
        B, T = shape_btd[:2]
        offs = np.broadcast_to(np.asarray(seqlen_offsets), (B,))
        return np.concatenate([o + np.arange(T) for o in offs])
    cu = np.asarray(cu_seqlens)
    offs = np.broadcast_to(np.asarray(seqlen_offsets), (len(cu) - 1,))
    return np.concatenate([offs[b] + np.arange(cu[b + 1] - cu[b]) for b in range(len(cu) - 1)])


def pair_index(D, R, interleaved):
    """(first, second) channel index arrays of the R/2 rotated pairs."""
    if interleaved:
        return np.arange(0, R, 2), np.arange(1, R, 2)
    return np.arange(R // 2), np.arange(R // 2, R)


def rotate_exact(x, cos, sin, interleaved, seqlen_offsets=0, cu_seqlens=None, inverse=False):
    """The rotation in float64 numpy (exact products of float32 inputs, one rounding per sum;
    float64 inputs: (2 u + u^2)(|a| + |b|) off): independent of posenc's kernel.
    Returns (y, magnitude), magnitude = |a| + |b| per element."""
    x = np.asarray(x, dtype=np.float64)
    cos, sin = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    R = 2 * cos.shape[1]
    pos = positions_of(x.shape, seqlen_offsets, cu_seqlens)
    xs = x.reshape(len(pos), x.shape[-2], x.shape[-1])
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    if inverse:
        s = -s
    i, j = pair_index(x.shape[-1], R, interleaved)
    u, v = xs[..., i], xs[..., j]
    y, mag = xs.copy(), np.zeros_like(xs)
    y[..., i], y[..., j] = u * c - v * s, v * c + u * s
    mag[..., i], mag[..., j] = abs(u * c) + abs(v * s), abs(v * c) + abs(u * s)
    return y.reshape(x.shape), mag.reshape(x.shape)


def tables(rows, R, dtype):
    inv = 10000.0 ** (-np.arange(0, R, 2) / R)
    ang = np.arange(rows)[:, None] * inv[None, :]
    return torch.from_numpy(np.cos(ang)).to(dtype), torch.from_numpy(np.sin(ang)).to(dtype)


def assert_near_exact(got, x, cos, sin, interleaved, seqlen_offsets=0, cu_seqlens=None,
                      inverse=False):
    """got (any float dtype) within the derived bound of the exact rotation: computed in the
    compute dtype (float64 for float64 x, float32 otherwise), then rounded once to got.dtype."""
    y, mag = rotate_exact(x.detach().double(), cos.double(), sin.double(), interleaved,
                          seqlen_offsets, cu_seqlens, inverse)
    u, w = UNIT[torch.float64 if got.dtype == torch.float64 else torch.float32], UNIT[torch.float64]
    # posenc against the exact value, plus rotate_exact's own float64 error (same form)
    tol = (2 * u + u * u + 2 * w + w * w) * mag
    if got.dtype in (torch.bfloat16, torch.float16):
        tol = tol + STORE_UNIT[got.dtype] * (np.abs(y) + tol) + STORE_TINY[got.dtype]
    err = np.abs(got.detach().double().numpy() - y)
    ratio = np.max(err / np.maximum(tol, 1e-300))
    assert np.all(err <= tol * (1 + 2.0**-40)), f"max err/tol {ratio}"


# ---- FlashAttention's in-place semantics ---------------------------------------------------

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
DTYPE_IDS = ["f32", "f64", "bf16", "f16"]


def make_x(layout, dtype, gen, B=2, T=6, H=3, D=16):
    """A leaf that requires grad: contiguous (B, T, H, D), or the same shape with the heads
    outermost in memory (transposed, not contiguous)."""
    if layout == "contiguous":
        x = torch.randn(B, T, H, D, generator=gen, dtype=torch.float64)
    else:
        x = torch.randn(B, H, T, D, generator=gen, dtype=torch.float64).transpose(1, 2)
    return x.to(dtype).detach().requires_grad_()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("R", [16, 8])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_inplace_on_a_leaf_that_requires_grad(dtype, interleaved, R, layout):
    gen = torch.Generator().manual_seed(7)
    x = make_x(layout, dtype, gen)
    assert x.is_leaf and x.requires_grad
    x0 = x.detach().clone()
    cos, sin = tables(12, R, dtype)
    off = torch.tensor([0, 5], dtype=torch.int32)
    expect = pt.apply_rotary_emb(x0, cos, sin, interleaved=interleaved, seqlen_offsets=off)
    version, ptr, stride = x._version, x.data_ptr(), x.stride()

    out = pt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, inplace=True,
                              seqlen_offsets=off)
    # FlashAttention returns x unmarked: autograd hands back a view of x, same storage.
    assert out.data_ptr() == ptr and out.stride() == stride and out.shape == x.shape
    assert out.grad_fn is not None and x.is_leaf and x.grad_fn is None
    assert x._version == version  # the write is a kernel store, as FlashAttention's
    assert torch.equal(x.detach(), expect)  # x's values changed, same bits as out of place
    assert not torch.equal(x.detach(), x0)
    assert torch.equal(x.detach()[..., R:], x0[..., R:])
    assert_near_exact(out, x0, cos, sin, interleaved, off)

    g = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
    g0 = g.clone()
    out.backward(g)
    # backward: the inverse rotation of g, done in place on g (FlashAttention's inplace=True)
    assert_near_exact(x.grad, g0, cos, sin, interleaved, off, inverse=True)
    assert torch.equal(g, x.grad) and not torch.equal(g, g0)
    assert torch.equal(x.grad[..., R:], g0[..., R:])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_not_inplace_leaves_x_and_the_gradient_untouched(dtype, layout):
    gen = torch.Generator().manual_seed(8)
    x = make_x(layout, dtype, gen)
    x0 = x.detach().clone()
    cos, sin = tables(10, 12, torch.float32)  # float32 tables with any x, as FlashAttention
    out = pt.apply_rotary_emb(x, cos, sin, seqlen_offsets=3)
    assert torch.equal(x.detach(), x0) and x._version == 0
    assert out.data_ptr() != x.data_ptr() and out.dtype == dtype
    # laid out like torch.empty_like(x), as FlashAttention's output
    assert out.stride() == torch.empty_like(x).stride()
    assert_near_exact(out, x0, cos, sin, False, 3)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
    g0 = g.clone()
    out.backward(g)
    assert torch.equal(g, g0)
    assert_near_exact(x.grad, g0, cos, sin, False, 3, inverse=True)


@pytest.mark.parametrize("inplace", [False, True])
def test_varlen_leaf(inplace):
    # FlashAttention's varlen test: x_unpad (total, H, D) a leaf that requires grad.
    gen = torch.Generator().manual_seed(9)
    cu = torch.tensor([0, 4, 5, 11], dtype=torch.int32)
    x = torch.randn(11, 2, 16, generator=gen).to(torch.bfloat16).requires_grad_()
    x0 = x.detach().clone()
    cos, sin = tables(20, 16, torch.bfloat16)
    off = torch.tensor([0, 7, 2])
    out = pt.apply_rotary_emb(x, cos, sin, inplace=inplace, seqlen_offsets=off, cu_seqlens=cu,
                              max_seqlen=6)
    assert_near_exact(out, x0, cos, sin, False, off, cu)
    assert (out.data_ptr() == x.data_ptr()) == inplace
    assert torch.equal(x.detach(), out.detach() if inplace else x0)
    g = torch.randn(out.shape, generator=gen).to(torch.bfloat16)
    g0 = g.clone()
    out.backward(g)
    assert_near_exact(x.grad, g0, cos, sin, False, off, cu, inverse=True)
    assert torch.equal(g, x.grad if inplace else g0)


def test_inplace_inside_a_graph_and_with_an_expanded_gradient():
    gen = torch.Generator().manual_seed(10)
    y = torch.randn(1, 5, 2, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    cos, sin = tables(5, 8, torch.float64)
    x = y * 2.0  # not a leaf: the graph continues through x
    out = pt.apply_rotary_emb(x, cos, sin, inplace=True)
    assert out.data_ptr() == x.data_ptr()
    out.sum().backward()  # the gradient is an expanded tensor: rotated out of place
    ones = torch.ones(1, 5, 2, 8, dtype=torch.float64)
    want, mag = rotate_exact(ones, cos, sin, False, inverse=True)
    u = UNIT[torch.float64]  # posenc's and rotate_exact's errors, each (2 u + u^2) mag, times 2
    tol = 2 * (4 * u + 2 * u * u) * mag * (1 + 2.0**-40)
    assert np.all(np.abs(y.grad.numpy() - 2 * want) <= tol)
    assert torch.autograd.gradcheck(
        lambda t: pt.apply_rotary_emb(t * 1.0, cos, sin, interleaved=True, inplace=True),
        (y,),
    )


def test_inplace_refuses_an_expanded_x():
    cos, sin = tables(4, 8, torch.float32)
    x = torch.randn(1, 1, 1, 8).expand(2, 4, 3, 8)
    with pytest.raises(ValueError, match="x must not have elements sharing memory"):
        pt.apply_rotary_emb(x, cos, sin, inplace=True)


# ---- golden values of FlashAttention's apply_rotary_emb_torch ------------------------------

MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())


def test_golden_manifest_records_the_upstream():
    up = MANIFEST["upstream"]
    assert up["commit"] == "0251105a2fb19d2957484b7f023cd8c115286ced"
    assert up["function"].startswith("apply_rotary_emb_torch")
    assert len(MANIFEST["cases"]) == 14
    assert sum(p.stat().st_size for p in GOLDEN.iterdir()) < 1 << 20


def load_case(case):
    a = {k: torch.from_numpy(np.load(GOLDEN / f)) for k, f in case["files"].items()}
    off = case["seqlen_offsets"]
    off = torch.tensor(off) if isinstance(off, list) else off
    cu = case["cu_seqlens"]
    cu = None if cu is None else torch.tensor(cu, dtype=torch.int32)
    return a, off, cu


def check_against_golden(got, want, x, cos, sin, case, off, cu, inverse):
    """|got - want| <= (3 u + 2 u^2)(|a| + |b|) elementwise (module docstring); bit-identical
    past rotary_dim and in the rows of position 0 (cos = 1, sin = 0: no product rounds)."""
    u = UNIT[got.dtype]
    _, mag = rotate_exact(x, cos, sin, case["interleaved"], off, cu, inverse)
    err = np.abs(got.detach().double().numpy() - want.double().numpy())
    tol = (3 * u + 2 * u * u) * mag * (1 + 2.0**-40)
    ratio = np.max(err / np.maximum(tol, 1e-300))
    assert np.all(err <= tol), f"{case['name']}: max err/tol {ratio}"
    R = case["rotary_dim"]
    assert torch.equal(got[..., R:], want[..., R:])
    pos = positions_of(x.shape, off if not torch.is_tensor(off) else off.numpy(), cu)
    zero = torch.from_numpy(pos == 0)
    tokens = got.reshape(len(pos), *got.shape[-2:])
    assert torch.equal(tokens[zero], want.reshape(tokens.shape)[zero])
    return int(zero.sum())


@pytest.mark.parametrize("case", MANIFEST["cases"], ids=[c["name"] for c in MANIFEST["cases"]])
@pytest.mark.parametrize("inplace", [False, True])
def test_golden_flash_attention_reference(case, inplace):
    a, off, cu = load_case(case)
    x = a["x"].clone().requires_grad_()
    assert str(x.dtype) == "torch." + case["dtype"]
    out = pt.apply_rotary_emb(x, a["cos"], a["sin"], interleaved=case["interleaved"],
                              inplace=inplace, seqlen_offsets=off, cu_seqlens=cu)
    check_against_golden(out, a["out"], a["x"], a["cos"], a["sin"], case, off, cu, False)
    g = a["grad_out"].clone()
    out.backward(g)
    # autograd's gradient through the reference: g * cos + rotate_half^T(g * sin), the same
    # two products and one sum per element as the forward, so the same bound
    check_against_golden(x.grad, a["grad_x"], a["grad_out"], a["cos"], a["sin"], case, off, cu,
                         True)


def test_golden_covers_position_zero_rows():
    # the bit-identical rows are really there (the offset-0 cases start at position 0)
    rows = 0
    for case in MANIFEST["cases"]:
        a, off, cu = load_case(case)
        pos = positions_of(a["x"].shape, off.numpy() if torch.is_tensor(off) else off, cu)
        rows += int((pos == 0).sum())
    assert rows >= 10


# ---- the packed in-place wrappers: apply_rotary_emb_qkv_, apply_rotary_emb_kv_ --------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("packing", ["qkv3", "gqa"])
@pytest.mark.parametrize("separate_k", [False, True])
def test_qkv_inplace_rotates_q_and_k_only(dtype, packing, separate_k):
    # FlashAttention's apply_rotary_emb_qkv_: q and k of the packed tensor rotated in place (k
    # by cos_k, sin_k when given, as xPos does), v untouched, rows from seqlen_offsets; the
    # result is qkv's storage; the gradient of a qkv made from a leaf rotates back on q and k
    # and passes through on v. Each part is held to the exact rotation (rotate_exact).
    gen = torch.Generator().manual_seed(11)
    B, T, D, R, hq, hk = 2, 5, 16, 12, 4, 2
    shape = (B, T, 3, hq, D) if packing == "qkv3" else (B, T, hq + 2 * hk, D)
    leaf = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
    qkv = leaf.clone()
    before = qkv.detach().clone()
    cos, sin = tables(T + 3, R, torch.float32)
    cos_k, sin_k = (cos * 0.5, sin * 0.5) if separate_k else (None, None)
    kw = dict(num_heads_q=None if packing == "qkv3" else hq)
    out = pt.apply_rotary_emb_qkv_(qkv, cos, sin, cos_k, sin_k, seqlen_offsets=3, **kw)
    assert out.data_ptr() == qkv.data_ptr()

    def parts(t):
        if packing == "qkv3":
            return t[:, :, 0], t[:, :, 1], t[:, :, 2]
        return t[:, :, :hq], t[:, :, hq:hq + hk], t[:, :, hq + hk:]

    q0, k0, v0 = parts(before)
    q1, k1, v1 = parts(qkv.detach())
    assert_near_exact(q1, q0, cos, sin, False, seqlen_offsets=3)
    assert_near_exact(k1, k0, cos if cos_k is None else cos_k, sin if sin_k is None else sin_k,
                      False, seqlen_offsets=3)
    assert torch.equal(v1, v0)
    g = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
    out.backward(g.clone())
    gq, gk, gv = parts(g)
    dq, dk, dv = parts(leaf.grad)
    assert_near_exact(dq, gq, cos, sin, False, seqlen_offsets=3, inverse=True)
    assert_near_exact(dk, gk, cos if cos_k is None else cos_k, sin if sin_k is None else sin_k,
                      False, seqlen_offsets=3, inverse=True)
    assert torch.equal(dv, gv)


@pytest.mark.parametrize("interleaved", [False, True])
def test_kv_inplace_rotates_k_only(interleaved):
    gen = torch.Generator().manual_seed(12)
    B, T, H, D = 2, 6, 3, 16
    leaf = torch.randn(B, T, 2, H, D, generator=gen, dtype=torch.float64).requires_grad_()
    kv = leaf.clone()
    before = kv.detach().clone()
    cos, sin = tables(T + 2, D, torch.float64)
    offs = torch.tensor([0, 2])
    out = pt.apply_rotary_emb_kv_(kv, cos, sin, interleaved=interleaved, seqlen_offsets=offs)
    assert out.data_ptr() == kv.data_ptr()
    assert_near_exact(kv.detach()[:, :, 0], before[:, :, 0], cos, sin, interleaved,
                      seqlen_offsets=offs.numpy())
    assert torch.equal(kv.detach()[:, :, 1], before[:, :, 1])
    g = torch.randn(B, T, 2, H, D, generator=gen, dtype=torch.float64)
    out.backward(g.clone())
    assert_near_exact(leaf.grad[:, :, 0], g[:, :, 0], cos, sin, interleaved,
                      seqlen_offsets=offs.numpy(), inverse=True)
    assert torch.equal(leaf.grad[:, :, 1], g[:, :, 1])


def test_packed_wrappers_refuse_wrong_shapes():
    cos, sin = tables(4, 8, torch.float32)
    with pytest.raises(ValueError, match="num_heads_q is required"):
        pt.apply_rotary_emb_qkv_(torch.zeros(1, 4, 6, 8), cos, sin)
    with pytest.raises(ValueError, match="num_heads_q"):
        pt.apply_rotary_emb_qkv_(torch.zeros(1, 4, 5, 8), cos, sin, num_heads_q=2)
    with pytest.raises(ValueError, match=r"\(B, T, 3, H, D\)"):
        pt.apply_rotary_emb_qkv_(torch.zeros(1, 4, 2, 2, 8), cos, sin)
    with pytest.raises(ValueError, match=r"\(B, T, 2, H, D\)"):
        pt.apply_rotary_emb_kv_(torch.zeros(1, 4, 3, 2, 8), cos, sin)
