#!/usr/bin/python3
"""Every rotary model type of a transformers checkout, swept: its class defaults, its rotary
module and, per layer, whether its own attention layer applies RoPE, measured by running it.

    scripts/golden/transformers_sweep.py --transformers /path/to/transformers [--out tests/golden]

Writes tests/golden/transformers/sweep.json and sweep_cos_sin.npz. Not run by CI; the tests
(tests/python/test_golden_sweep.py) only read what it wrote.

What is swept: every model_type of CONFIG_MAPPING whose modeling files define a
`*RotaryEmbedding` class, `apply_rotary_pos_emb` or `rotate_half` (found in the code, not from
a list). For each:

1. The config class built with nothing (its defaults, after its own processing); the config as
   `save_pretrained` would write it (`to_dict()`) is kept: that is the config.json posenc reads.
2. The decoder's rotary module built from it: per layer type, rope_type, rotary_dim, attention
   factor, float32 inv_freq buffer, the same init function in float64, and the float32 cos / sin
   of POSITIONS, with the pair layout measured from the cos it returns (as transformers.py).
3. Every decoder layer (the model's own `*DecoderLayer(config, layer_idx)`, with a small hidden
   size and two heads but the real head_dim and RoPE keys) and its attention module run twice on
   the same hidden states: with the rotary module's cos / sin at positions 0, 1, .., T-1 and at
   0, 3, 6, ..: the layer applies position (RoPE or a RoPE-driven term) exactly when the two
   outputs differ. A shift of every position would not tell (RoPE's scores depend only on
   differences); a stretch does.

A model type that cannot be run is listed with the reason (the exception, or why it is out of
scope, e.g. a vision encoder's 2-D patch RoPE).
"""

import argparse
import inspect
import os
import re
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_helpers():
    """scripts/golden/transformers.py (the shared helpers), under a name that is not the
    transformers package's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("golden_transformers",
                                                  os.path.join(HERE, "transformers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


golden = _load_helpers()

ROTARY_CODE = re.compile(r"class \w*RotaryEmbedding\b|def apply_rotary_pos_emb\b|def rotate_half\b")
SEQ = 6  # tokens per layer run
HEADS = 4


def modeling_sources(checkout, cfg_cls):
    """The text of the modeling files beside the config class's module (one family folder)."""
    mod = cfg_cls.__module__  # transformers.models.<family>.configuration_<family>
    folder = os.path.join(checkout, "src", *mod.split(".")[:-1])
    out = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("modeling_") and name.endswith(".py") and not re.match(r"modeling_(tf|flax)_", name):
            with open(os.path.join(folder, name)) as f:
                out.append(f.read())
    return "\n".join(out)


NOT_A_DECODER_PART = re.compile(r"Attention|MLP|Mlp|Expert|Router|Vision|Audio|Encoder|Norm|Embedding|Conv|Mamba")


def decoder_layer_class(modeling):
    """The decoder's layer class: a module class of this file built as (config, layer_idx) whose
    name ends in Layer or Block; a Decoder or Text one where there are several."""
    import torch

    names = []
    for n in dir(modeling):
        c = getattr(modeling, n)
        if (n.startswith("_") or not isinstance(c, type) or not issubclass(c, torch.nn.Module)
                or c.__module__ != modeling.__name__ or NOT_A_DECODER_PART.search(n)
                or not re.search(r"(Layer|Block)$", n)):
            continue
        if "layer_idx" in inspect.signature(c.__init__).parameters:
            names.append(n)
    for prefer in ("Decoder", "Text"):
        if len(names) > 1:
            names = [n for n in names if prefer in n] or names
    if len(names) != 1:
        raise RuntimeError(f"decoder layer classes {names}: several kinds of layer (a hybrid "
                           f"model), not run layer by layer" if names else "no decoder layer "
                           f"class built as (config, layer_idx)")
    return getattr(modeling, names[0])


NOT_DECODER_ROTARY = re.compile(r"Vision|Audio|DiT|ViT|3D|SaProt|Patch")


def rotary_class(modeling, text):
    """The decoder's rotary class: the one the text model builds (`self.rotary_emb = X(`), else
    the single non-vision rotary class of the file."""
    src = inspect.getsource(modeling)
    used = sorted(set(re.findall(r"self\.rotary_emb\s*=\s*(\w+RotaryEmbedding)\(", src)))
    used = [n for n in used if not NOT_DECODER_ROTARY.search(n) and hasattr(modeling, n)]
    if len(used) > 1:
        used = [n for n in used if "Text" in n] or used
    if len(used) == 1:
        return getattr(modeling, used[0])
    return golden.rotary_class(modeling, text)


