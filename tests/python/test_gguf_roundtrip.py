"""posenc reads llama.cpp's conversion of every swept transformers model type it converts
(tests/golden/gguf_roundtrip, scripts/golden/gguf_roundtrip.py: convert_hf_to_gguf.py's
metadata path run unchanged on the class's default config as save_pretrained writes it) and
must find transformers' answer (tests/golden/transformers/sweep.json), or the loss is named
below. Bounds are test_golden_sweep.py's: rope_type, rotary_dim, theta equal; attention factor
within 8 * 2^-53 relative; inv_freq within (ln(theta) + 8) * 2^-53 relative per frequency.

A named loss (LOSSES) states the change the GGUF keys carry instead: the swept config with that
change, read by posenc from the config, must give what posenc reads from the GGUF (same bounds),
and must differ from transformers' answer; so a loss that disappears or changes fails here.
Model types the converter could not convert are named in CONVERTER_FAILURES with the exception
the manifest records.
"""

import copy
import json
import math
import pathlib
import subprocess
import warnings

import numpy as np
import pytest

import posenc

HERE = pathlib.Path(__file__).resolve().parents[1] / "golden"
GOLD = HERE / "gguf_roundtrip"
MANIFEST = json.loads((GOLD / "manifest.json").read_text())
SWEEP = json.loads((HERE / "transformers" / "sweep.json").read_text())
TYPES = SWEEP["model_types"]
CONV = MANIFEST["model_types"]
U64 = 2.0**-53
U32 = 2.0**-24

# {model type: (change to the swept config that the GGUF carries instead, why)}
LOSSES = {
    # BitnetModel.set_gguf_parameters always writes rope.scaling.type linear with factor 1.0:
    # the same frequencies under another name (transformers: rope_type default)
    "bitnet": ({"rope_parameters": {"rope_type": "linear", "factor": 1.0}},
               "the converter writes rope.scaling.type linear, factor 1 (identity) for every BitNet"),
    # GlmOCRModel inherits Glm4Model's partial_rotary_factor = 0.5 when rope_parameters names
    # none and writes rope.dimension_count = 64 * 0.5; GlmOcrTextConfig's default rotates the
    # whole head (transformers: rotary_dim 64). What the GGUF carries is the config read with no
    # class (model_type null: 1-D RoPE over 32 dims, without GLM-OCR's own M-RoPE sections, which
    # would not fit them; transformers' GLM-OCR fails on factor 0.5)
    "glm_ocr": ({"model_type": None,
                 "text_config": {"partial_rotary_factor": 0.5, "model_type": None}},
                "rope.dimension_count 32: the converter's GLM-4 default factor 0.5, not the class's 1"),
    # yarn truncate false: GGUF has no key for it; llama.cpp always rounds the correction range
    # (truncate true)
    "gpt_oss": ({"rope_parameters": {"truncate": True}},
                "yarn truncate false cannot be carried by the GGUF keys (llama.cpp rounds: truncate true)"),
}

# {model type: (words posenc's GGUF error must contain, why)}: posenc refuses the GGUF as it
# refuses the swept config (test_golden_sweep.REFUSED)
REFUSED = {
    "glm4_moe": ("is not a multiple of", "hidden 4096 over 96 heads: no integer head_dim "
                 "(the converter writes rope.dimension_count 21, transformers rotates 21 of 42)"),
    "granitemoehybrid": ("rotates no layer", "position_embedding_type null by default: no RoPE; "
                         "the converter writes rope.scaling.finetuned false, no layer rotated"),
}

