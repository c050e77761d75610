# Stubs for posenc.flash_attn: FlashAttention's rotary API (flash_attn.layers.rotary) on posenc.
from torch import Tensor
from torch.nn import Module

from .torch import apply_rotary_emb as apply_rotary_emb
from .torch import apply_rotary_emb_kv_ as apply_rotary_emb_kv_
from .torch import apply_rotary_emb_qkv_ as apply_rotary_emb_qkv_

apply_rotary_emb_func = apply_rotary_emb

class RotaryEmbedding(Module):
    dim: int
    base: float
    interleaved: bool
    scale_base: float | None
    inv_freq: Tensor
    scale: Tensor | None
    def __init__(
        self,
        dim: int,
        base: float = 10000.0,
        interleaved: bool = False,
        scale_base: float | None = None,
        device: object | None = None,
    ) -> None: ...
    def forward(
        self,
        qkv: Tensor,
        kv: Tensor | None = None,
        seqlen_offset: int | Tensor = 0,
        max_seqlen: int | None = None,
        num_heads_q: int | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]: ...