def tiny(text_cfg):
    """The same config with a small hidden size and two heads, head_dim and RoPE keys kept, few
    experts; set on the instance after the class's processing, so layer_types and the RoPE block
    stay the ones the class derived."""
    try:
        head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
    except Exception:  # noqa: BLE001  (a per-layer head_dim, Gemma 4: each layer keeps its own)
        head_dim = text_cfg.per_layer_config[0].head_dim
    # key / value heads as the class has them: as many as the query heads (MHA, also MLA, whose
    # kv_b_proj makes one key per query head), one (MQA), else HEADS // 2 (GQA, groups of 2)
    heads, kv = getattr(text_cfg, "num_attention_heads", None), getattr(text_cfg, "num_key_value_heads", None)
    kv_small = HEADS if kv is None or kv == heads else 1 if kv == 1 else HEADS // 2
    small = {"hidden_size": HEADS * head_dim, "num_attention_heads": HEADS, "num_key_value_heads": kv_small,
             "intermediate_size": 8, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8,
             "num_experts": 2, "num_local_experts": 2, "n_routed_experts": 2, "num_experts_per_tok": 1,
             "n_shared_experts": 1, "first_k_dense_replace": 0, "vocab_size": 16}
    changed = {}
    for k, v in small.items():
        if hasattr(text_cfg, k) and getattr(text_cfg, k) is not None:
            changed[k] = getattr(text_cfg, k)
            object.__setattr__(text_cfg, k, v)
    try:
        if getattr(text_cfg, "head_dim", None) is None:
            object.__setattr__(text_cfg, "head_dim", head_dim)
    except Exception:  # noqa: BLE001  (per-layer head_dim)
        pass
    text_cfg._attn_implementation = "eager"
    return changed


def attention_of(layer):
    """The attention submodule of a decoder layer: the one whose forward takes position_embeddings."""
    for _, m in layer.named_children():
        if "position_embeddings" in inspect.signature(m.forward).parameters:
            return m
    return None


def layer_applies_position(layer_cls, cfg, i, rot, per_type, layer_type):
    import torch

    torch.manual_seed(i)
    layer = layer_cls(cfg, i).to(torch.float64)
    attn = attention_of(layer)
    if attn is None:
        return {"attention": None, "note": "no submodule takes position_embeddings (no attention "
                                           "of this kind, e.g. a linear / recurrent layer)"}
    for p in attn.parameters():
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.5)
    gen = torch.Generator().manual_seed(7)
    h = torch.randn(1, SEQ, cfg.hidden_size, generator=gen, dtype=torch.float64)
    outs = []
    for stride in (1, 3):
        pos = torch.arange(SEQ)[None] * stride
        with golden.float64_rope_init():
            if getattr(rot, "_posenc_mrope", False):
                cos, sin = rot(h, pos.expand(3, 1, -1))
            else:
                cos, sin = rot(h, pos, layer_type) if per_type else rot(h, pos)
        kwargs = {"hidden_states": h, "position_embeddings": (cos, sin), "attention_mask": None}
        params = inspect.signature(attn.forward).parameters
        if "position_ids" in params:
            kwargs["position_ids"] = pos
        with torch.no_grad():
            o = attn(**kwargs)
        outs.append(o[0] if isinstance(o, tuple) else o)
    diff = float((outs[0] - outs[1]).abs().max())
    return {"attention": type(attn).__name__, "applies_position": diff > 0.0, "max_change": diff}


