#!/usr/bin/python3
"""Golden values from transformers' own code, run unchanged from a checkout.

    scripts/golden/transformers.py --transformers /path/to/transformers --out tests/golden

Writes tests/golden/transformers/ (class_defaults.json, one JSON per config in
tests/golden/configs/, attention goldens, manifest.json). Needs Debian's python3 with torch
and numpy; the names transformers' current main needs beyond them come from
scripts/golden/shims/ (see the manifest's "environment" entry for the list). Not run by CI.
"""

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import json
import math
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SHIMS = os.path.join(HERE, "shims")

# Third-party packages transformers imports at module level for hub I/O, tokenizers and
# serialisation; none is used by the config classes, the RoPE init functions or the eager
# attention, so each is a placeholder module (shims/_stubs.py) when it is not installed.
PLACEHOLDER_PACKAGES = ["huggingface_hub", "httpx", "safetensors", "tokenizers", "filelock", "tqdm"]

ENVIRONMENT = []  # how transformers was run, for the manifest


def setup(checkout):
    """Import transformers from checkout/src with the shims; returns the package."""
    src = os.path.join(checkout, "src")
    if not os.path.isfile(os.path.join(src, "transformers", "__init__.py")):
        sys.exit(f"--transformers must be a transformers checkout (src/transformers), got {checkout}")
    sys.path.insert(0, SHIMS)
    sys.path.insert(0, src)
    import _stubs
    import torch2

    real = torch2.report_version("2.5.0")
    ENVIRONMENT.append(f"torch {real} reported to transformers as 2.5.0 (its minimum); the "
                       f"PyTorch 2 names used are supplied by shims/torch2.py: "
                       f"{', '.join(torch2.install())}")

    missing = _stubs.install(PLACEHOLDER_PACKAGES)
    ENVIRONMENT.append(f"placeholder modules (no I/O) for missing packages: {', '.join(missing)}; "
                       "huggingface_hub from shims/huggingface_hub (dataclasses.strict, "
                       "as_validated_field, constants), regex as the standard re")
    # transformers checks its pinned dependency versions on import (tqdm, tokenizers, ...
    # which are placeholders here): skipped.
    name = "transformers.dependency_versions_check"
    sys.modules[name] = types.ModuleType(name)
    ENVIRONMENT.append("transformers.dependency_versions_check skipped (an empty module)")
    import transformers
    import transformers.configuration_utils  # noqa: F401  (the real integrations package first)
    import transformers_scaffold

    ENVIRONMENT.append("placeholders (shims/transformers_scaffold.py) for the modules a modeling "
                       "file imports but the golden run never executes: "
                       + ", ".join(transformers_scaffold.install()))
    return transformers


def parse_checkout_and_out(doc):
    """The arguments of a golden script that writes one file: --transformers CHECKOUT (set up as
    setup() does) and --out FILE; doc's first line describes it."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--transformers", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    setup(a.transformers)
    return a


def commit_of(checkout):
    try:
        return subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def jsonable(v):
    """A config value as JSON (tuples as lists, dtypes as their names); raises on anything
    else, so a placeholder never reaches a golden file."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            return repr(v)
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if type(v).__module__ == "torch" or str(type(v)) == "<class 'torch.dtype'>":
        return str(v)
    raise TypeError(f"not a plain config value: {v!r} ({type(v).__name__})")


# The config keys that decide RoPE (or its absence) per layer, read after the class's
# processing (field defaults, __post_init__, RoPE standardisation).
ROPE_KEYS = [
    "rope_parameters", "rope_scaling", "rope_theta", "rope_local_base_freq", "rope_type",
    "head_dim", "global_head_dim", "partial_rotary_factor", "rotary_pct", "rotary_emb_base",
    "rotary_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "kv_lora_rank",
    "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
    "layer_types", "sliding_window_pattern", "_sliding_window_pattern", "sliding_window",
    "use_sliding_window", "max_window_layers", "no_rope_layers", "no_rope_layer_interval",
    "nope_layer_interval", "attention_chunk_size", "attn_temperature_tuning", "floor_scale",
    "attn_scale", "mrope_section", "mrope_interleaved", "max_position_embeddings",
    "original_max_position_embeddings", "attn_logit_softcapping", "final_logit_softcapping",
    "query_pre_attn_scalar", "use_bidirectional_attention", "position_embedding_type",
    "attention_bias", "use_qk_norm", "qk_layernorm", "parallel_attn", "alibi",
    "new_decoder_architecture", "use_parallel_residual",
]


