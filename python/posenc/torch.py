"""posenc.torch: posenc's kernels as torch.autograd.Functions (CPU tensors).

    from posenc.torch import apply_rotary_emb, RotaryEmbedding, attention

Tensors share memory with the NumPy arrays the C++ kernels read (no copy for contiguous
float32/float64 CPU tensors). bfloat16 and float16 are computed in float32 and returned in
their dtype; attention reads q, k, v of one 16-bit dtype in place (no float32 copy) and with
products="bf16" runs bfloat16 products (posenc.attention). Backward passes run in C++: RoPE's is the inverse rotation (the sine negated),
attention's is the engine's FlashAttention-2 backward.
"""

from __future__ import annotations

import numpy as np
import torch as _torch

from . import (_NAMED, _attention_opts, _named_opts, _posenc,
               _warn_nonfinite, _with_named_keywords)

__all__ = [
    "apply_rotary_emb", "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_", "apply_rope",
    "RotaryEmbedding", "attention",
]

_HALF_TYPES = (_torch.bfloat16, _torch.float16)


def _compute_dtype(t, name):
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU tensor, got device {t.device}")
    if t.dtype == _torch.float64:
        return _torch.float64
    if t.dtype == _torch.float32 or t.dtype in _HALF_TYPES:
        return _torch.float32
    raise TypeError(f"{name} must be float32, float64, bfloat16 or float16, got {t.dtype}")


def _np(t, dtype):
    """A NumPy view of t in dtype (a copy only when the dtype or layout differs)."""
    return t.detach().to(dtype).contiguous().numpy()


