"""Import shims for running LongLM's self_extend_patch/Llama.py (and Llama_4_40.py)
unchanged on the CPU (scripts/golden/self_extend_longlm.py), without transformers,
flash_attn, triton or numpy installed.

The patch files are read from the LongLM checkout: `self_extend_patch` is registered as an
empty package whose __path__ is the checkout's folder (its __init__, which imports every
model's patch, does not run), so `from .selfextend_flash_attn import ...` loads the real file.
What each shimmed module supplies:

- transformers.models.llama.modeling_llama, transformers.models.gpt_neox.modeling_gpt_neox:
  empty modules (the patch star-imports them; self_extend_forward uses only its own
  rotate_half / apply_rotary_pos_emb / repeat_kv and the attention module passed as `self`).
- transformers.cache_utils.Cache: a placeholder class (used in annotations only).
- flash_attn (flash_attn_func, flash_attn_varlen_func), triton, triton.language:
  placeholders from _stubs (the eager self_extend_forward calls none of them).
- numpy: `log` only (math.log), used by the patch only when scale_base > 0.
- LlamaRotaryEmbedding438: the rotary module the patch calls as
  self.rotary_emb(x, position_ids, seq_len=None), with the arithmetic of transformers
  4.38.2's LlamaRotaryEmbedding (the version LongLM's README pins): inv_freq =
  1 / base ** (arange(0, dim, 2, int64).float() / dim) in float32; freqs = inv_freq @
  position_ids.float() in float32; emb = cat(freqs, freqs); returns (emb.cos(), emb.sin())
  cast to x.dtype. Positions are taken as float, so the fractional group query positions of
  Llama.py pass through unrounded, as in transformers.
"""

import math
import sys
import types

import torch
from torch import nn

import _stubs


class LlamaRotaryEmbedding438(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.dim, self.base = dim, base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids, seq_len=None):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__path__ = []
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    return mod


def install(longlm_dir):
    import os
    for name in ("transformers", "transformers.models", "transformers.models.llama",
                 "transformers.models.llama.modeling_llama", "transformers.models.gpt_neox",
                 "transformers.models.gpt_neox.modeling_gpt_neox"):
        _module(name)
    _module("transformers.cache_utils", Cache=type("Cache", (), {}))
    _stubs.placeholder_module("flash_attn")
    _stubs.placeholder_module("triton")
    _stubs.placeholder_module("triton.language")
    if "numpy" not in sys.modules:
        try:
            import numpy  # noqa: F401
        except ImportError:
            _module("numpy", log=math.log)
    pkg = _module("self_extend_patch")
    pkg.__path__ = [os.path.join(longlm_dir, "self_extend_patch")]
    return ["transformers.models.llama.modeling_llama (empty)",
            "transformers.models.gpt_neox.modeling_gpt_neox (empty)",
            "transformers.cache_utils.Cache (placeholder)",
            "flash_attn, triton, triton.language (placeholders, never called)",
            "numpy.log = math.log (only if numpy is absent; unused with scale_base -1)",
            "self.rotary_emb: transformers 4.38.2 LlamaRotaryEmbedding arithmetic (float32)"]