def sweep_one(mt, cfg_cls, checkout, arrays):
    import torch

    cfg = cfg_cls()
    text = golden.text_config_of(cfg)
    if not any(hasattr(text, k) for k in ("max_position_embeddings", "rope_parameters")):
        raise OutOfScope(f"{type(text).__name__} has neither max_position_embeddings nor "
                         f"rope_parameters: a vision, audio or codec part, not a text decoder")
    saved = cfg.to_dict()
    entry = {"config_class": cfg_cls.__name__, "text_config_class": type(text).__name__,
             "config": golden.jsonable(_plain(saved)), "processed": golden.rope_view(text)}
    modeling = golden.modeling_module(text)
    rot_cls = rotary_class(modeling, text)
    # M-RoPE: the rotary module takes (3, batch, T) position ids (text positions: three equal rows)
    fwd = inspect.getsource(rot_cls.forward)
    rot_cls._posenc_mrope = ("mrope_section" in (getattr(text, "rope_parameters", None) or {})
                             or "expand(3" in fwd or "mrope" in fwd)
    entry["rotary_class"] = rot_cls.__name__
    entry["rope"] = golden.rope_goldens(rot_cls, text, arrays, f"{mt}/")
    entry["layer_plan"] = golden.layer_plan(text)
    # per layer, run the model's own decoder layer with a small hidden size
    layer_cls = decoder_layer_class(modeling)
    with golden.float64_rope_init():
        rot = rot_cls(text)
    per_type = isinstance(getattr(rot, "rope_type", None), dict)
    entry["tiny"] = {k: golden.jsonable(v) for k, v in tiny(text).items()}
    types_ = getattr(text, "layer_types", None)
    layers = []
    for i in range(text.num_hidden_layers):
        lt = types_[i] if types_ else None
        rot_lt = lt if per_type and lt in rot.rope_type else (sorted(rot.rope_type)[0] if per_type else None)
        try:
            r = layer_applies_position(layer_cls, text, i, rot, per_type, rot_lt)
        except Exception as e:  # noqa: BLE001  (recorded per layer)
            r = {"attention": None, "error": f"{type(e).__name__}: {e}"[:300]}
        r["layer_type"] = lt
        layers.append(r)
    entry["layers"] = layers
    del torch
    return entry


def _plain(d):
    """to_dict() without the keys that are no config.json content (dtype objects, private)."""
    return {k: v for k, v in d.items() if not k.startswith("_") and k not in ("dtype", "torch_dtype")}


class OutOfScope(Exception):
    """A rotary model type whose RoPE is not a text decoder's (vision patches, audio frames)."""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transformers", required=True)
    ap.add_argument("--transformers-commit", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "golden"))
    ap.add_argument("--only", nargs="*", help="model types (default: all)")
    args = ap.parse_args()
    transformers = golden.setup(args.transformers)
    # the decoder layers are built here (the scaffold's placeholder refuses): a plain module
    import torch
    import transformers.modeling_layers as ml

    class GradientCheckpointingLayer(torch.nn.Module):
        pass

    ml.GradientCheckpointingLayer = GradientCheckpointingLayer
    golden.ENVIRONMENT.append("sweep: transformers.modeling_layers.GradientCheckpointingLayer is "
                              "a plain torch.nn.Module, so that decoder layers can be built")
    commit = args.transformers_commit or golden.commit_of(args.transformers)
    if not commit:
        sys.exit("--transformers-commit is required")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    import warnings
    import logging

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    swept, not_run, out_of_scope, no_rotary, arrays = {}, {}, {}, [], {}
    for mt in sorted(CONFIG_MAPPING_NAMES):
        if args.only and mt not in args.only:
            continue
        try:
            cls = CONFIG_MAPPING[mt]
            src = modeling_sources(args.transformers, cls)
        except Exception as e:  # noqa: BLE001
            not_run[mt] = f"config class not importable: {type(e).__name__}: {e}"[:300]
            continue
        if not ROTARY_CODE.search(src):
            no_rotary.append(mt)
            continue
        try:
            swept[mt] = sweep_one(mt, cls, args.transformers, arrays)
            print(f"sweep: {mt}: ok", file=sys.stderr)
        except OutOfScope as e:
            out_of_scope[mt] = str(e)
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)[-1]
            not_run[mt] = (f"{type(e).__name__}: {e}"[:300] +
                           f" (at {os.path.basename(tb.filename)}:{tb.lineno})")
            print(f"sweep: {mt}: not run: {not_run[mt]}", file=sys.stderr)
    out = os.path.abspath(args.out)
    import numpy as np

    golden.write_json(os.path.join(out, "transformers", "sweep.json"), {
        "transformers_commit": commit, "transformers_version": transformers.__version__,
        "generator": "scripts/golden/transformers_sweep.py",
        "environment": golden.ENVIRONMENT, "positions": golden.POSITIONS,
        "layer_run": {"seq": SEQ, "heads": HEADS, "strides": [1, 3], "dtype": "float64"},
        "counts": {"model_types": len(CONFIG_MAPPING_NAMES), "rotary": len(swept) + len(not_run) + len(out_of_scope),
                   "swept": len(swept), "not_run": len(not_run), "not_a_text_decoder": len(out_of_scope), "no_rotary_code": len(no_rotary)},
        "model_types": swept, "not_run": not_run, "not_a_text_decoder": out_of_scope, "no_rotary_code": no_rotary})
    np.savez_compressed(os.path.join(out, "transformers", "sweep_cos_sin.npz"), **arrays)


if __name__ == "__main__":
    main()