# {model type: (exception, words in its message, why)}: the converter's own failure on the class's
# default config, as the manifest records it
_T5 = "transformers 5 saves it under rope_parameters / another name; the converter reads the old key"
CONVERTER_FAILURES = {
    "bamba": ("AssertionError", "attn_layer_indices", "the default config states no attention layers"),
    "cohere2": ("KeyError", "rotary_pct", _T5),
    "dbrx": ("KeyError", "rope_theta", _T5 + " (attn_config.rope_theta)"),
    "deepseek_v4": ("KeyError", "num_hash_layers", "a key the class default does not write"),
    "dots1": ("error", "not an integer", "a null key written as an integer GGUF value"),
    "falcon_h1": ("KeyError", "head_dim", "head_dim is null in the class default"),
    "gemma4": ("KeyError", "global_head_dim", "a key the class default does not write"),
    "gemma4_text": ("KeyError", "global_head_dim", "a key the class default does not write"),
    "gemma4_unified": ("KeyError", "global_head_dim", "a key the class default does not write"),
    "gpt_neox": ("KeyError", "rotary_pct", _T5),
    "hunyuan_v1_moe": ("KeyError", "moe_intermediate_size", "a key the class default does not write"),
    "lfm2_moe": ("TypeError", "NoneType", "a list the class default leaves null"),
    "mimo_v2_flash": ("KeyError", "swa_head_dim", "a key the class default does not write"),
    "minimax_m2": ("KeyError", "rotary_dim", "rotary_dim is not in the class default"),
    # BertModel.__init__ indexes id2label[0]: config.json's keys are strings; transformers'
    # AutoConfig (absent here: the shim makes the converter read config.json) would give ints
    "modernbert": ("KeyError", "0", "id2label read from config.json has string keys"),
    "nomic_bert": ("KeyError", "0", "id2label read from config.json has string keys"),
    "pe_audio": ("KeyError", "0", "id2label read from config.json has string keys"),
    "phimoe": ("KeyError", "original_max_position_embeddings",
               "the LongRoPE factor tensors need a key the class default does not write"),
    "step3p7": ("KeyError", "num_attention_groups", "a key the class default does not write"),
}


def _cases():
    out = []
    for mt, rec in sorted(CONV.items()):
        if rec["status"] == "converted":
            for lt in TYPES[mt]["rope"]:
                out.append(pytest.param(mt, None if lt == "all" else lt, id=f"{mt}-{lt}"))
    return out


def _gguf(cli, mt, lt):
    cmd = [str(cli), "rope", "freqs", "--gguf", str(GOLD / CONV[mt]["gguf"]), "--format", "json"]
    if lt:
        cmd += ["--layer-type", lt]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def _merge(a, b):
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = _merge(out.get(k) or {}, v) if isinstance(v, dict) else v
    return out


def _differences(got, want):
    """What differs between two readings {scaling, theta, rotary_dim, attention_factor, inv_freq}."""
    bad = []
    for k in ("scaling", "rotary_dim", "theta"):
        if got[k] != want[k]:
            bad.append(f"{k} {got[k]!r} vs {want[k]!r}")
    # Ministral 3's query scale (transformers' llama_4_scaling_beta over
    # original_max_position_embeddings; llama.cpp's attention.temperature_scale over
    # n_ctx_orig_yarn): the float32 key holds the beta rounded once.
    gb, wb = got.get("llama_4_scaling_beta", 0.0), want.get("llama_4_scaling_beta", 0.0)
    if abs(gb - wb) > U32 * abs(wb) or (wb and got.get("llama_4_scaling_floor")
                                          != want.get("llama_4_scaling_floor")):
        bad.append(f"query scale {gb!r} / {got.get('llama_4_scaling_floor')!r} vs {wb!r} / "
                   f"{want.get('llama_4_scaling_floor')!r}")
    a = want["attention_factor"]
    if abs(got["attention_factor"] - a) > 8 * U64 * abs(a):
        bad.append(f"attention_factor {got['attention_factor']!r} vs {a!r}")
    g, w = np.asarray(got["inv_freq"]), np.asarray(want["inv_freq"])
    if g.shape != w.shape:
        bad.append(f"{g.size} frequencies vs {w.size}")
    else:
        nz = w != 0
        if not np.array_equal(g[~nz], w[~nz]):
            bad.append("zero frequencies differ")
        rel = np.abs(g[nz] - w[nz]) / w[nz]
        bound = (math.log(want["theta"]) + 8) * U64
        if rel.size and rel.max() > bound:
            i = int(np.argmax(rel))
            bad.append(f"inv_freq {rel[i]:.2e} relative > {bound:.2e}")
    return bad


