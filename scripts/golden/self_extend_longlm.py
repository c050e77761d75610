#!/usr/bin/env python3
"""tests/golden/self_extend/longlm.json: LongLM's Self-Extend attention (Jin et al. 2024),
self_extend_patch/Llama.py's and Llama_4_40.py's eager `self_extend_forward`, run unchanged
on the CPU, printed as JSON on stdout.

  scripts/golden/self_extend_longlm.py --longlm DIR --commit SHA > tests/golden/self_extend/longlm.json

DIR is a datamllab/LongLM checkout at SHA. The imports the patch files need (transformers,
flash_attn, triton, numpy) are the shims of scripts/golden/shims/longlm_selfextend.py. The
function is called as transformers' LlamaAttention would call its patched forward, with
`self` a minimal attention object built here: q_proj / k_proj / v_proj return the
deterministic q, k, v of the recipe (so hidden_states only gives batch and length), o_proj is
the identity (the recorded output is the attention output before o_proj), rotary_emb is the
transformers 4.38.2 rotary arithmetic of the shim, config.pretraining_tp = 1,
attention_dropout 0, not training, no cache. attention_mask is transformers 4.38's 4D causal
mask: 0 where key j <= query i, torch.finfo(float64).min above the diagonal.
"""
import argparse
import importlib
import json
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "shims"))
import longlm_selfextend  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--longlm", required=True)
ap.add_argument("--commit", required=True)
args = ap.parse_args()
shims = longlm_selfextend.install(os.path.abspath(args.longlm))
patches = {f: importlib.import_module(f"self_extend_patch.{f}") for f in ("Llama", "Llama_4_40")}

HQ, D, S, THETA = 2, 16, 48, 10000.0
DTYPE = torch.float64


def inputs(hk):
    t = torch.arange(S, dtype=torch.float64).view(S, 1, 1)
    d = torch.arange(D, dtype=torch.float64).view(1, 1, D)
    hq_ = torch.arange(HQ, dtype=torch.float64).view(1, HQ, 1)
    hk_ = torch.arange(hk, dtype=torch.float64).view(1, hk, 1)
    q = torch.sin(0.37 * (t + 1) + 0.11 * (d + 1) * (hq_ + 1))
    k = torch.cos(0.23 * (t + 1) + 0.07 * (d + 1) * (hk_ + 2))
    v = torch.sin(0.19 * (t + 1) * (d + 1) / D + 0.5 * hk_)
    return q, k, v


def attention_module(hk):
    q, k, v = inputs(hk)
    return types.SimpleNamespace(
        config=types.SimpleNamespace(pretraining_tp=1),
        q_proj=lambda h: q.reshape(1, S, HQ * D).to(DTYPE),
        k_proj=lambda h: k.reshape(1, S, hk * D).to(DTYPE),
        v_proj=lambda h: v.reshape(1, S, hk * D).to(DTYPE),
        o_proj=lambda x: x,
        num_heads=HQ, head_dim=D, num_key_value_heads=hk, num_key_value_groups=HQ // hk,
        hidden_size=HQ * D, attention_dropout=0.0, training=False, layer_idx=0,
        rotary_emb=longlm_selfextend.LlamaRotaryEmbedding438(D, THETA))


def nested(x):
    if x.dim() == 0:
        return float(x)
    return [nested(y) for y in x]


mask = torch.zeros(1, 1, S, S, dtype=DTYPE)
mask.masked_fill_(torch.ones(S, S, dtype=torch.bool).triu(1), torch.finfo(DTYPE).min)
pos = torch.arange(S).view(1, S)
doc = {
    "source": "datamllab/LongLM",
    "commit": args.commit,
    "files_run": ["self_extend_patch/Llama.py (self_extend_forward)",
                  "self_extend_patch/Llama_4_40.py (self_extend_forward)"],
    "torch": torch.__version__,
    "shims": shims,
    "config": {"num_heads": HQ, "head_dim": D, "rope_theta": THETA, "seq_len": S,
               "positions": list(range(S)), "dtype": "float64 (rotary tables float32 as in "
               "transformers 4.38.2, softmax in float32 as the patch does, cast back)",
               "causal": True, "scale_base": -1},
    "inputs": {"recipe": {"q": "sin(0.37*(t+1) + 0.11*(d+1)*(h+1))",
                          "k": "cos(0.23*(t+1) + 0.07*(d+1)*(h+2))",
                          "v": "sin(0.19*(t+1)*(d+1)/D + 0.5*h)"},
               "shape": "[T, H, D]", "by_num_kv_heads": {}},
    "cases": [],
}
for hk in (1, 2):
    q, k, v = inputs(hk)
    doc["inputs"]["by_num_kv_heads"][str(hk)] = {"q": nested(q), "k": nested(k), "v": nested(v)}
for G, W in ((4, 8), (3, 5)):
    for hk in (1, 2):
        for fname, mod in patches.items():
            out, _, _ = mod.self_extend_forward(
                attention_module(hk), torch.zeros(1, S, HQ * D, dtype=DTYPE),
                attention_mask=mask, position_ids=pos, group_size_1=G, group_size_2=W)
            gq = pos // G + W - (W / G if fname == "Llama" else W // G)
            doc["cases"].append({
                "file": f"self_extend_patch/{fname}.py", "group_size_1": G,
                "group_size_2": W, "num_kv_heads": hk,
                "group_query_position": [float(x) for x in gq[0]],
                "group_key_position": [int(x) for x in (pos // G)[0]],
                "shape": "[T, Hq, D]",
                "output_before_o_proj": nested(out.reshape(S, HQ, D))})
json.dump(doc, sys.stdout, indent=1)
sys.stdout.write("\n")