def rope_view(cfg):
    """The ROPE_KEYS the config has (an absent key is left out: the modeling code then uses
    its own fallback, e.g. head_dim = hidden_size // num_attention_heads in the RoPE init).
    A heterogeneous config (per_layer_config, e.g. Gemma 4's global_head_dim on full layers)
    also gets "per_layer": {key: [value of layer 0, 1, ...]} for its per-layer keys."""
    out = {}
    per_layer = set(getattr(cfg, "per_layer_attributes", None) or ())
    for k in ROPE_KEYS:
        if k in per_layer:
            continue
        try:
            v = getattr(cfg, k)
        except AttributeError:
            continue
        out[k] = jsonable(v)
    if per_layer:
        n = cfg.num_hidden_layers
        layers = cfg.per_layer_config
        out["per_layer"] = {k: [jsonable(getattr(layers[i], k)) for i in range(n)]
                            for k in sorted(per_layer)}
    return out


def field_defaults(cls):
    """{key: default} for the ROPE_KEYS that are dataclass fields of cls."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name not in ROPE_KEYS:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = jsonable(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = jsonable(f.default_factory())
        else:
            out[f.name] = "<required>"
    return out


# Model types posenc names (src/formats/hf_config.cpp, src/formats/, python/) and those of
# the golden configs; class_defaults.json holds one entry per type.
CLASS_DEFAULT_TYPES = [
    "llama", "llama4", "llama4_text", "mistral", "ministral", "mistral3", "mixtral", "qwen2",
    "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl",
    "qwen2_5_vl_text", "qwen3_vl", "qwen3_vl_text", "gemma", "gemma2", "gemma3", "gemma3_text",
    "gemma4", "gemma4_text", "phi", "phi3", "phimoe", "deepseek_v2", "deepseek_v3", "gpt_oss",
    "gpt_neox", "gpt_neox_japanese", "gptj", "codegen", "persimmon", "falcon", "olmo", "olmo2",
    "olmo3", "smollm3", "cohere", "cohere2", "stablelm", "glm", "glm4", "granite", "starcoder2",
    "exaone4",
]


def describe(cfg):
    d = rope_view(cfg)
    for sub in ("text_config",):
        s = getattr(cfg, sub, None)
        if s is not None and hasattr(s, "to_dict"):
            d[sub] = {"class": type(s).__name__, "model_type": s.model_type, **rope_view(s)}
    return d


def instantiate(cls, kwargs):
    try:
        return {"ok": True, "config": describe(cls(**kwargs))}
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


# Probes that show how a default is derived: head_dim from hidden_size / heads (two shapes),
# the layer pattern for a layer count that is no multiple of the usual periods.
PROBES = {
    "hidden_1536_heads_12": {"hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 4},
    "hidden_1000_heads_8": {"hidden_size": 1000, "num_attention_heads": 8, "num_key_value_heads": 4},
    "layers_13": {"num_hidden_layers": 13},
}


def class_defaults(transformers, minimal_configs):
    """{model_type: class, field defaults, instance with nothing, probes, minimal configs}."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = {}
    for mt in CLASS_DEFAULT_TYPES:
        try:
            cls = CONFIG_MAPPING[mt]
        except KeyError:
            out[mt] = {"class": None, "note": "no config class of this model_type in this commit"}
            continue
        entry = {"class": cls.__name__, "module": cls.__module__,
                 "field_defaults": field_defaults(cls),
                 "instance_with_nothing": instantiate(cls, {})}
        text_cls = getattr(cls, "sub_configs", {}).get("text_config")
        if text_cls is not None:
            # A composite (vision-language) config: its text_config is an instance of the
            # text class, whose own entry carries the probes.
            entry["text_config_class"] = getattr(text_cls, "__name__", str(text_cls))
        for name, kw in ({} if text_cls is not None else PROBES).items():
            r = instantiate(cls, kw)
            if r["ok"]:
                keep = ("head_dim", "global_head_dim", "layer_types", "no_rope_layers",
                        "partial_rotary_factor", "rope_parameters", "num_hidden_layers",
                        "hidden_size", "num_attention_heads", "sliding_window_pattern", "per_layer")
                r["config"] = {k: v for k, v in r["config"].items() if k in keep}
            entry.setdefault("probes", {})[name] = {"kwargs": kw, **r}
        mins = {cid: c for cid, c in minimal_configs.items() if c.get("model_type") == mt}
        for cid, c in sorted(mins.items()):
            entry.setdefault("published_minimal", {})[cid] = instantiate(cls, c)
        out[mt] = entry
    return out


