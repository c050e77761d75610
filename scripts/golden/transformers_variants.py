#!/usr/bin/python3
"""The RoPE variants transformers' own tests and conversion scripts name, for every swept model
type: each written into the model type's config.json (the sweep's saved config), loaded back by
its config class as `from_pretrained` would, and its rotary module run.

    scripts/golden/transformers_variants.py --transformers /path/to/transformers [--out tests/golden]

Reads tests/golden/transformers/sweep.json (the swept model types and their saved configs);
writes tests/golden/transformers/variants.json and variants_cos_sin.npz. Not run by CI; the tests
(tests/python/test_golden_variants.py) only read what it wrote.

The variants, found in the checkout, not from a list:
1. The common model tests every model type runs (tests/test_modeling_common.py,
   test_model_rope_scaling_from_config and test_model_rope_scaling_frequencies): rope_type
   default with rope_theta 10000 and original_max_position_embeddings 16384, and each of the
   scaling types its parametrization names (linear, dynamic, yarn) with factor 10.0 and
   rope_theta 10000. They are merged into the text config's rope_parameters as the tests'
   helper _set_config_rope_params does: into each layer type's block when the block is keyed by
   layer types (a proportional block left as it is), else into the one block; the other keys
   (partial_rotary_factor, mrope_section, ...) stay.
2. A probe of the class rather than a named variant: partial_rotary_factor 0.5 merged into the
   block ("probe:partial_rotary_factor"), which tells whether the class's default rotary
   applies the factor (GPT-NeoX's does) or rotates the whole head_dim anyway (Llama's, Qwen2's).
3. Every literal rope_parameters / rope_scaling dict with a rope_type (or type) in the model
   type's own test files (tests/models/<family>/test_modeling_*.py) and conversion scripts
   (src/transformers/models/<family>/convert_*.py): the dict replaces the config's block (a dict
   keyed by layer types is a per-layer-type block). Dicts that the tests use to check a refusal
   (a negative factor, an unknown key, a missing factor) are kept too: transformers' class then
   refuses, and the golden says so.

For each variant: the rope block of the config posenc reads (sweep.json's saved config with the
variant written into its text part's rope_parameters, rope_scaling removed),
and either what transformers' class and rotary module make of it (as sweep.json's "rope": per
layer type, rope_type, rotary_dim, attention factor, inv_freq in float32 and float64, float32
cos / sin at POSITIONS) or the exception it raised.
"""

import argparse
import ast
import copy
import glob
import inspect
import json
import os
import re
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import transformers_sweep as sweep  # noqa: E402  (the sweep's helpers; it loads transformers.py)

golden = sweep.golden

COMMON_TESTS = "tests/test_modeling_common.py"


def common_variants(checkout):
    """The variants of the common tests, read from the file: the default block of
    test_model_rope_scaling_from_config and its parametrized scaling types."""
    path = os.path.join(checkout, COMMON_TESTS)
    src = open(path).read()
    at = src.find("def test_model_rope_scaling_from_config(")
    deco = src.rfind("@parameterized.expand(", 0, at)
    if at < 0 or deco < 0:
        raise RuntimeError(f"{COMMON_TESTS}: test_model_rope_scaling_from_config not found")
    args = src[deco + len("@parameterized.expand("):src.rfind(")", deco, at)]
    types_ = [t[0] for t in ast.literal_eval(args)]
    body = src[at:src.index("\n    def ", at + 1)]
    def block(text):
        # a dict literal whose values are constants or the parameter's name
        node = ast.parse(text, mode="eval").body
        return {ast.literal_eval(k): (v.id if isinstance(v, ast.Name) else ast.literal_eval(v))
                for k, v in zip(node.keys, node.values)}

    blocks = [block(b) for b in re.findall(r"_set_config_rope_params\(\s*text_config,\s*(\{.*?\}),\s*\)",
                                           body, re.S)]
    default = next(b for b in blocks if b.get("rope_type") == "default")
    scaled = next(b for b in blocks if b.get("rope_type") == "scaling_type")
    out = {"common:default": {"params": default, "merge": True, "source": COMMON_TESTS},
           "probe:partial_rotary_factor": {"params": {"partial_rotary_factor": 0.5}, "merge": True,
                                           "source": "a probe: does the class apply the factor"}}
    for t in types_:
        out[f"common:{t}"] = {"params": dict(scaled, rope_type=t), "merge": True, "source": COMMON_TESTS}
    return out


