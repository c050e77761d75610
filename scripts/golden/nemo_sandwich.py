#!/usr/bin/env python3
"""tests/golden/nemo/sandwich.json: NeMo's SandwichRelativePositionEmbedding run unchanged on the
CPU, printed as JSON on stdout.

  scripts/golden/nemo_sandwich.py --nemo DIR --commit SHA > tests/golden/nemo/sandwich.json

DIR holds NeMo's package `nemo/` (a checkout at SHA; only the Sandwich module and the
build_relative_position of alibi_relative_position_embedding.py, which it imports, are read).
The one shim: torch.cuda.current_device returns "cpu" (the module places its tensors there).
"""
import argparse
import json
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--nemo", required=True)
ap.add_argument("--commit", required=True)
args = ap.parse_args()
sys.path.insert(0, args.nemo)
torch.cuda.current_device = lambda: "cpu"
from nemo.collections.nlp.modules.common.megatron.position_embedding.sandwich_relative_position_embedding import (  # noqa: E402
    SandwichRelativePositionEmbedding,
)

out = {"source": "NVIDIA/NeMo nemo/collections/nlp/modules/common/megatron/position_embedding/"
                 "sandwich_relative_position_embedding.py",
       "commit": args.commit, "dtype": "float32 (torch default)", "cases": []}
for H, d, L in ((8, 64, 40), (12, 128, 40), (4, 16, 300)):
    m = SandwichRelativePositionEmbedding(True, H, None, d, max_seq_len=L)
    b = m(L, L)[0]  # (H, L, L): bias of query i, key j
    # the last query row: offsets j - i = -(L - 1) .. 0
    out["cases"].append({"heads": H, "sandwich_dim": d, "qpos": L - 1, "kpos": list(range(L)),
                         "bias": [[float(x) for x in b[h, L - 1]] for h in range(H)]})
json.dump(out, sys.stdout, indent=1)