def _transformers(mt, lt):
    g = TYPES[mt]["rope"][lt or "all"]
    out = {"scaling": g["rope_type"], "rotary_dim": g["rotary_dim"],
           "theta": g["rope_parameters"]["rope_theta"], "attention_factor": g["attention_factor"],
           "inv_freq": g["inv_freq_f64"]}
    beta = g["rope_parameters"].get("llama_4_scaling_beta")
    if mt in ("ministral3", "mistral4") and beta:  # the classes that read it
        out["llama_4_scaling_beta"] = beta
        out["llama_4_scaling_floor"] = g["rope_parameters"]["original_max_position_embeddings"]
    return out


def _from_config(cfg, lt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = posenc.RopeConfig.from_hf(cfg, layer_type=lt)
    return {"scaling": c.scaling, "rotary_dim": c.rotary_dim, "theta": c.theta,
            "attention_factor": c.attention_factor, "inv_freq": c.inv_freq(),
            "llama_4_scaling_beta": c.llama_4_scaling_beta,
            "llama_4_scaling_floor": c.llama_4_scaling_floor}


def test_manifest_accounts_for_every_swept_type():
    assert set(CONV) == set(TYPES)
    assert MANIFEST["transformers_commit"] == SWEEP["transformers_commit"]
    assert MANIFEST["llama_cpp"]["commit"] == "6dafc14e50e1c248621618f3786f5005767a1d39"
    st = [r["status"] for r in CONV.values()]
    assert set(st) <= {"converted", "converter_failed", "no_converter_class"}
    c = MANIFEST["counts"]
    assert c["converted"] == st.count("converted") and c["converter_failed"] == st.count("converter_failed")
    assert c["converter_class"] == c["converted"] + c["converter_failed"]
    for mt, r in CONV.items():
        if r["status"] == "no_converter_class":
            assert r["architectures_tried"], mt
        else:
            assert r["converter_class"] and r["architecture_hf"], mt


def test_files_are_small_and_as_recorded():
    import hashlib
    total = 0
    for mt, r in CONV.items():
        if r["status"] == "converted":
            b = (GOLD / r["gguf"]).read_bytes()
            assert hashlib.sha256(b).hexdigest() == r["sha256"], mt
            total += len(b)
    assert total < 3 * 2**20


@pytest.mark.parametrize("mt", sorted(mt for mt, r in CONV.items() if r["status"] == "converter_failed"))
def test_converter_failure_is_named(mt):
    assert mt in CONVERTER_FAILURES, f"{mt}: the converter failed ({CONV[mt]['exception']}: " \
                                     f"{CONV[mt]['message']}) and the test does not name why"
    exc, words, _why = CONVERTER_FAILURES[mt]
    assert CONV[mt]["exception"] == exc and words in CONV[mt]["message"], CONV[mt]


def test_named_entries_are_current():
    for mt in CONVERTER_FAILURES:
        assert CONV[mt]["status"] == "converter_failed", f"{mt}: converts now; drop it"
    for mt in {**LOSSES, **REFUSED}:
        assert CONV[mt]["status"] == "converted", mt


@pytest.mark.parametrize("mt,lt", _cases())
def test_gguf_reads_as_transformers(cli, mt, lt):
    p = _gguf(cli, mt, lt)
    if mt in REFUSED:
        words, _why = REFUSED[mt]
        assert p.returncode == 2 and words in p.stderr, f"{mt}: {p.returncode} {p.stderr[-400:]}"
        return
    assert p.returncode == 0, f"{mt}/{lt}: posenc cannot read the GGUF: {p.stderr[-400:]}"
    got = json.loads(p.stdout)
    want = _transformers(mt, lt)
    bad = _differences(got, want)
    if mt in LOSSES:
        change, why = LOSSES[mt]
        assert bad, f"{mt}: the GGUF now agrees with transformers; drop the loss ({why})"
        carried = _from_config(_merge(TYPES[mt]["config"], change), lt)
        still = _differences(got, carried)
        assert not still, f"{mt}: the GGUF is not the swept config with {change} ({why}): {still}"
        return
    assert not bad, f"{mt}/{lt or 'all'}: GGUF ({CONV[mt]['gguf_architecture']}) vs transformers: {bad}"