class _Literals(ast.NodeVisitor):
    """Dict literals with a string rope_type / type key, evaluated (non-literal ones skipped)."""

    def __init__(self):
        self.found = []

    def visit_Dict(self, node):
        # a per-layer-type block: every value a dict literal with a rope_type (kept whole)
        wrapper = {"rope_parameters", "rope_scaling"}  # {"rope_parameters": {...}}: the inner one
        if node.keys and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                             and k.value not in wrapper for k in node.keys) \
                and all(isinstance(v, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "rope_type"
                                                        for k in v.keys) for v in node.values):
            try:
                self.found.append((node.lineno, ast.literal_eval(node)))
                return
            except (ValueError, SyntaxError, TypeError):
                pass
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        if "rope_type" in keys or ("type" in keys and any(k in keys for k in ("factor", "rope_theta"))):
            try:
                v = ast.literal_eval(node)
            except (ValueError, SyntaxError, TypeError):
                v = None
            if isinstance(v, dict) and isinstance(v.get("rope_type", v.get("type")), str):
                self.found.append((node.lineno, v))
        self.generic_visit(node)


def family_variants(checkout, family):
    """{name: {...}} from the family's test files and conversion scripts."""
    files = sorted(glob.glob(os.path.join(checkout, "tests", "models", family, "test_modeling_*.py")))
    files += sorted(glob.glob(os.path.join(checkout, "src", "transformers", "models", family, "convert_*.py")))
    out, seen = {}, []
    for path in files:
        try:
            tree = ast.parse(open(path).read())
        except SyntaxError:
            continue
        v = _Literals()
        v.visit(tree)
        rel = os.path.relpath(path, checkout)
        for line, d in v.found:
            if d in seen:
                continue
            seen.append(d)
            out[f"{rel}:{line}"] = {"params": d, "merge": False, "source": f"{rel}:{line}"}
    return out


def _text_part(d):
    tc = d.get("text_config")
    return tc if isinstance(tc, dict) else d


def write_variant(saved, params, merge):
    """The saved config with the variant written into its text part's rope block."""
    d = copy.deepcopy(saved)
    t = _text_part(d)
    labels = t.get("_rope_type_labels") or t.get("layer_types")
    rp = t.get("rope_parameters")
    rp = dict(rp) if isinstance(rp, dict) else {}
    per_type = bool(labels) and bool(rp) and set(rp).issubset(set(labels))
    if merge:
        if per_type:
            for lt in dict.fromkeys(labels):
                block = dict(rp.get(lt) or {})
                if block.get("rope_type") == "proportional":
                    continue
                block.update(params)
                rp[lt] = block
        else:
            rp.update(params)
    else:
        keyed = bool(labels) and set(params).issubset(set(labels))
        rp = copy.deepcopy(params) if keyed or not per_type else {lt: copy.deepcopy(params) for lt in rp}
    t["rope_parameters"] = rp
    t.pop("rope_scaling", None)
    return d


def run_variant(mt, cfg_cls, d, arrays, prefix):
    """(the rope goldens, the decoder's head_dim as its config gives it, or None)."""
    text = golden.text_config_of(cfg_cls.from_dict(copy.deepcopy(d)))
    modeling = golden.modeling_module(text)
    rot_cls = sweep.rotary_class(modeling, text)
    sweep._mark_mrope(rot_cls, text)
    try:
        hd = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    except Exception:  # noqa: BLE001  (a per-layer head_dim: Gemma 4's)
        hd = None
    return golden.rope_goldens(rot_cls, text, arrays, prefix), hd


MROPE_T = 8  # tokens of the M-RoPE probe


