"""FlashAttention's rotary API (flash_attn.layers.rotary) on posenc, for the CPU.

    import posenc.flash_attn as rotary      # in place of flash_attn.layers.rotary
    rope = rotary.RotaryEmbedding(64, base=10000.0, interleaved=False, scale_base=None)
    q, kv = rope(q, kv, seqlen_offset=5)

apply_rotary_emb, apply_rotary_emb_func, apply_rotary_emb_qkv_ and apply_rotary_emb_kv_ are
posenc.torch's (their docstrings give the semantics and the arithmetic). RotaryEmbedding is
FlashAttention's module (FlashAttention 0251105a, flash_attn/layers/rotary.py): the same
constructor, buffers, cos / sin cache and forward, with the tables computed by posenc:

- inv_freq: base ** (-(2i) / dim) in float32 as FlashAttention forms it
  (1 / (base ** (arange(0, dim, 2) / dim)), float32 tensors), posenc's model of that pipeline
  (RopeConfig.hf_inv_freq, the same as transformers' default rotary);
- cos / sin of the float32 angles float32(t) * inv_freq (torch.outer of float32 t), rounded
  correctly to float32 (posenc.rope_cos_sin, angle "hf_f32"); FlashAttention takes torch's
  float32 cos / sin (1 ulp), so its tables and these agree to 1 ulp;
- xPos (scale_base, Sun et al. 2022, "A Length-Extrapolatable Transformer"): per pair
  zeta_i = (2i + 0.4 dim) / (1.4 dim) and position power (t - seqlen // 2) / scale_base, in
  float32 as FlashAttention computes them; queries get cos, sin times zeta^power, keys divided.
"""

import numpy as np
import torch as _torch

from . import RopeConfig, rope_cos_sin
from .torch import apply_rotary_emb, apply_rotary_emb_kv_, apply_rotary_emb_qkv_

apply_rotary_emb_func = apply_rotary_emb

__all__ = ["RotaryEmbedding", "apply_rotary_emb", "apply_rotary_emb_func",
           "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_"]


class RotaryEmbedding(_torch.nn.Module):
    """FlashAttention's RotaryEmbedding(dim, base=10000.0, interleaved=False, scale_base=None,
    device=None): rotates q and k of a packed qkv (or q and a packed kv) in place.

    forward(qkv, kv=None, seqlen_offset=0, max_seqlen=None, num_heads_q=None):
    qkv (batch, seqlen, 3, nheads, headdim), or (batch, seqlen, num_heads_q + 2 num_heads_k,
    headdim) with num_heads_q; with kv (batch, seqlen, 2, nheads, headdim), qkv is q (batch,
    seqlen, nheads, headdim). seqlen_offset: int, or a (batch,) tensor with max_seqlen given.
    Returns qkv, or (q, kv), rotated in place (q and k; v untouched). dim is the rotary width
    (<= headdim; the rest of each head passes through).
    """

    def __init__(self, dim, base=10000.0, interleaved=False, scale_base=None, device=None):
        super().__init__()
        if not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ValueError(f"dim must be an even integer >= 2, got {dim!r}")
        base = float(base)
        if not np.isfinite(base) or base <= 1:
            raise ValueError(f"base must be finite and > 1, got {base!r}")
        if scale_base is not None and not (np.isfinite(float(scale_base)) and float(scale_base) > 0):
            raise ValueError(f"scale_base must be None or finite and > 0, got {scale_base!r}")
        self.dim = dim
        self.base = base
        self.interleaved = bool(interleaved)
        self.scale_base = scale_base
        self._cfg = RopeConfig(head_dim=dim, theta=base)
        inv = _torch.from_numpy(np.ascontiguousarray(self._cfg.hf_inv_freq()))
        self.register_buffer("inv_freq", inv.to(device), persistent=False)
        scale = None
        if scale_base is not None:
            scale = (_torch.arange(0, dim, 2, device=device, dtype=_torch.float32) + 0.4 * dim) / (1.4 * dim)
        self.register_buffer("scale", scale, persistent=False)
        self._seq_len_cached = 0
        self._cos_cached = self._sin_cached = None
        self._cos_k_cached = self._sin_k_cached = None

    def _update_cos_sin_cache(self, seqlen, device=None, dtype=None):
        if not (seqlen > self._seq_len_cached or self._cos_cached is None
                or self._cos_cached.device != device or self._cos_cached.dtype != dtype
                or (self.training and self._cos_cached.is_inference())):
            return
        self._seq_len_cached = seqlen
        cos, sin = rope_cos_sin(self._cfg, np.arange(seqlen, dtype=np.int64), angle="hf_f32",
                                dtype=np.float32)
        cos = _torch.from_numpy(np.ascontiguousarray(cos)).to(device)
        sin = _torch.from_numpy(np.ascontiguousarray(sin)).to(device)
        if self.scale is None:
            self._cos_cached, self._sin_cached = cos.to(dtype), sin.to(dtype)
            return
        power = (_torch.arange(seqlen, dtype=self.scale.dtype, device=self.scale.device)
                 - seqlen // 2) / self.scale_base
        scale = self.scale.to(device=power.device) ** power[:, None]
        self._cos_cached, self._sin_cached = (cos * scale).to(dtype), (sin * scale).to(dtype)
        self._cos_k_cached, self._sin_k_cached = (cos / scale).to(dtype), (sin / scale).to(dtype)

    def forward(self, qkv, kv=None, seqlen_offset=0, max_seqlen=None, num_heads_q=None):
        if not isinstance(qkv, _torch.Tensor) or qkv.dim() < 4:
            raise ValueError("qkv must be a tensor (batch, seqlen, ...), got "
                             f"{getattr(qkv, 'shape', type(qkv).__name__)}")
        seqlen = qkv.shape[1]
        if max_seqlen is not None:
            self._update_cos_sin_cache(max_seqlen, device=qkv.device, dtype=qkv.dtype)
        elif isinstance(seqlen_offset, int):
            self._update_cos_sin_cache(seqlen + seqlen_offset, device=qkv.device, dtype=qkv.dtype)
        elif self._cos_cached is None:
            raise ValueError("seqlen_offset is a tensor: give max_seqlen so that the cos / sin "
                             "cache can be built")
        xpos = self.scale is not None
        if kv is None:
            return apply_rotary_emb_qkv_(
                qkv, self._cos_cached, self._sin_cached,
                self._cos_k_cached if xpos else None, self._sin_k_cached if xpos else None,
                interleaved=self.interleaved, seqlen_offsets=seqlen_offset, num_heads_q=num_heads_q)
        q = apply_rotary_emb(qkv, self._cos_cached, self._sin_cached, interleaved=self.interleaved,
                             inplace=True, seqlen_offsets=seqlen_offset)
        kv = apply_rotary_emb_kv_(
            kv, self._cos_k_cached if xpos else self._cos_cached,
            self._sin_k_cached if xpos else self._sin_cached,
            interleaved=self.interleaved, seqlen_offsets=seqlen_offset)
        return q, kv

    def extra_repr(self):
        return (f"dim={self.dim}, base={self.base}, interleaved={self.interleaved}, "
                f"scale_base={self.scale_base}")
