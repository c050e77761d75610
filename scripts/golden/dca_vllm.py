#!/usr/bin/env python3
"""tests/golden/dca/vllm.json: vLLM's Dual Chunk Attention (Qwen2.5-1M's
`dual_chunk_attention_config`) run unchanged on the CPU, printed as JSON on stdout.

  scripts/golden/dca_vllm.py --vllm DIR --commit SHA > tests/golden/dca/vllm.json

DIR is a vLLM checkout at SHA (the V0 backend vllm/attention/backends/dual_chunk_flash_attn.py
and vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py must exist there; the
latter was vllm/model_executor/layers/rotary_embedding.py before the rope refactor and is not
supported here). Only those two files and rotary_embedding/common.py are executed; the
other vLLM modules they import, and the CUDA kernels they call, are the shims of
scripts/golden/shims/vllm_dca.py (each documented there). Beyond those, this script:
- lets DualChunkRotaryEmbedding.__init__ build its caches on the CPU: torch.cuda.current_device
  returns 0 and, while the module is constructed, torch.device("cuda:...") is the CPU device;
- calls DualChunkFlashAttentionImpl.forward as vLLM's Attention layer does for this backend
  (accept_output_buffer False: the [T, 5 * Hq * D] query of the rotary module, key, value,
  the paged kv cache, the metadata), with a kv cache of block size 16 and block table
  0, 1, 2, ... (int64: torch 1.13 indexes with int64, not int32 as CUDA vLLM) and metadata built as vLLM's DualChunkFlashAttentionMetadataBuilder.build
  would for one sequence (orig_seq_lens = [prompt length], chunk_size, local_size and
  original_max_position_embeddings from the config).
"""
import argparse
import contextlib
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "shims"))
import vllm_dca  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--vllm", required=True)
ap.add_argument("--commit", required=True)
args = ap.parse_args()

shims = vllm_dca.install(os.path.join(os.path.abspath(args.vllm), "vllm"))
from vllm.model_executor.layers.rotary_embedding.dual_chunk_rope import DualChunkRotaryEmbedding  # noqa: E402
from vllm.attention.backends.dual_chunk_flash_attn import (  # noqa: E402
    DualChunkFlashAttentionImpl, DualChunkFlashAttentionMetadata)

HQ, HK, D, S = 2, 1, 16, 56
BASE, CHUNK_SIZE, LOCAL_SIZE = 10000.0, 24, 8
CHUNK_LEN = CHUNK_SIZE - LOCAL_SIZE
MAX_POS = 64
BLOCK = 16


def inputs(dtype):
    t = torch.arange(S, dtype=torch.float64).view(S, 1, 1)
    d = torch.arange(D, dtype=torch.float64).view(1, 1, D)
    hq = torch.arange(HQ, dtype=torch.float64).view(1, HQ, 1)
    hk = torch.arange(HK, dtype=torch.float64).view(1, HK, 1)
    q = torch.sin(0.37 * (t + 1) + 0.11 * (d + 1) * (hq + 1))
    k = torch.cos(0.23 * (t + 1) + 0.07 * (d + 1) * (hk + 2))
    v = torch.sin(0.19 * (t + 1) * (d + 1) / D + 0.5 * hk)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@contextlib.contextmanager
def cuda_device_is_cpu():
    real_device, real_current = torch.device, torch.cuda.current_device

    def device(*a, **kw):
        if a and isinstance(a[0], str) and a[0].startswith("cuda"):
            return real_device("cpu")
        return real_device(*a, **kw)

    torch.device, torch.cuda.current_device = device, (lambda: 0)
    try:
        yield
    finally:
        torch.device, torch.cuda.current_device = real_device, real_current


def rope(dtype):
    with cuda_device_is_cpu():
        m = DualChunkRotaryEmbedding(D, D, MAX_POS, BASE, True, dtype, chunk_size=CHUNK_SIZE,
                                     local_size=LOCAL_SIZE)
    q, k, _ = inputs(dtype)
    pos = torch.arange(S)
    query, key = m(pos, q.reshape(S, HQ * D).clone(), k.reshape(S, HK * D).clone())
    parts = torch.split(query, HQ * D, dim=-1)
    names = ["query", "query_succ", "query_inter", "query_succ_critical", "query_inter_critical"]
    out = {n: p.reshape(S, HQ, D) for n, p in zip(names, parts)}
    out["key"] = key.reshape(S, HK, D)
    return m, out


def nested(x):
    if x.dim() == 0:
        return float(x)
    return [nested(y) for y in x]


def metadata(kind, seq_len, n_tokens, ompe, dtype):
    nblocks = (seq_len - 1) // BLOCK + 1
    common = dict(block_tables=torch.arange(nblocks, dtype=torch.long).view(1, nblocks),
                  orig_seq_lens=[seq_len],
                  orig_seq_lens_tensor=torch.tensor([seq_len], dtype=torch.int),
                  block_size=BLOCK, original_max_position_embeddings=ompe,
                  chunk_size=CHUNK_SIZE, local_size=LOCAL_SIZE)
    if kind == "prefill":
        return DualChunkFlashAttentionMetadata(
            num_prefills=1, num_prefill_tokens=n_tokens, num_decode_tokens=0,
            slot_mapping=torch.arange(seq_len - n_tokens, seq_len),
            seq_lens=[seq_len], seq_lens_tensor=torch.tensor([seq_len], dtype=torch.int),
            max_prefill_seq_len=seq_len, max_decode_seq_len=0,
            query_start_loc=torch.tensor([0, n_tokens], dtype=torch.int32),
            seq_start_loc=torch.tensor([0, seq_len], dtype=torch.int32), **common)
    return DualChunkFlashAttentionMetadata(
        num_prefills=0, num_prefill_tokens=0, num_decode_tokens=n_tokens,
        slot_mapping=torch.arange(seq_len - n_tokens, seq_len),
        seq_lens=[seq_len], seq_lens_tensor=torch.tensor([seq_len], dtype=torch.int),
        max_prefill_seq_len=0, max_decode_seq_len=seq_len,
        query_start_loc=torch.tensor([0, n_tokens], dtype=torch.int32),
        seq_start_loc=torch.tensor([0, seq_len], dtype=torch.int32), **common)


