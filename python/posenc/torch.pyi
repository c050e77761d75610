# Type stubs of posenc.torch (runtime: python/posenc/torch.py): posenc's kernels as autograd
# Functions on CPU tensors. The attention keywords are posenc.attention's (tables as tensors,
# no kv_dtype), the schemes reached by name included: their keywords replace each marker line
# "# posenc: the keywords of the schemes reached by name" at build time (scripts/gen-stubs, run
# by python/CMakeLists.txt); tests/python/test_typing.py checks them against the declarations.
from typing import Any, Literal, overload

import torch as _torch
from numpy.typing import ArrayLike
from torch import Tensor

from . import AxialRope, RopeConfig, _Angle, _Layout

__all__ = [
    "apply_rotary_emb",
    "apply_rotary_emb_qkv_",
    "apply_rotary_emb_kv_",
    "apply_rope",
    "RotaryEmbedding",
    "attention",
]

# Integer data (positions, offsets, cu_seqlens, masks): a tensor or anything NumPy converts.
_Ints = Tensor | ArrayLike

def apply_rotary_emb(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    interleaved: bool = False,
    inplace: bool = False,
    seqlen_offsets: int | _Ints = 0,
    cu_seqlens: _Ints | None = None,
    max_seqlen: int | None = None,
) -> Tensor: ...
def apply_rotary_emb_qkv_(
    qkv: Tensor,
    cos: Tensor,
    sin: Tensor,
    cos_k: Tensor | None = None,
    sin_k: Tensor | None = None,
    interleaved: bool = False,
    seqlen_offsets: int | _Ints = 0,
    num_heads_q: int | None = None,
) -> Tensor: ...
def apply_rotary_emb_kv_(
    kv: Tensor,
    cos: Tensor,
    sin: Tensor,
    interleaved: bool = False,
    seqlen_offsets: int | _Ints = 0,
) -> Tensor: ...
def apply_rope(
    x: Tensor,
    positions: _Ints | None = None,
    *,
    cfg: RopeConfig,
    layout: _Layout = "half",
    angle: _Angle = "exact",
    seqlen_offsets: int | _Ints = 0,
    cu_seqlens: _Ints | None = None,
    seq_len: int | None = None,
) -> Tensor: ...

class RotaryEmbedding(_torch.nn.Module):
    cfg: RopeConfig
    layout: _Layout
    angle: _Angle
    def __init__(
        self, cfg: RopeConfig, layout: _Layout = "half", angle: _Angle = "exact"
    ) -> None: ...
    def forward(
        self,
        q: Tensor,
        k: Tensor,
        positions: _Ints | None = None,
        seqlen_offsets: int | _Ints = 0,
        cu_seqlens: _Ints | None = None,
        seq_len: int | None = None,
    ) -> tuple[Tensor, Tensor]: ...
    def extra_repr(self) -> str: ...

@overload
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    rope: RopeConfig | AxialRope | None = None,
    rope_layout: _Layout = "half",
    rope_angle: _Angle = "exact",
    rope_seq_len: int | None = None,
    keys_rotated: bool = False,
    q_positions: _Ints | None = None,
    k_positions: _Ints | None = None,
    key_padding: _Ints | None = None,
    cu_seqlens: _Ints | None = None,
    window: int | None = None,
    return_lse: Literal[False] = False,
    products: Literal["f32", "bf16"] = "f32",
    sinks: Tensor | None = None,
    # posenc: the keywords of the schemes reached by name
) -> Tensor: ...
@overload
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    rope: RopeConfig | AxialRope | None = None,
    rope_layout: _Layout = "half",
    rope_angle: _Angle = "exact",
    rope_seq_len: int | None = None,
    keys_rotated: bool = False,
    q_positions: _Ints | None = None,
    k_positions: _Ints | None = None,
    key_padding: _Ints | None = None,
    cu_seqlens: _Ints | None = None,
    window: int | None = None,
    return_lse: Literal[True],
    products: Literal["f32", "bf16"] = "f32",
    sinks: Tensor | None = None,
    # posenc: the keywords of the schemes reached by name
) -> tuple[Tensor, Tensor]: ...
@overload
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    rope: RopeConfig | AxialRope | None = None,
    rope_layout: _Layout = "half",
    rope_angle: _Angle = "exact",
    rope_seq_len: int | None = None,
    keys_rotated: bool = False,
    q_positions: _Ints | None = None,
    k_positions: _Ints | None = None,
    key_padding: _Ints | None = None,
    cu_seqlens: _Ints | None = None,
    window: int | None = None,
    return_lse: bool = False,
    products: Literal["f32", "bf16"] = "f32",
    sinks: Tensor | None = None,
    # posenc: the keywords of the schemes reached by name
) -> Tensor | tuple[Tensor, Tensor]: ...
