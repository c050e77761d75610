"""Import shims for running vLLM's Dual Chunk Attention files unchanged on the CPU
(scripts/golden/dca_vllm.py), without installing vLLM.

Only two files of a vLLM checkout are executed, read from the checkout itself:
  vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py (+ common.py beside it)
  vllm/attention/backends/dual_chunk_flash_attn.py
Their packages are registered here as empty packages whose __path__ is the checkout's
folder (so no package __init__ runs), and every other vLLM module they import is a small
module defined here. What each supplies:

- vllm.model_executor.custom_op.CustomOp: nn.Module with the real `register(name)`
  decorator behaviour (records the class, returns it). DualChunkRotaryEmbedding defines its
  own forward, so CustomOp's dispatch is never needed.
- vllm.platforms.current_platform: is_cuda() -> False (common.py then skips importing the
  flash-attn rotary kernel, which DualChunkRotaryEmbedding does not use).
- vllm.logger.init_logger: a logging.Logger with warning_once / info_once.
- vllm.attention.backends.abstract: AttentionLayer, AttentionType.DECODER,
  is_quantized_kv_cache(dtype) = dtype != "auto" (vLLM's definition).
- vllm.attention.backends.flash_attn: the parents of the DCA classes. FlashAttentionMetadata
  is a dataclass with the fields the DCA backend reads (num_prefills, num_prefill_tokens,
  num_decode_tokens, slot_mapping, seq_lens, seq_lens_tensor, max_prefill_seq_len,
  max_decode_seq_len, query_start_loc, seq_start_loc, block_tables), vLLM's
  asdict_zerocopy, and prefill_metadata / decode_metadata that return the batch itself for a
  batch of only prefills / only decodes (the golden run builds no mixed batch).
  FlashAttentionBackend.get_supported_head_sizes() is the real list [32 .. 256] plus 16:
  the golden case uses head dim 16, which vLLM's CUDA kernels do not take but the torch
  shims below do.
- vllm.distributed.parallel_state.get_tensor_model_parallel_rank() -> 0 (one rank).
- vllm.utils.async_tensor_h2d: torch.tensor(data, dtype=..., device=...).
- vllm.attention.utils.fa_utils: get_flash_attn_version() -> 2, flash_attn_supports_fp8()
  -> False.
- vllm._custom_ops.reshape_and_cache_flash (CUDA kernel): key_cache[slot] = key,
  value_cache[slot] = value for each token, the cache seen as
  [num_blocks * block_size, num_kv_heads, head_size] (slot = block * block_size + offset).
- vllm.vllm_flash_attn.flash_attn_varlen_func (CUDA kernel), plain torch in the input
  dtype, per sequence of cu_seqlens: S = softmax_scale * q k^T with GQA (query head h reads
  kv head h // (Hq / Hk)); causal masks key j for query i when j > i + (Lk - Lq)
  (FlashAttention >= 2.1's bottom-right alignment); out = softmax(S) v; with
  return_softmax_lse it also returns lse = logsumexp(S) per row, shape [Hq, total_q]
  (FlashAttention's varlen layout). Rows with no key get out 0 and lse -inf.
- vllm.vllm_flash_attn.flash_attn_with_kvcache (CUDA kernel), for the decode path:
  q [B, Lq, Hq, D] against the paged cache [num_blocks, block_size, Hk, D] through
  block_table [B, n] (token t of sequence b is cache block block_table[b, t // block_size],
  offset t % block_size), the first cache_seqlens[b] tokens, same math as above; returns
  (out [B, Lq, Hq, D], lse [B, Hq, Lq]).
- vllm.vllm_flash_attn.sparse_attn_func and vllm._custom_ops.convert_vertical_slash_*:
  raise (sparse attention is off in the golden run).
"""

import dataclasses
import logging
import math
import os
import sys
import types

import torch
from torch import nn


def _module(name, package_dir=None, **attrs):
    mod = types.ModuleType(name)
    if package_dir is not None:
        mod.__path__ = [package_dir]
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    parent, _, leaf = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], leaf, mod)
    return mod


# ---- torch shims for the CUDA kernels -------------------------------------------------