# ---------------------------------------------------------------------------------------------
# Per-config RoPE goldens: the model's own rotary class and RoPE init function.

POSITIONS = [0, 1, 7, 100, 1000, 4095, 100000]


def text_config_of(cfg):
    """The decoder's config: text_config of a composite (vision-language) config, else cfg."""
    sub = getattr(cfg, "text_config", None)
    return sub if sub is not None and hasattr(sub, "to_dict") else cfg


def modeling_module(cfg):
    mod = type(cfg).__module__.replace(".configuration_", ".modeling_")
    return importlib.import_module(mod)


def rotary_class(modeling, text_cfg):
    """The decoder's rotary class of a modeling module (the Text one where there are several)."""
    names = [n for n in dir(modeling) if n.endswith("RotaryEmbedding") and "Vision" not in n
             and not n.startswith("_")]
    names = [n for n in names if getattr(modeling, n).__module__ == modeling.__name__]
    if len(names) > 1:
        names = [n for n in names if "Text" in n] or names
    if len(names) != 1:
        raise RuntimeError(f"{modeling.__name__}: rotary classes {names}")
    return getattr(modeling, names[0])


class float64_rope_init:
    """Runs a RoPE init function with every float32 tensor it creates made float64: torch.float
    and torch.float32 name float64 and Tensor.float() is Tensor.double() for the duration of the
    call, and the default dtype is float64 (torch.tensor of Python floats). The formulas and
    their order are the function's own; only the precision of the tensors changes."""

    def __enter__(self):
        import torch

        self.saved = (torch.float, torch.float32, torch.Tensor.float, torch.get_default_dtype())
        torch.float = torch.float64
        torch.float32 = torch.float64
        torch.Tensor.float = torch.Tensor.double
        torch.set_default_dtype(torch.float64)

    def __exit__(self, *exc):
        import torch

        torch.float, torch.float32, torch.Tensor.float, default = self.saved
        torch.set_default_dtype(default)


