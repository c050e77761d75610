#!/usr/bin/python3
"""Golden values from transformers' own code, run unchanged from a checkout.

    scripts/golden/transformers.py --transformers /path/to/transformers --out tests/golden

Writes tests/golden/transformers/ (class_defaults.json, one JSON per config in
tests/golden/configs/, attention goldens, manifest.json). Needs Debian's python3 with torch
and numpy; the names transformers' current main needs beyond them come from
scripts/golden/shims/ (see the manifest's "environment" entry for the list). Not run by CI.
"""

import argparse
import dataclasses
import importlib
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

    return transformers


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


# Model types posenc names (src/encodings/rope_config.cpp, src/formats/, python/) and those of
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