def _words(t):
    """A NumPy view of a 16-bit tensor's words, no copy when contiguous: float16 as float16,
    bfloat16 as uint16 bits (NumPy has no bfloat16; posenc reads them with kv_dtype "bf16")."""
    t = t.detach().contiguous()
    if t.dtype == _torch.bfloat16:
        return t.view(_torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _ints(v):
    if isinstance(v, _torch.Tensor):
        return v.detach().cpu().numpy()
    return v


def _overlaps(t):
    # torch's check for in-place writes: 1 = some elements share memory (an expanded tensor).
    return _torch._debug_has_internal_overlap(t) == 1


def _rotate_tables(t, cos, sin, interleaved, seqlen_offsets, cu_seqlens, inverse, inplace, name):
    """FlashAttention's apply_rotary (flash_attn/ops/triton/rotary.py) over posenc's kernel.

    inplace: t's storage is rotated and t itself is returned; the write is a kernel store, as
    FlashAttention's Triton kernel's is: autograd is not told (t's version counter stays), so
    it works inside a Function's forward and backward on any t, a leaf that requires grad
    included. Otherwise a new tensor laid out like torch.empty_like(t) (t's strides when t is
    dense); channels [rotary_dim, D) are copied, or untouched in place.
    """
    cd = _compute_dtype(t, name)
    _compute_dtype(cos, "cos")
    _compute_dtype(sin, "sin")
    cn, sn = _np(cos, cd), _np(sin, cd)
    kw = dict(interleaved=interleaved, seqlen_offsets=seqlen_offsets, cu_seqlens=cu_seqlens,
              inverse=inverse)
    if inplace and t.dtype == cd and t.is_contiguous():
        _posenc._rotary_tables(t.detach().numpy(), cn, sn, inplace=True, **kw)
        return t
    res = _torch.from_numpy(_posenc._rotary_tables(_np(t, cd), cn, sn, **kw)).to(t.dtype)
    if inplace:
        t.data.copy_(res)  # .data: the storage, without bumping t's version counter
        return t
    if t.is_contiguous():
        return res
    out = _torch.empty_like(t)
    out.copy_(res)
    return out


class _RotaryTables(_torch.autograd.Function):
    # FlashAttention's ApplyRotaryEmb (flash_attn/layers/rotary.py), semantics for semantics:
    # inplace returns x unmarked (no ctx.mark_dirty), so autograd hands the caller a view of x
    # (same storage, its own grad_fn) and x, even a leaf that requires grad, is left as it is
    # in the graph; the backward with inplace=True rotates the incoming gradient in place and
    # returns it (the caller's tensor passed to out.backward(g) is changed, as in FlashAttention).
    @staticmethod
    def forward(ctx, x, cos, sin, interleaved, inplace, seqlen_offsets, cu_seqlens):
        if inplace and _overlaps(x):
            raise ValueError(
                "x must not have elements sharing memory (an expanded tensor) for inplace=True; "
                "pass x.clone() or inplace=False"
            )
        out = _rotate_tables(x, cos, sin, interleaved, seqlen_offsets, cu_seqlens,
                             inverse=False, inplace=inplace, name="x")
        ctx.save_for_backward(cos, sin)
        ctx.args = (interleaved, inplace, seqlen_offsets, cu_seqlens)
        return out

    @staticmethod
    def backward(ctx, grad):
        # backward of "out = R(theta) x": dx = R(-theta) grad, the forward kernel inverted.
        cos, sin = ctx.saved_tensors
        interleaved, inplace, seqlen_offsets, cu_seqlens = ctx.args
        # An expanded gradient (out.sum().backward()) cannot be rotated in place: a new tensor.
        g = _rotate_tables(grad, cos, sin, interleaved, seqlen_offsets, cu_seqlens,
                           inverse=True, inplace=inplace and not _overlaps(grad), name="grad")
        return g, None, None, None, None, None, None


def apply_rotary_emb(
    x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
    max_seqlen=None,
):
    """FlashAttention's flash_attn.layers.rotary.apply_rotary_emb on the CPU.

    x: (batch, seqlen, nheads, headdim), or (total_seqlen, nheads, headdim) with cu_seqlens
    (batch + 1,) int32/int64. cos, sin: (seqlen_rotary, rotary_dim / 2), rotary_dim <= headdim;
    may be float32 while x is bfloat16/float16. interleaved: rotate pairs (0, 1), (2, 3), ...
    (GPT-J) instead of (i, i + rotary_dim / 2) (NeoX). seqlen_offsets: int or (batch,) tensor:
    token t of sequence b uses row seqlen_offsets[b] + t of cos and sin (KV cache).
    max_seqlen: accepted for the signature; the rows needed are checked against cos instead
    (a row past the table is an error here; FlashAttention's kernel reads it as cos 1, sin 0).
    Returns (batch, seqlen, nheads, headdim) laid out like x; channels [rotary_dim, headdim)
    are passed through. Differentiable in x (cos, sin get no gradient, as in FlashAttention).

    inplace=True, as FlashAttention: x's storage is rotated (x's values change) and what is
    returned is autograd's view of x (out.data_ptr() == x.data_ptr(), out is not x). Autograd
    is not told of the write (no mark_dirty, x._version unchanged), so x may be a leaf that
    requires grad, and x.grad after out.backward(g) is R(-theta) g; but a tensor that an
    earlier op saved from x for its own backward is not checked either. The backward rotates
    g in place (the caller's g is changed) unless g is an expanded tensor. x must not be
    expanded (elements sharing memory).

    Arithmetic: float32 for float32, bfloat16 and float16 x (rounded to x's dtype once, like
    FlashAttention's kernel, which computes in float32 and stores), float64 for float64 x
    (FlashAttention computes float64 x in float32). Each output is one fused multiply-add,
    u' = fma(u, c, -(v s)), v' = fma(u, s, v c), where the target has FMA.
    """
    del max_seqlen
    return _RotaryTables.apply(
        x, cos, sin, bool(interleaved), bool(inplace), _ints(seqlen_offsets), _ints(cu_seqlens)
    )


def _qk_views(qkv, num_heads_q):
    """The q and k parts of a packed qkv, as views of it (FlashAttention's _apply_rotary_emb_qkv):
    (B, T, 3, H, D) -> qkv[:, :, 0], qkv[:, :, 1]; (B, T, Hq + 2 Hk, D) with num_heads_q ->
    qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hk]."""
    if qkv.dim() == 5:
        if qkv.shape[2] != 3:
            raise ValueError(f"qkv must have shape (B, T, 3, H, D), got {tuple(qkv.shape)}")
        return qkv[:, :, 0], qkv[:, :, 1]
    if qkv.dim() != 4:
        raise ValueError(
            "qkv must have shape (B, T, 3, H, D) or (B, T, Hq + 2 Hk, D) with num_heads_q, got "
            f"{tuple(qkv.shape)}")
    if num_heads_q is None:
        raise ValueError("num_heads_q is required for a 4-D qkv (B, T, Hq + 2 Hk, D)")
    hq = int(num_heads_q)
    rest = qkv.shape[2] - hq
    if hq < 1 or rest < 2 or rest % 2 != 0:
        raise ValueError(
            f"qkv's {qkv.shape[2]} heads must be num_heads_q + 2 Hk with Hk >= 1, got "
            f"num_heads_q = {num_heads_q}")
    return qkv[:, :, :hq], qkv[:, :, hq:hq + rest // 2]


class _RotaryQKV(_torch.autograd.Function):
    # FlashAttention's ApplyRotaryEmbQKV_ (flash_attn/layers/rotary.py): q and k of qkv rotated
    # in place (k by cos_k, sin_k when given), v untouched, qkv returned unmarked; the backward
    # rotates dqkv's q and k parts back in place and returns it.
    @staticmethod
    def forward(ctx, qkv, cos, sin, cos_k, sin_k, interleaved, seqlen_offsets, num_heads_q):
        if _overlaps(qkv):
            raise ValueError("qkv must not have elements sharing memory (an expanded tensor)")
        q, k = _qk_views(qkv, num_heads_q)
        ck = cos if cos_k is None else cos_k
        sk = sin if sin_k is None else sin_k
        _rotate_tables(q, cos, sin, interleaved, seqlen_offsets, None, inverse=False, inplace=True,
                       name="qkv")
        _rotate_tables(k, ck, sk, interleaved, seqlen_offsets, None, inverse=False, inplace=True,
                       name="qkv")
        ctx.save_for_backward(cos, sin, ck, sk)
        ctx.args = (interleaved, seqlen_offsets, num_heads_q)
        return qkv

    @staticmethod
    def backward(ctx, dqkv):
        cos, sin, ck, sk = ctx.saved_tensors
        interleaved, seqlen_offsets, num_heads_q = ctx.args
        if _overlaps(dqkv):
            dqkv = dqkv.clone()  # an expanded gradient cannot be rotated in place
        dq, dk = _qk_views(dqkv, num_heads_q)
        _rotate_tables(dq, cos, sin, interleaved, seqlen_offsets, None, inverse=True, inplace=True,
                       name="grad")
        _rotate_tables(dk, ck, sk, interleaved, seqlen_offsets, None, inverse=True, inplace=True,
                       name="grad")
        return dqkv, None, None, None, None, None, None, None


def apply_rotary_emb_qkv_(
    qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False, seqlen_offsets=0, num_heads_q=None,
):
    """FlashAttention's flash_attn.layers.rotary.apply_rotary_emb_qkv_ on the CPU: q and k of a
    packed qkv rotated in place.

    qkv: (batch, seqlen, 3, nheads, headdim), or (batch, seqlen, num_heads_q + 2 num_heads_k,
    headdim) with num_heads_q (GQA / MQA). cos, sin: (seqlen_rotary, rotary_dim / 2) for q, and
    for k unless cos_k, sin_k are given (xPos's scaled tables). seqlen_offsets: int or (batch,).
    Returns qkv (autograd's view of it, as apply_rotary_emb(inplace=True)); v and the channels
    past rotary_dim are untouched. The backward rotates the gradient's q and k parts back in
    place. Arithmetic and bounds: apply_rotary_emb's.
    """
    return _RotaryQKV.apply(
        qkv, cos, sin, cos_k, sin_k, bool(interleaved), _ints(seqlen_offsets), num_heads_q
    )


class _RotaryKV(_torch.autograd.Function):
    # FlashAttention's ApplyRotaryEmbKV_: k = kv[:, :, 0] rotated in place, v untouched.
    @staticmethod
    def forward(ctx, kv, cos, sin, interleaved, seqlen_offsets):
        if kv.dim() != 5 or kv.shape[2] != 2:
            raise ValueError(f"kv must have shape (B, T, 2, H, D), got {tuple(kv.shape)}")
        if _overlaps(kv):
            raise ValueError("kv must not have elements sharing memory (an expanded tensor)")
        _rotate_tables(kv[:, :, 0], cos, sin, interleaved, seqlen_offsets, None, inverse=False,
                       inplace=True, name="kv")
        ctx.save_for_backward(cos, sin)
        ctx.args = (interleaved, seqlen_offsets)
        return kv

    @staticmethod
    def backward(ctx, dkv):
        cos, sin = ctx.saved_tensors
        interleaved, seqlen_offsets = ctx.args
        if _overlaps(dkv):
            dkv = dkv.clone()
        _rotate_tables(dkv[:, :, 0], cos, sin, interleaved, seqlen_offsets, None, inverse=True,
                       inplace=True, name="grad")
        return dkv, None, None, None, None


def apply_rotary_emb_kv_(kv, cos, sin, interleaved=False, seqlen_offsets=0):
    """FlashAttention's flash_attn.layers.rotary.apply_rotary_emb_kv_ on the CPU: k of a packed
    kv (batch, seqlen, 2, nheads, headdim) rotated in place, v untouched; returns kv. cos, sin:
    (seqlen_rotary, rotary_dim / 2); seqlen_offsets: int or (batch,). The backward rotates the
    gradient's k part back in place."""
    return _RotaryKV.apply(kv, cos, sin, bool(interleaved), _ints(seqlen_offsets))


class _ApplyRope(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions, cfg, layout, angle, seqlen_offsets, cu_seqlens, seq_len):
        cd = _compute_dtype(x, "x")
        out = _posenc.apply_rope(
            _np(x, cd), positions, cfg=cfg, layout=layout, angle=angle,
            seqlen_offsets=seqlen_offsets, cu_seqlens=cu_seqlens, seq_len=seq_len,
        )
        ctx.args = (positions, cfg, layout, angle, seqlen_offsets, cu_seqlens, seq_len)
        return _torch.from_numpy(out).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        positions, cfg, layout, angle, seqlen_offsets, cu_seqlens, seq_len = ctx.args
        cd = _compute_dtype(grad, "grad")
        # Forward y = a R(p) x, so dL/dx = a R(p)^T dL/dy: the same kernel, sine negated.
        g = _posenc.apply_rope(
            _np(grad, cd), positions, cfg=cfg, layout=layout, angle=angle,
            seqlen_offsets=seqlen_offsets, cu_seqlens=cu_seqlens, inverse=True,
            seq_len=seq_len,
        )
        return _torch.from_numpy(g).to(grad.dtype), None, None, None, None, None, None, None


def apply_rope(
    x, positions=None, *, cfg, layout="half", angle="exact", seqlen_offsets=0, cu_seqlens=None,
    seq_len=None,
):
    """posenc.apply_rope on a tensor, differentiable in x (see posenc.apply_rope)."""
    positions = _ints(positions)
    if seq_len is None and positions is not None:
        p = np.asarray(positions)
        seq_len = int(p.max()) + 1 if p.size else 0
    return _ApplyRope.apply(
        x, positions, cfg, layout, angle, _ints(seqlen_offsets), _ints(cu_seqlens), seq_len
    )


class RotaryEmbedding(_torch.nn.Module):
    """RoPE for a model's q and k from a posenc.RopeConfig (every HF scaling, exact angles).

    forward(q, k, positions=None, seqlen_offsets=0) -> (q', k'): q (B, T, Hq, D), k (B, T, Hk,
    D) (or (total, H, D) with cu_seqlens); positions (B, T) or (T,); None = seqlen_offsets + t.
    """

    def __init__(self, cfg, layout="half", angle="exact"):
        super().__init__()
        from . import RopeConfig

        if not isinstance(cfg, RopeConfig):
            raise TypeError(f"cfg must be a posenc.RopeConfig, got {type(cfg).__name__}")
        self.cfg, self.layout, self.angle = cfg, layout, angle

    def forward(self, q, k, positions=None, seqlen_offsets=0, cu_seqlens=None, seq_len=None):
        kw = dict(
            cfg=self.cfg, layout=self.layout, angle=self.angle, seqlen_offsets=seqlen_offsets,
            cu_seqlens=cu_seqlens, seq_len=seq_len,
        )
        return apply_rope(q, positions, **kw), apply_rope(k, positions, **kw)

    def extra_repr(self):
        return f"{self.cfg!r}, layout={self.layout!r}, angle={self.angle!r}"


# The float64 tensor parameters (dtype "tensor64"): passed in float64 whatever q's dtype.
_WIDE = {p["name"] for d in _NAMED for p in d["params"] if p["dtype"].endswith("tensor64")}
# The schemes whose positions come from the content (posenc.schemes(): CoPE), on a float64 path of
# their own: 16-bit q, k, v are widened for them.
_CONTENT = {d["name"] for d in _NAMED if d["enters_at"].startswith("content-dependent")}


class _Attention(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, opts, *named):
        cd = _compute_dtype(q, "q")
        for t, name in ((k, "k"), (v, "v")):
            if _compute_dtype(t, name) != cd:
                raise TypeError(f"{name} must have the dtype of q ({q.dtype}), got {t.dtype}")
        o = dict(opts)
        # The named schemes' tensors (torch tensors, autograd inputs after opts) into their slots.
        keys = o.pop("_named_keys", [])
        o["named"] = [(n, g, {}) for n, g, _ in o.get("named", [])]
        for (i, pname), t in zip(keys, named):  # a float64 parameter in float64 (tensor64)
            o["named"][i][2][pname] = _np(t, _torch.float64 if pname in _WIDE else cd)
        ctx.named = list(zip(keys, named))
        if sinks is not None:
            o["sinks"] = _np(sinks, cd)
        # q, k, v of one 16-bit dtype: read in place (no float32 copy); the backward widens them.
        # A scheme whose positions come from the content (CoPE) runs its own float64 path on
        # float inputs.
        own = any(n in _CONTENT for n, _, _ in o["named"])
        words = q.dtype in _HALF_TYPES and k.dtype == q.dtype and v.dtype == q.dtype and not own
        if words:
            o16 = dict(o, kv_dtype="bf16" if q.dtype == _torch.bfloat16 else "f16")
            out, lse = _posenc._attention_forward(_words(q), _words(k), _words(v), o16, True)
            qn = kn = vn = None
        else:
            qn, kn, vn = _np(q, cd), _np(k, cd), _np(v, cd)
            out, lse = _posenc._attention_forward(qn, kn, vn, o, True)
        ctx.np_inputs = (qn, kn, vn, out, lse, o)
        # Saved for autograd's version check: the NumPy views above may share their memory.
        ctx.save_for_backward(q, k, v)
        ctx.dtypes = (q.dtype, k.dtype, v.dtype)
        ctx.cd = cd
        ctx.sinks = sinks
        out_t = _torch.from_numpy(out).to(q.dtype)
        lse_t = _torch.from_numpy(lse)
        ctx.mark_non_differentiable(lse_t)
        return out_t, lse_t

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v = ctx.saved_tensors  # raises if q, k or v were modified in place
        qn, kn, vn, out, lse, o = ctx.np_inputs
        if qn is None:  # read as 16-bit words by the forward: widened here
            qn, kn, vn = _np(q, ctx.cd), _np(k, ctx.cd), _np(v, ctx.cd)
        # The backward runs float32 products on the inputs as stored.
        o = {key: val for key, val in o.items() if key != "products"}
        sinks = ctx.sinks
        want = ctx.needs_input_grad  # q, k, v, sinks, opts, the named schemes' tensors
        params = want[3] or any(want[5:])
        g = _posenc._attention_backward(qn, kn, vn, out, lse, _np(dout, ctx.cd), o, params)
        qd, kd, vd = ctx.dtypes
        res = [
            _torch.from_numpy(g["dq"]).to(qd) if want[0] else None,
            _torch.from_numpy(g["dk"]).to(kd) if want[1] else None,
            _torch.from_numpy(g["dv"]).to(vd) if want[2] else None,
            None, None,
        ]
        if want[3]:
            res[3] = _torch.from_numpy(g["dsinks"]).to(sinks.dtype)
        for j, ((_, pname), t) in enumerate(ctx.named):
            d = g.get("d" + pname)
            res.append(_torch.from_numpy(d).to(t.dtype) if want[5 + j] and d is not None
                       else None)
        return tuple(res)


def attention(
    q, k, v, *, causal=False, scale=None, rope=None, rope_layout="half", rope_angle="exact",
    rope_seq_len=None, keys_rotated=False,
    q_positions=None, k_positions=None, key_padding=None, cu_seqlens=None, window=None,
    return_lse=False,
    products="f32", sinks=None,
    **named,
):
    """posenc.attention on tensors, differentiable in q, k, v and the position parameters:
    the tensors of the schemes reached by name (their keywords below; a switch that takes True
    or a tensor is differentiable given the tensor) and the attention-sink
    logits sinks (Hq,) (gpt-oss's learned sinks). The q/k transforms and the
    query temperature have no parameters (their options pass through).
    Arguments as posenc.attention; lse is returned float32/float64 and not differentiable.
    bfloat16 or float16 q, k, v (one dtype) are read in place, without a float32 copy; products
    "bf16" rounds the products' operands to bfloat16 (posenc.attention); the backward runs
    float32 products on the stored inputs."""
    if sinks is not None and not isinstance(sinks, _torch.Tensor):
        raise TypeError(f"sinks must be a torch.Tensor, got {type(sinks).__name__}")
    opts = _attention_opts(
        causal, scale, rope, rope_layout, rope_angle, rope_seq_len, keys_rotated,
        _ints(q_positions), _ints(k_positions),
        _ints(key_padding), _ints(cu_seqlens), window,
    )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if isinstance(t, _torch.Tensor) and t.dtype in (_torch.float16, _torch.float32,
                                                        _torch.float64):
            _warn_nonfinite(name, t.detach().numpy())
    named_opts = _named_opts(named, "attention")
    # A named scheme's tensors (Forgetting Attention's gates) are autograd inputs of their own.
    ntensors, nkeys = [], []
    for i, (_, _, tens) in enumerate(named_opts):
        for pname, t in tens.items():
            if not isinstance(t, _torch.Tensor):
                raise TypeError(f"{pname} must be a torch.Tensor, got {type(t).__name__}")
            ntensors.append(t)
            nkeys.append((i, pname))
    opts["named"] = [(n, g, {}) for n, g, _ in named_opts]
    opts["products"] = products
    opts_fn = dict(opts)
    opts_fn["_named_keys"] = nkeys
    out, lse = _Attention.apply(q, k, v, sinks,
                                _Opts(opts_fn), *ntensors)
    return (out, lse) if return_lse else out


_with_named_keywords(attention, attention.__doc__)


class _Opts(dict):
    """The options dict, passed through autograd.Function.apply as one non-tensor argument."""