def _attention(q, k, v, softmax_scale, causal):
    """q [Lq, Hq, D], k, v [Lk, Hk, D] -> out [Lq, Hq, D], lse [Hq, Lq]."""
    lq, hq, _ = q.shape
    lk, hk, _ = k.shape
    if lk == 0:
        return (torch.zeros(lq, hq, v.shape[-1], dtype=q.dtype),
                torch.full((hq, lq), -math.inf, dtype=q.dtype))
    rep = hq // hk
    kk = k.repeat_interleave(rep, dim=1)
    vv = v.repeat_interleave(rep, dim=1)
    s = softmax_scale * torch.einsum("ihd,jhd->hij", q, kk)
    if causal:
        i = torch.arange(lq).view(lq, 1)
        j = torch.arange(lk).view(1, lk)
        s = s.masked_fill(j > i + (lk - lq), -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # [Hq, Lq]
    p = torch.exp(s - lse.unsqueeze(-1))
    p = torch.nan_to_num(p, nan=0.0)
    out = torch.einsum("hij,jhd->ihd", p, vv)
    return out, lse


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                           max_seqlen_k=None, softmax_scale=None, causal=False,
                           window_size=(-1, -1), alibi_slopes=None, return_softmax_lse=False,
                           **kwargs):
    assert alibi_slopes is None and tuple(window_size) == (-1, -1)
    assert kwargs.get("block_table") is None
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    cq = [int(x) for x in cu_seqlens_q]
    ck = [int(x) for x in cu_seqlens_k]
    outs, lses = [], []
    for b in range(len(cq) - 1):
        o, l = _attention(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]],
                          softmax_scale, causal)
        outs.append(o)
        lses.append(l)
    out = torch.cat(outs, 0)
    if return_softmax_lse:
        return out, torch.cat(lses, 1)
    return out


def flash_attn_with_kvcache(q, k_cache, v_cache, block_table=None, cache_seqlens=None,
                            softmax_scale=None, alibi_slopes=None, causal=False,
                            return_softmax_lse=False, **kwargs):
    assert alibi_slopes is None
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    bsz, lq, hq, d = q.shape
    block_size = k_cache.shape[1]
    outs, lses = [], []
    for b in range(bsz):
        n = int(cache_seqlens[b])
        t = torch.arange(n)
        blocks = block_table[b][t // block_size].long() if n else t
        kb = k_cache[blocks, t % block_size] if n else k_cache.new_zeros(0, *k_cache.shape[2:])
        vb = v_cache[blocks, t % block_size] if n else v_cache.new_zeros(0, *v_cache.shape[2:])
        o, l = _attention(q[b], kb, vb, softmax_scale, causal)
        outs.append(o)
        lses.append(l)
    out = torch.stack(outs, 0)
    lse = torch.stack(lses, 0)
    return (out, lse) if return_softmax_lse else out


def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                            k_scale=None, v_scale=None):
    assert kv_cache_dtype == "auto"
    kc = key_cache.view(-1, *key_cache.shape[2:])
    vc = value_cache.view(-1, *value_cache.shape[2:])
    kc[slot_mapping.long()] = key.to(kc.dtype)
    vc[slot_mapping.long()] = value.to(vc.dtype)


def _unavailable(name):
    def f(*args, **kwargs):
        raise NotImplementedError(f"{name}: sparse attention is not shimmed (off in the golden run)")
    return f


# ---- the vLLM modules ------------------------------------------------------------------

class _Logger(logging.LoggerAdapter):
    def warning_once(self, msg, *args, **kwargs):
        self.warning(msg, *args)

    def info_once(self, msg, *args, **kwargs):
        self.info(msg, *args)


def init_logger(name):
    return _Logger(logging.getLogger(name), {})


class CustomOp(nn.Module):
    op_registry = {}

    @classmethod
    def register(cls, name):
        def decorator(op_cls):
            op_cls.name = name
            cls.op_registry[name] = op_cls
            return op_cls
        return decorator


class _Platform:
    @staticmethod
    def is_cuda():
        return False

    @staticmethod
    def is_cuda_alike():
        return False