def mrope_probe(mt, cfg_cls, saved, arrays):
    """The class's own M-RoPE, measured: the rotary module of the saved config run on (3, 1, T)
    ids whose rows differ (temporal p, height 2p + 1, width 3p + 2), and for each pair the row
    whose angle gives its cos / sin at every token (in float32, as the module computes them).
    None when the rotary module takes no (3, ...) ids or the config is per layer type."""
    import numpy as np
    import torch

    text = golden.text_config_of(cfg_cls.from_dict(copy.deepcopy(saved)))
    modeling = golden.modeling_module(text)
    rot_cls = sweep.rotary_class(modeling, text)
    sweep._mark_mrope(rot_cls, text)
    if not getattr(rot_cls, "_posenc_mrope", False):
        return None
    rot = rot_cls(text)
    if isinstance(getattr(rot, "rope_type", None), dict):
        return None
    p = torch.arange(MROPE_T, dtype=torch.int64)
    ids = torch.stack([p, 2 * p + 1, 3 * p + 2])[:, None, :]  # (3, 1, T)
    x = torch.zeros(1, MROPE_T, 8, dtype=torch.float32)
    cos, sin = rot(x, ids)
    if cos.dim() == 4:
        raise RuntimeError("the module returned one table per component")
    cos, sin = cos[0].numpy(), sin[0].numpy()  # (T, R) float32
    inv = rot.inv_freq.numpy().astype(np.float32)
    half = inv.size
    layout = "half" if np.array_equal(cos[:, :half], cos[:, half:]) else "interleaved"
    pc = cos[:, :half] if layout == "half" else cos[:, 0::2]
    rows = ids[:, 0, :].numpy().astype(np.float32)  # (3, T)
    assign = []  # the row of each pair; -1 none matches, -2 several (a low frequency)
    for i in range(half):
        hit = [r for r in range(3) if np.max(np.abs(np.cos(rows[r] * inv[i]) - pc[:, i])) <= 2e-7]
        assign.append(hit[0] if len(hit) == 1 else (-1 if not hit else -2))
    arrays[f"{mt}/probe:mrope_ids/cos"] = pc
    arrays[f"{mt}/probe:mrope_ids/sin"] = sin[:, :half] if layout == "half" else sin[:, 0::2]
    src = inspect.getsource(rot_cls)
    m = re.search(r'get\(\s*"mrope_section"\s*,\s*\[([0-9,\s]+)\]\s*\)', src)
    return {"ids": ids[:, 0, :].tolist(), "layout": layout, "pairs": half,
            "component_per_pair": assign,
            "class_default_section": [int(v) for v in m.group(1).split(",")] if m else None,
            "rope_parameters": golden.jsonable(text.rope_parameters),
            "rotary_class": rot_cls.__name__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transformers", required=True)
    ap.add_argument("--transformers-commit", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "golden"))
    ap.add_argument("--only", nargs="*", help="model types (default: every swept one)")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    swept = json.load(open(os.path.join(out, "transformers", "sweep.json")))
    transformers = golden.setup(args.transformers)
    commit = args.transformers_commit or golden.commit_of(args.transformers)
    if not commit:
        sys.exit("--transformers-commit is required")
    if commit != swept["transformers_commit"]:
        sys.exit(f"sweep.json is of transformers {swept['transformers_commit']}, the checkout is {commit}")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    common = common_variants(args.transformers)
    result, arrays, counts = {}, {}, {"variants": 0, "run": 0, "refused_by_transformers": 0}
    mrope = {}
    for mt, e in sorted(swept["model_types"].items()):
        if args.only and mt not in args.only:
            continue
        cfg_cls = CONFIG_MAPPING[mt]
        family = cfg_cls.__module__.split(".")[-2]
        variants = dict(common)
        variants.update(family_variants(args.transformers, family))
        entry = {}
        for name, v in variants.items():
            d = write_variant(e["config"], v["params"], v["merge"])
            rec = {"source": v["source"], "params": v["params"],
                   "written": "merged into the rope block" if v["merge"] else "replaces the rope block",
                   # the config posenc reads: sweep.json's config of the model type with its
                   # text part's rope_parameters replaced by this block (and no rope_scaling)
                   "rope_parameters": _text_part(d)["rope_parameters"]}
            try:
                rope, rec["head_dim"] = run_variant(mt, cfg_cls, d, arrays, f"{mt}/{name}/")
                for g in rope.values():  # kept once: the file's positions, an unchanged buffer
                    g.pop("positions", None)
                    if g["inv_freq_f32_forward"] == g["inv_freq_f32"]:
                        del g["inv_freq_f32_forward"]
                rec["rope"] = rope
                counts["run"] += 1
            except Exception as ex:  # noqa: BLE001  (recorded: transformers refuses the variant)
                tb = traceback.extract_tb(ex.__traceback__)[-1]
                rec["transformers_error"] = (f"{type(ex).__name__}: {ex}"[:300]
                                             + f" (at {os.path.basename(tb.filename)}:{tb.lineno})")
                counts["refused_by_transformers"] += 1
            counts["variants"] += 1
            entry[name] = golden.jsonable(rec)
        try:
            probe = mrope_probe(mt, cfg_cls, e["config"], arrays)
        except Exception as ex:  # noqa: BLE001  (recorded)
            probe = {"error": f"{type(ex).__name__}: {ex}"[:300]}
        if probe is not None:
            mrope[mt] = golden.jsonable(probe)
        result[mt] = entry
        print(f"variants: {mt}: {len(entry)}", file=sys.stderr)
    import numpy as np

    golden.write_json(os.path.join(out, "transformers", "variants.json"), {
        "transformers_commit": commit, "transformers_version": transformers.__version__,
        "generator": "scripts/golden/transformers_variants.py",
        "environment": golden.ENVIRONMENT, "positions": golden.POSITIONS, "counts": counts,
        "model_types": result, "mrope_probe": mrope})
    np.savez_compressed(os.path.join(out, "transformers", "variants_cos_sin.npz"), **arrays)


if __name__ == "__main__":
    main()