def floats(t):
    """A float tensor as a list of Python floats (exact: float32 and float64 both convert
    exactly; JSON keeps them exactly through repr)."""
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def rope_goldens(rot_cls, text_cfg, arrays, prefix):
    """{layer_type or "all": {...}} from the rotary module and its init function; cos / sin of
    POSITIONS (float32, as the model runs) go to arrays[prefix + layer_type + "/cos"|"/sin"]."""
    import numpy as np
    import torch

    rot = rot_cls(text_cfg)
    per_type = isinstance(getattr(rot, "rope_type", None), dict)
    types_ = sorted(rot.rope_type) if per_type else [None]  # the module keeps a set
    out = {}
    for lt in types_:
        key = lt or "all"
        rope_type = rot.rope_type[lt] if per_type else rot.rope_type
        inv32 = getattr(rot, f"{lt}_inv_freq" if per_type else "inv_freq").clone()
        scaling = getattr(rot, f"{lt}_attention_scaling" if per_type else "attention_scaling")
        init = rot.compute_default_rope_parameters if rope_type == "default" else None
        if init is None:
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

            init = ROPE_INIT_FUNCTIONS[rope_type]
        kwargs = {"layer_type": lt} if per_type else {}
        # a heterogeneous config (Gemma 4: global_head_dim on full layers) is resolved per
        # layer type first, as the rotary module does (config.per_layer_config[layer_type])
        init_cfg = text_cfg
        if per_type and getattr(text_cfg, "is_heterogeneous", False):
            init_cfg = text_cfg.per_layer_config[lt]
        with float64_rope_init():
            inv64, scaling64 = init(init_cfg, None, **kwargs)
        if inv64.dtype != torch.float64:
            raise RuntimeError(f"{prefix}{key}: the float64 run gave {inv64.dtype}")
        # cos / sin from the module's forward for the positions, in float32 (x is float32).
        pos = torch.tensor([POSITIONS], dtype=torch.int64)
        x = torch.zeros(1, len(POSITIONS), 8, dtype=torch.float32)
        res = rot(x, pos, lt) if per_type else (
            rot(x, pos.expand(3, 1, -1)) if getattr(rot_cls, "_posenc_mrope", False) else rot(x, pos))
        if isinstance(res, tuple):
            cos, sin = res
            if cos.dim() == 4:  # M-RoPE: (3, B, T, R); text positions give three equal rows
                if not (torch.equal(cos[0], cos[1]) and torch.equal(cos[0], cos[2])):
                    raise RuntimeError("M-RoPE rows differ for text positions")
                cos, sin = cos[0], sin[0]
            cos, sin = cos[0], sin[0]
            # (T, R) with each pair's value twice: [c0..c_{R/2-1} | c0..] (half) or
            # [c0, c0, c1, c1, ...] (interleaved, e.g. Cohere); kept once, (T, R/2).
            h = cos.shape[-1] // 2

            def ulps(a, b):
                # torch's float32 cos / sin of one angle may differ by an ulp between a vector
                # body and its scalar tail (StableLM's 20-wide cos at factor 10): copies of a
                # pair's value are the same within 1 ulp
                ia, ib = a.contiguous().view(torch.int32).long(), b.contiguous().view(torch.int32).long()
                return int((ia - ib).abs().max()) if a.numel() else 0

            if cos.shape[-1] == inv32.numel():  # one value per pair (gpt-oss: halves)
                layout = "half"
            elif max(ulps(cos[:, :h], cos[:, h:]), ulps(sin[:, :h], sin[:, h:])) <= 1:
                layout, cos, sin = "half", cos[:, :h], sin[:, :h]
            elif max(ulps(cos[:, 0::2], cos[:, 1::2]), ulps(sin[:, 0::2], sin[:, 1::2])) <= 1:
                layout, cos, sin = "interleaved", cos[:, 0::2], sin[:, 0::2]
            else:
                raise RuntimeError(f"{prefix}{key}: cos is neither half nor interleaved duplicated")
        else:  # complex freqs_cis (B, T, R/2) (Llama 4, DeepSeek V2): pairs interleaved
            layout = "interleaved"
            cos, sin = res[0].real, res[0].imag
        if cos.dtype != torch.float32:
            raise RuntimeError(f"{prefix}{key}: cos is {cos.dtype}")
        arrays[f"{prefix}{key}/cos"] = cos.numpy().astype(np.float32)
        arrays[f"{prefix}{key}/sin"] = sin.numpy().astype(np.float32)
        out[key] = {
            "rope_type": rope_type,
            "rope_parameters": jsonable(text_cfg.rope_parameters[lt] if per_type else text_cfg.rope_parameters),
            "rotary_dim": 2 * inv32.numel(),
            "attention_factor": float(scaling),
            "attention_factor_float64_run": float(scaling64),
            "inv_freq_f32": floats(inv32),
            "inv_freq_f64": floats(inv64),
            # dynamic and longrope: the buffer the forward used for the positions (seq_len =
            # max position + 1, as dynamic_rope_update computes it)
            "inv_freq_f32_forward": floats(getattr(rot, f"{lt}_inv_freq" if per_type else "inv_freq")),
            "forward_seq_len": max(POSITIONS) + 1,
            "cos_sin_layout": layout,
            "cos_sin_pairs": int(cos.shape[-1]),
            "positions": POSITIONS,
        }
    return out


def layer_plan(text_cfg):
    n = getattr(text_cfg, "num_hidden_layers", None)
    plan = {"num_hidden_layers": n,
            "layer_types": jsonable(getattr(text_cfg, "layer_types", None))}
    nrl = getattr(text_cfg, "no_rope_layers", None)
    if nrl is not None:
        # transformers' attention: use_rope = config.no_rope_layers[layer_idx] (1 = RoPE)
        plan["no_rope_layers"] = jsonable(nrl)
        plan["rope_layers"] = [bool(v) for v in nrl]
    return plan