class _Layer:
    _k_scale = torch.tensor(1.0)
    _v_scale = torch.tensor(1.0)


def attention(dtype, ompe, decode_last=False):
    """Prefill of positions 0..S-1 (or 0..S-2 then a decode step of position S-1)."""
    config = {"chunk_size": CHUNK_SIZE, "local_size": LOCAL_SIZE,
              "original_max_position_embeddings": ompe}
    impl = DualChunkFlashAttentionImpl(HQ, D, D ** -0.5, HK, None, None, "auto",
                                       dual_chunk_attention_config=config)
    _, r = rope(dtype)
    _, _, v = inputs(dtype)
    query = torch.cat([r[n].reshape(S, HQ * D) for n in
                       ("query", "query_succ", "query_inter", "query_succ_critical",
                        "query_inter_critical")], dim=-1)
    key = r["key"].reshape(S, HK * D)
    value = v.reshape(S, HK * D)
    nblocks = (S - 1) // BLOCK + 1
    kv_cache = torch.zeros(2, nblocks, BLOCK, HK, D, dtype=dtype)
    layer = _Layer()
    n_pre = S - 1 if decode_last else S
    out = impl.forward(layer, query[:n_pre].clone(), key[:n_pre].clone(), value[:n_pre].clone(),
                       kv_cache, metadata("prefill", n_pre, n_pre, ompe, dtype))
    if not decode_last:
        return out.reshape(S, HQ, D)
    out_d = impl.forward(layer, query[S - 1:].clone(), key[S - 1:].clone(),
                         value[S - 1:].clone(), kv_cache, metadata("decode", S, 1, ompe, dtype))
    return torch.cat([out, out_d], 0).reshape(S, HQ, D)


q64, k64, v64 = inputs(torch.float64)
doc = {
    "source": "vllm-project/vllm",
    "commit": args.commit,
    "files_run": ["vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py",
                  "vllm/model_executor/layers/rotary_embedding/common.py",
                  "vllm/attention/backends/dual_chunk_flash_attn.py"],
    "torch": torch.__version__,
    "shims": shims + ["torch.cuda.current_device -> 0 and torch.device('cuda:*') -> cpu while "
                      "DualChunkRotaryEmbedding is constructed (dca_vllm.py)"],
    "config": {"head_size": D, "rotary_dim": D, "base": BASE, "is_neox_style": True,
               "max_position_embeddings": MAX_POS, "chunk_size": CHUNK_SIZE,
               "local_size": LOCAL_SIZE, "chunk_len": CHUNK_LEN, "num_heads": HQ,
               "num_kv_heads": HK, "seq_len": S, "positions": list(range(S)),
               "softmax_scale": D ** -0.5, "kv_cache_block_size": BLOCK},
    "inputs": {
        "recipe": {"q": "sin(0.37*(t+1) + 0.11*(d+1)*(h+1))",
                   "k": "cos(0.23*(t+1) + 0.07*(d+1)*(h+2))",
                   "v": "sin(0.19*(t+1)*(d+1)/D + 0.5*h)",
                   "dtype": "computed in float64, then cast to the case's dtype"},
        "shape": "[T, H, D]", "q": nested(q64), "k": nested(k64), "v": nested(v64)},
    "rope": {},
    "attention": [],
}
for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
    m, r = rope(dtype)
    doc["rope"][name] = {
        "note": "DualChunkRotaryEmbedding.forward(positions 0..S-1, q, k); its cos/sin caches "
                "are computed in float32 (inv_freq and positions float32) and cast to dtype",
        "shape": "[T, H, D]", **{n: nested(x) for n, x in r.items()}}

cases = [("float64", torch.float64, 64, False), ("float64", torch.float64, 24, False),
         ("float32", torch.float32, 64, False), ("float64", torch.float64, 64, True)]
for name, dtype, ompe, dec in cases:
    sf = max(1.0, 0.1 * math.log(S / ompe) + 1.0)
    out = attention(dtype, ompe, dec)
    doc["attention"].append({
        "dtype": name, "original_max_position_embeddings": ompe,
        "mode": ("prefill of positions 0..S-2, then one decode step for position S-1 "
                 "(the last row comes from the decode path)") if dec else
                "prefill of positions 0..S-1 (one sequence, causal)",
        "scaling_factor": sf,
        "scaling_note": "vLLM multiplies the keys by scaling_factor (forward) AND the prefill "
                        "softmax scale by it (prefill) / the decode queries by it (decode): "
                        "logits scale by scaling_factor**2; 1 when S <= "
                        "original_max_position_embeddings",
        "shape": "[T, Hq, D]", "output": nested(out)})
json.dump(doc, sys.stdout, indent=1)
sys.stdout.write("\n")