@dataclasses.dataclass
class FlashAttentionMetadata:
    num_prefills: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    slot_mapping: object = None
    seq_lens: object = None
    seq_lens_tensor: object = None
    max_prefill_seq_len: int = 0
    max_decode_seq_len: int = 0
    query_start_loc: object = None
    seq_start_loc: object = None
    block_tables: object = None

    def asdict_zerocopy(self, skip_fields=None):
        skip_fields = skip_fields or set()
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in skip_fields}

    def _base_copy(self):
        names = [f.name for f in dataclasses.fields(FlashAttentionMetadata)]
        return FlashAttentionMetadata(**{n: getattr(self, n) for n in names})

    @property
    def prefill_metadata(self):
        if self.num_prefills == 0:
            return None
        assert self.num_decode_tokens == 0, "shim: prefill-only batches"
        return self._base_copy()

    @property
    def decode_metadata(self):
        if self.num_decode_tokens == 0:
            return None
        assert self.num_prefills == 0, "shim: decode-only batches"
        return self._base_copy()


class FlashAttentionBackend:
    @staticmethod
    def get_supported_head_sizes():
        return [16, 32, 64, 96, 128, 160, 192, 224, 256]


class FlashAttentionImpl:
    pass


class FlashAttentionMetadataBuilder:
    pass


class AttentionLayer:
    pass


class AttentionType:
    DECODER = "decoder"


def install(vllm_dir):
    """Register the modules; vllm_dir is the checkout's `vllm/` package folder."""
    j = os.path.join
    _module("vllm", vllm_dir)
    _module("vllm.platforms", None, current_platform=_Platform())
    _module("vllm.logger", None, init_logger=init_logger)
    _module("vllm.model_executor", j(vllm_dir, "model_executor"))
    _module("vllm.model_executor.custom_op", None, CustomOp=CustomOp)
    _module("vllm.model_executor.layers", j(vllm_dir, "model_executor", "layers"))
    _module("vllm.model_executor.layers.rotary_embedding",
            j(vllm_dir, "model_executor", "layers", "rotary_embedding"))
    _module("vllm._custom_ops", None, reshape_and_cache_flash=reshape_and_cache_flash,
            convert_vertical_slash_indexes=_unavailable("convert_vertical_slash_indexes"),
            convert_vertical_slash_indexes_mergehead=_unavailable(
                "convert_vertical_slash_indexes_mergehead"))
    _module("vllm.attention", j(vllm_dir, "attention"))
    _module("vllm.attention.backends", j(vllm_dir, "attention", "backends"))
    _module("vllm.attention.backends.abstract", None, AttentionLayer=AttentionLayer,
            AttentionType=AttentionType, is_quantized_kv_cache=lambda d: d != "auto")
    _module("vllm.attention.backends.flash_attn", None,
            FlashAttentionBackend=FlashAttentionBackend, FlashAttentionImpl=FlashAttentionImpl,
            FlashAttentionMetadata=FlashAttentionMetadata,
            FlashAttentionMetadataBuilder=FlashAttentionMetadataBuilder)
    _module("vllm.attention.utils", j(vllm_dir, "attention", "utils"))
    _module("vllm.attention.utils.fa_utils", None, get_flash_attn_version=lambda **kw: 2,
            flash_attn_supports_fp8=lambda: False)
    _module("vllm.distributed", j(vllm_dir, "distributed"))
    _module("vllm.distributed.parallel_state", None,
            get_tensor_model_parallel_rank=lambda: 0)
    _module("vllm.utils", None, async_tensor_h2d=lambda data, dtype, device, pin_memory:
            torch.tensor(data, dtype=dtype, device=device))
    _module("vllm.vllm_flash_attn", None, flash_attn_varlen_func=flash_attn_varlen_func,
            flash_attn_with_kvcache=flash_attn_with_kvcache,
            sparse_attn_func=_unavailable("sparse_attn_func"))
    return ["vllm.model_executor.custom_op.CustomOp", "vllm.platforms.current_platform",
            "vllm.logger.init_logger", "vllm.attention.backends.abstract",
            "vllm.attention.backends.flash_attn (metadata / backend parents)",
            "vllm.distributed.parallel_state.get_tensor_model_parallel_rank",
            "vllm.utils.async_tensor_h2d", "vllm.attention.utils.fa_utils",
            "vllm._custom_ops.reshape_and_cache_flash (torch)",
            "vllm.vllm_flash_attn.flash_attn_varlen_func (torch)",
            "vllm.vllm_flash_attn.flash_attn_with_kvcache (torch)"]