def config_goldens(transformers, configs, arrays):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = {}
    for cid, entry in configs.items():
        raw = entry["config"]
        cls = CONFIG_MAPPING[raw["model_type"]]
        cfg = cls(**raw)
        text = text_config_of(cfg)
        modeling = modeling_module(text)
        rot_cls = rotary_class(modeling, text)
        rot_cls._posenc_mrope = "mrope_section" in (text.rope_parameters or {})
        g = {"model_id": entry["model_id"], "config_class": type(cfg).__name__,
             "text_config_class": type(text).__name__, "rotary_class": rot_cls.__name__,
             "processed": rope_view(text), "layer_plan": layer_plan(text)}
        g["rope"] = rope_goldens(rot_cls, text, arrays, f"{cid}/")
        out[cid] = g
    return out


# ---------------------------------------------------------------------------------------------
# M-RoPE position ids: Qwen2-VL / Qwen2.5-VL get_rope_index, run unbound on a stand-in `self`
# that has the two attributes it reads (config, get_vision_position_ids: the class's own).

# (segments as posenc.positions_mrope takes them: text tokens, then a vision grid (t, h, w)
# after the merger) -> the pre-merge grid_thw transformers takes (h, w times the merge size 2).
MROPE_CASES = {
    "image": {"segments": [[3, 1, 2, 3], [4]], "kind": "image"},
    # t = 6 > max(h, w) = 2: the text after the video starts at n + max(h, w) on current main
    "video_t_gt_hw": {"segments": [[2, 6, 2, 2], [3]], "kind": "video"},
}


def mrope_goldens(transformers, configs):
    import torch

    out = {}
    for cid, entry in configs.items():
        raw = entry["config"]
        if raw.get("model_type") not in ("qwen2_vl", "qwen2_5_vl"):
            continue
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        cfg = CONFIG_MAPPING[raw["model_type"]](**raw)
        modeling = modeling_module(cfg)
        model_cls = next(getattr(modeling, n) for n in dir(modeling)
                         if n.endswith("VLModel") and hasattr(getattr(modeling, n), "get_rope_index"))
        merge = cfg.vision_config.spatial_merge_size
        cases = {}
        for name, case in MROPE_CASES.items():
            types_, grids = [], []
            for seg in case["segments"]:
                types_ += [0] * seg[0]
                if len(seg) == 4:
                    t, h, w = seg[1:]
                    types_ += [1 if case["kind"] == "image" else 2] * (t * h * w)
                    grids.append([t, h * merge, w * merge])
            n = len(types_)
            stand_in = types.SimpleNamespace(config=cfg)
            stand_in.get_vision_position_ids = types.MethodType(model_cls.get_vision_position_ids, stand_in)
            kwargs = {"image_grid_thw" if case["kind"] == "image" else "video_grid_thw":
                      torch.tensor(grids, dtype=torch.int64)}
            second = None
            if case["kind"] == "video" and "second_per_grid_ts" in model_cls.get_rope_index.__code__.co_varnames:
                second = [1.0]
                kwargs["second_per_grid_ts"] = torch.tensor(second)
            ids, deltas = model_cls.get_rope_index(
                stand_in, torch.zeros(1, n, dtype=torch.int64),
                torch.tensor([types_], dtype=torch.int32), **kwargs)
            cases[name] = {"segments": case["segments"], "kind": case["kind"],
                           "grid_thw": grids, "second_per_grid_ts": second,
                           "position_ids": ids[:, 0, :].tolist(),
                           "rope_delta": int(deltas.reshape(-1)[0])}
        out[cid] = {"model_class": model_cls.__name__, "spatial_merge_size": merge,
                    "tokens_per_second": getattr(cfg.vision_config, "tokens_per_second", None),
                    "cases": cases}
    return out


# ---------------------------------------------------------------------------------------------
# Eager attention with the real attention and rotary classes. The projections are random; the
# goldens are the projected q, k, v (B, T, H * D, before RoPE), the attention output before
# o_proj, and the gradients of sum(output * dout) with respect to q, k and v.

