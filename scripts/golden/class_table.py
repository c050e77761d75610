#!/usr/bin/python3
"""posenc's table of transformers' config-class defaults for every swept model type, read from
the classes themselves: writes src/formats/hf_class_table.inc and
tests/golden/transformers/class_table.json.

    scripts/golden/class_table.py --transformers /path/to/transformers [--transformers-commit SHA]

The model types are those of tests/golden/transformers/sweep.json (run
scripts/golden/transformers_sweep.py first) that posenc's hand-written rows
(src/formats/hf_class_defaults.cpp, kTable) do not cover. For each, the decoder's config class
is instantiated with nothing and with probe arguments, and what it fills in is measured:

- rope_theta (the flat block's), the whole RoPE block where the class builds one that is not a
  plain default RoPE (Apertus' llama3 x8, Ministral 3's YaRN, Gemma 3n's per-layer-type block);
- head_dim: a fixed default when it does not move with hidden_size / num_attention_heads (two
  probes), else derived (0), with the class's hidden_size and num_attention_heads;
- num_hidden_layers, max_position_embeddings, partial_rotary_factor, qk_rope_head_dim;
- the layer pattern: none when the class builds no layer_types (or all one kind), every_nth_full
  with its period when layer i is full exactly when (i + 1) % P == 0 (at 13 and at the default
  layer count), every_nth_full_last_full when the last is forced full too; any other pattern is
  "unmodelled" (a layer plan then needs the config's own layer_types). A class whose head_dim
  follows neither rule is "unclassified" and left out of the table (a note names it).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


from transformers_sweep import golden  # noqa: E402  (scripts/golden/transformers.py's helpers)



def hand_rows():
    src = open(os.path.join(ROOT, "src", "formats", "hf_class_defaults.cpp")).read()
    import re

    body = src[src.index("const hf_class_defaults kTable[] = {"):]
    body = body[:body.index("};")]
    return set(re.findall(r'\{"([a-z0-9_]+)", "', body))


def text_cfg(cls, **kw):
    return golden.text_config_of(cls(**kw))


def flat_block(rp):
    return isinstance(rp, dict) and ("rope_type" in rp or "type" in rp)


def classify(types_, n):
    """hf_layer_pattern of layer_types for n layers: (pattern, period) or None."""
    if not types_ or len(set(types_)) == 1 and types_[0] == "full_attention":
        return ("none", 0)
    if set(types_) - {"full_attention", "sliding_attention"}:
        return None
    full = [i for i, t in enumerate(types_) if t == "full_attention"]
    if not full:
        return None  # all sliding: a pattern of its own
    p = full[0] + 1
    plain = ["full_attention" if (i + 1) % p == 0 else "sliding_attention" for i in range(n)]
    if types_ == plain:
        return ("every_nth_full", p)
    last = plain[:-1] + ["full_attention"]
    if types_ == last:
        return ("every_nth_full_last_full", p)
    return None


def measure(mt, cls):
    # the decoder's own class instantiated with nothing: a composite may build its text_config
    # with other defaults, but a config's text_config dict is read with the text class's
    tcls = type(text_cfg(cls))
    base = tcls()
    out = {"config_class": tcls.__name__, "text_model_type": base.model_type}
    rp = getattr(base, "rope_parameters", None)
    out["rope_parameters"] = golden.jsonable(rp)
    # a class-built block other than a plain default RoPE is kept whole
    plain = flat_block(rp) and rp.get("rope_type", rp.get("type")) == "default" and \
        set(rp) <= {"rope_type", "rope_theta", "type"}
    out["theta"] = rp.get("rope_theta") if flat_block(rp) else None
    # A config's block without rope_theta takes the class's fallback (the rope_theta field, else
    # the class's default_theta; RotaryEmbeddingConfigMixin.convert_rope_params_to_dict), which is
    # not the theta of a block the class builds itself (HiggsAudioV2: 500000 in its llama3 block,
    # 10000 for a block that states none): measured with a block that states none.
    if flat_block(rp):
        try:
            prp = text_cfg(tcls, rope_parameters={"rope_type": "default"}).rope_parameters
            if flat_block(prp) and prp.get("rope_theta") is not None:
                out["theta"] = prp["rope_theta"]
        except Exception:  # noqa: BLE001  (a class that refuses a bare default block)
            pass
    # the class's own block is kept whole when its theta is not that fallback (PeAudioEncoder:
    # 20000 built, 10000 for a block that states none)
    if plain and out["theta"] != rp.get("rope_theta"):
        plain = False
    out["block"] = None if plain else golden.jsonable(rp)
    try:
        hd = getattr(base, "head_dim", None)
    except Exception:  # noqa: BLE001  (a per-layer head_dim, Gemma 4's: the top-level field's)
        hd = next(f.default for f in golden.dataclasses.fields(tcls) if f.name == "head_dim")
    hs, nh = base.hidden_size, base.num_attention_heads
    moved = []
    for phs, pnh in ((1536, 12), (1000, 8)):
        try:
            probe = text_cfg(tcls, hidden_size=phs, num_attention_heads=pnh, num_key_value_heads=4)
            try:
                moved.append(getattr(probe, "head_dim", None))
            except Exception:  # noqa: BLE001  (per-layer head_dim)
                moved.append(hd)
        except Exception as e:  # noqa: BLE001
            moved.append(f"error: {type(e).__name__}")
    out["head_dim_probes"] = moved
    if hd is not None and all(m == hd for m in moved):
        out["head_dim"] = hd
    elif hd is None or all(m in (phs // pnh, None) for m, (phs, pnh) in zip(moved, ((1536, 12), (1000, 8)))):
        out["head_dim"] = 0  # derived: hidden_size / num_attention_heads
    else:
        out["head_dim"] = None
        out["unclassified"] = f"head_dim {hd} with probes {moved}"
    out["hidden_size"] = hs
    out["num_attention_heads"] = nh
    out["num_hidden_layers"] = base.num_hidden_layers
    out["max_position_embeddings"] = getattr(base, "max_position_embeddings", None)
    prf = getattr(base, "partial_rotary_factor", None)
    if prf is None and flat_block(rp):
        prf = rp.get("partial_rotary_factor")
    out["partial_rotary_factor"] = prf
    out["qk_rope_head_dim"] = getattr(base, "qk_rope_head_dim", None)
    pat = classify(golden.jsonable(getattr(base, "layer_types", None)), base.num_hidden_layers)
    try:
        t13 = golden.jsonable(getattr(text_cfg(tcls, num_hidden_layers=13), "layer_types", None))
    except Exception as e:  # noqa: BLE001
        t13 = f"error: {type(e).__name__}"
    out["layer_types_13"] = t13
    pat13 = classify(t13, 13) if isinstance(t13, list) or t13 is None else None
    if pat is None or pat13 is None or pat != pat13:
        # a pattern of its own (linear_attention hybrids, chunked or NoPE layers): the row keeps
        # the other defaults, and a layer plan then needs the config's own layer_types
        out["pattern"], out["period"] = "unmodelled", 0
        out["pattern_seen"] = f"{pat} / {pat13} at 13 layers"
    else:
        out["pattern"], out["period"] = pat
    return out


def cxx_row(mt, m):
    def num(v):
        return "0" if v is None else repr(float(v)) if isinstance(v, float) else str(v)

    block = "nullptr" if m["block"] is None else \
        'R"(' + json.dumps(m["block"], sort_keys=True, separators=(",", ":")) + ')"'
    return (f'    {{"{m["text_model_type"]}", "{m["config_class"]}", {num(m["theta"])}, 0, '
            f'{num(m["head_dim"])}, {num(m["hidden_size"])}, {num(m["num_attention_heads"])}, '
            f'{num(m["num_hidden_layers"])}, {num(m["max_position_embeddings"])}, '
            f'{num(m["partial_rotary_factor"] if m["partial_rotary_factor"] != 1 else None)}, '
            f'lp::{m["pattern"]}, {m["period"]}, {num(m["qk_rope_head_dim"])}, {block}}},')


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transformers", required=True)
    ap.add_argument("--transformers-commit", default=None)
    args = ap.parse_args()
    golden.setup(args.transformers)
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    commit = args.transformers_commit or golden.commit_of(args.transformers)
    sweep = json.load(open(os.path.join(ROOT, "tests", "golden", "transformers", "sweep.json")))
    if sweep["transformers_commit"] != commit:
        sys.exit(f"sweep.json is of {sweep['transformers_commit']}, the checkout {commit}")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    hand = hand_rows()
    measured, rows, seen = {}, [], set()
    for mt in sorted(sweep["model_types"]):
        try:
            m = measure(mt, CONFIG_MAPPING[mt])
        except Exception as e:  # noqa: BLE001
            measured[mt] = {"error": f"{type(e).__name__}: {e}"[:300]}
            continue
        measured[mt] = m
        tmt = m["text_model_type"]
        if tmt in hand or tmt in seen or "unclassified" in m:
            continue
        seen.add(tmt)
        rows.append(cxx_row(mt, m))
    golden.write_json(os.path.join(ROOT, "tests", "golden", "transformers", "class_table.json"),
                      {"transformers_commit": commit, "generator": "scripts/golden/class_table.py",
                       "hand_rows": sorted(hand), "model_types": measured})
    inc = ["// Generated by scripts/golden/class_table.py from transformers' config classes at",
           f"// {commit} (the swept model types of tests/golden/transformers/sweep.json",
           "// that the hand-written rows above do not cover); do not edit. Columns as kTable's, then",
           "// the RoPE block the class builds when it is not a plain default RoPE (JSON).",
           *rows, ""]
    with open(os.path.join(ROOT, "src", "formats", "hf_class_table.inc"), "w") as f:
        f.write("\n".join(inc))
    print(f"class_table: {len(rows)} generated rows; {len(hand)} hand rows; "
          f"{sum('unclassified' in m for m in measured.values())} unclassified; "
          f"{sum('error' in m for m in measured.values())} errors", file=sys.stderr)


if __name__ == "__main__":
    main()