ATTENTION_CASES = {
    # Llama with GQA (4 query heads on 2 KV heads) and Llama 3.1's llama3 RoPE scaling;
    # batch row 1 starts at position 100.
    "llama_gqa": {
        "model_type": "llama", "attention": "LlamaAttention", "layer_idx": 0,
        "config": {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 32, "num_hidden_layers": 1, "intermediate_size": 64,
                   "max_position_embeddings": 131072, "rope_theta": 500000.0,
                   "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
        "batch": 2, "seq": 7, "start": [0, 100], "window": None,
    },
    # A Gemma 2 sliding-window layer (window 4, query_pre_attn_scalar 24 so the scale is not
    # 1/sqrt(D)); logit softcapping off (posenc has none).
    "gemma2_sliding": {
        "model_type": "gemma2", "attention": "Gemma2Attention", "layer_idx": 0,
        "config": {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 1,
                   "head_dim": 16, "num_hidden_layers": 2, "intermediate_size": 64,
                   "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4,
                   "query_pre_attn_scalar": 24, "attn_logit_softcapping": None,
                   "rope_theta": 10000.0},
        "batch": 1, "seq": 11, "start": [3], "window": 4,
    },
    # Qwen2-VL's text attention with M-RoPE (mrope_section [2, 3, 3] for D = 16) on the
    # position ids of an image between text (posenc.positions_mrope [[3, 1, 2, 3], [4]]).
    "qwen2_vl_mrope": {
        "model_type": "qwen2_vl_text", "attention": "Qwen2VLAttention", "layer_idx": 0,
        "config": {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "num_hidden_layers": 1, "intermediate_size": 64, "rope_theta": 1000000.0,
                   "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
        "batch": 1, "seq": 13, "mrope_segments": [[3, 1, 2, 3], [4]], "window": None,
    },
    # Ministral 3: YaRN, then the rotated queries scaled by 1 + beta log(1 + floor(pos / orig))
    # (get_llama_4_attn_scale; beta 0.5 and orig 4 so that the scale steps within the batch's
    # positions, 0..6 and 37..43). The scale is computed in float32 by the model (int64 position
    # ids divided by an int) and cast to the query dtype, in the float64 run too.
    "ministral3_query_scale": {
        "model_type": "ministral3", "attention": "Ministral3Attention", "layer_idx": 0,
        "config": {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "num_hidden_layers": 1, "intermediate_size": 64,
                   "max_position_embeddings": 64, "sliding_window": None,
                   "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                       "original_max_position_embeddings": 4,
                                       "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                       "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5}},
        "batch": 2, "seq": 7, "start": [0, 37], "window": None,
    },
}


def _mask(batch, seq, window, dtype):
    """transformers' additive mask: 0 where key j is visible to query i (j <= i, and
    i - j < window for a sliding layer), the dtype's minimum elsewhere."""
    import torch

    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    visible = j <= i
    if window:
        visible &= (i - j) < window
    m = torch.zeros(seq, seq, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
    return m[None, None].expand(batch, 1, seq, seq)


def attention_goldens(transformers, arrays):
    import torch
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = {}
    for name, case in ATTENTION_CASES.items():
        cfg = CONFIG_MAPPING[case["model_type"]](**case["config"], attn_implementation="eager")
        modeling = modeling_module(cfg)
        attn_cls = getattr(modeling, case["attention"])
        rot_cls = rotary_class(modeling, cfg)
        B, T = case["batch"], case["seq"]
        entry = {"model_type": case["model_type"], "attention_class": attn_cls.__name__,
                 "rotary_class": rot_cls.__name__, "config": case["config"],
                 "batch": B, "seq": T, "window": case["window"], "causal": True,
                 "rope_precision": {"f64": "float64 inv_freq, angles and cos / sin (the rotary "
                                           "module under float64_rope_init)",
                                    "f32": "float32, as the model runs"}}
        for dtype in (torch.float64, torch.float32):
            tag = "f64" if dtype == torch.float64 else "f32"
            torch.manual_seed(0)
            attn = attn_cls(cfg, case["layer_idx"])
            for p in attn.parameters():
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.3)
            attn = attn.to(dtype)
            gen = torch.Generator().manual_seed(1)
            hidden = torch.randn(B, T, cfg.hidden_size, generator=gen, dtype=torch.float64).to(dtype)
            # float64: the rotary module built and run under float64_rope_init, so inv_freq,
            # angles and cos / sin are float64 (the model's own float64 run would cast its
            # float32 cos / sin); float32: as the model runs.
            with (float64_rope_init() if dtype == torch.float64 else contextlib.nullcontext()):
                rot = rot_cls(cfg)
                if "mrope_segments" in case:
                    pos = torch.tensor(case["position_ids"])[:, None, :].expand(3, B, T)
                    cos, sin = rot(hidden, pos)
                else:
                    pos = torch.stack([torch.arange(T) + s for s in case["start"]])
                    lt = getattr(attn, "layer_type", None)
                    cos, sin = rot(hidden, pos, lt) if isinstance(getattr(rot, "rope_type", None), dict) \
                        else rot(hidden, pos)
            if cos.dtype != dtype:
                raise RuntimeError(f"{name}: cos is {cos.dtype}, wanted {dtype}")
            captured = {}

            def keep(key):
                def hook(module, inputs, output):
                    output.retain_grad()
                    captured[key] = output
                return hook

            handles = [getattr(attn, f"{k}_proj").register_forward_hook(keep(k)) for k in "qkv"]
            handles.append(attn.o_proj.register_forward_pre_hook(
                lambda module, inputs: captured.__setitem__("o", inputs[0])))
            kw = {}
            if "position_ids" in inspect.signature(attn.forward).parameters:
                kw["position_ids"] = pos  # Ministral 3's query scale reads them
            attn(hidden, position_embeddings=(cos, sin),
                 attention_mask=_mask(B, T, case["window"], dtype), **kw)
            for h in handles:
                h.remove()
            dout = torch.randn(captured["o"].shape, generator=gen, dtype=torch.float64).to(dtype)
            (captured["o"] * dout).sum().backward()
            for k in "qkv":
                arrays[f"{name}/{tag}/{k}"] = captured[k].detach().numpy()
                arrays[f"{name}/{tag}/d{k}"] = captured[k].grad.numpy()
            arrays[f"{name}/{tag}/out"] = captured["o"].detach().numpy()
            arrays[f"{name}/{tag}/dout"] = dout.numpy()
            entry["scale"] = float(attn.scaling)
            entry["head_dim"] = int(attn.head_dim)
            entry["num_heads"] = cfg.num_attention_heads
            entry["num_kv_heads"] = cfg.num_key_value_heads
            entry["positions"] = pos.tolist()
        out[name] = entry
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transformers", required=True, help="path to a transformers checkout")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "golden"),
                    help="tests/golden of the project")
    ap.add_argument("--transformers-commit", default=None,
                    help="the checkout's commit, recorded in the goldens (default: git rev-parse "
                         "HEAD in the checkout; required when it is not a git work tree)")
    ap.add_argument("--only", choices=["class_defaults", "all"], default="all")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    transformers = setup(args.transformers)
    commit = args.transformers_commit or commit_of(args.transformers)
    if not commit:
        sys.exit(f"--transformers-commit is required: {args.transformers} is not a git work tree")
    configs = load_configs(os.path.join(out, "configs"))
    minimal = {cid: c["config"] for cid, c in configs.items() if c.get("minimal")}
    cd = {"transformers_commit": commit, "transformers_version": transformers.__version__,
          "how": "each class instantiated with no arguments, with the probes' arguments and "
                 "with the minimal published configs (tests/golden/configs); values read "
                 "after the class's own processing",
          "environment": ENVIRONMENT,
          "classes": class_defaults(transformers, minimal)}
    write_json(os.path.join(out, "transformers", "class_defaults.json"), cd)
    if args.only == "class_defaults":
        return
    import numpy as np

    arrays = {}
    goldens = config_goldens(transformers, configs, arrays)
    write_json(os.path.join(out, "transformers", "rope.json"),
               {"transformers_commit": commit, "positions": POSITIONS, "configs": goldens})
    np.savez_compressed(os.path.join(out, "transformers", "rope_cos_sin.npz"), **arrays)
    mrope = mrope_goldens(transformers, configs)
    write_json(os.path.join(out, "transformers", "mrope_positions.json"),
               {"transformers_commit": commit, "configs": mrope})
    # The attention case on M-RoPE ids takes them from Qwen2-VL's get_rope_index (image case).
    q2 = next(v for v in mrope.values() if v["model_class"] == "Qwen2VLModel")
    ATTENTION_CASES["qwen2_vl_mrope"]["position_ids"] = q2["cases"]["image"]["position_ids"]
    att_arrays = {}
    att = attention_goldens(transformers, att_arrays)
    write_json(os.path.join(out, "transformers", "attention.json"),
               {"transformers_commit": commit, "cases": att})
    np.savez_compressed(os.path.join(out, "transformers", "attention.npz"), **att_arrays)
    write_json(os.path.join(out, "transformers", "manifest.json"), manifest(commit, transformers))


def manifest(commit, transformers):
    import torch

    return {
        "transformers_commit": commit,
        "transformers_version": transformers.__version__,
        "torch": torch.__version__,
        # the float32 goldens (pow, cos, sin) depend on the kernels of this build
        "torch_build": [l.strip() for l in torch.__config__.show().splitlines()
                        if "CPU capability" in l or "GCC" in l],
        "generator": "scripts/golden/transformers.py (scripts/golden/regen)",
        "environment": ENVIRONMENT,
        "files": {
            "class_defaults.json": "per model_type: the config class, its field defaults for "
                "the RoPE keys, the processed RoPE keys of an instance built with nothing, with "
                "probe arguments (head_dim derivation, layer pattern for 13 layers) and with each "
                "minimal published config",
            "rope.json": "per config of tests/golden/configs: the processed RoPE keys of the "
                "decoder config, the layer plan, and per layer type (key 'all' when the model has "
                "one RoPE): rope_type, rope_parameters, rotary_dim, attention_factor (the rotary "
                "module's attention_scaling), inv_freq_f32 (its float32 inv_freq buffer at "
                "construction), inv_freq_f32_forward (the buffer after the forward for the "
                "positions: differs for longrope / dynamic), inv_freq_f64 (the same init function "
                "in float64, see float64), cos_sin_layout and cos_sin_pairs",
            "rope_cos_sin.npz": "'<config>/<layer type>/cos' and '/sin': float32 (positions, "
                "rotary_dim / 2), the rotary module's forward output for the positions of "
                "rope.json (x float32), each pair's value once (half: the first half; "
                "interleaved: the even entries; complex freqs_cis: real / imaginary parts)",
            "mrope_positions.json": "Qwen2-VL / Qwen2.5-VL get_rope_index (3, n) ids for an image "
                "between text and a video with t > max(h, w) (segments in posenc.positions_mrope's "
                "form: text count, then the merged grid t, h, w)",
            "attention.json / attention.npz": "eager attention of the real attention class with "
                "the real rotary: '<case>/<f64|f32>/<q|k|v|out|dout|dq|dk|dv>', q/k/v the "
                "projections (B, T, heads * D) before RoPE, out the attention output before "
                "o_proj, d* the gradients of sum(out * dout)",
        },
        "float64": "inv_freq_f64 runs the rotary class's own init function (its "
                   "compute_default_rope_parameters, or ROPE_INIT_FUNCTIONS[rope_type]) with "
                   "torch.float / torch.float32 naming float64, Tensor.float() as double() and "
                   "float64 as the default dtype during the call: the same formulas with every "
                   "tensor in float64 (Python-float steps such as math.log were float64 already)",
        "positions": POSITIONS,
    }


def load_configs(folder):
    """{id: {"config": dict, ...index entry}} from configs/index.json and the files."""
    index_path = os.path.join(folder, "index.json")
    if not os.path.exists(index_path):
        return {}
    with open(index_path) as f:
        index = json.load(f)
    out = {}
    for cid, entry in index["configs"].items():
        with open(os.path.join(folder, entry["file"])) as f:
            out[cid] = {**entry, "config": json.load(f)}
    return out


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")


if __name__ == "__main__":
    main()
