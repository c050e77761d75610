"""posenc against the RoPE variants transformers' own tests and conversion scripts name, for every
swept model type (tests/golden/transformers/variants.json, scripts/golden/transformers_variants.py
at the commit it names): the common model tests' default block and linear / dynamic / yarn with
factor 10, and each literal rope block of the family's tests and conversion scripts.

Each variant is the swept config (sweep.json) with its text part's rope_parameters replaced by
the variant's block, as a user's config.json would hold it; transformers' class loaded it and its
rotary module ran. posenc reads the same dict and must agree (the bounds of test_golden_sweep.py:
rope_type, rotary_dim, theta equal; attention factor within 8 * 2^-53; float64 inv_freq within
(ln theta + 8) * 2^-53; float32 cos / sin under angle hf_f32 the correctly rounded values of
transformers' float32 angles, within 1 ulp (2 with an attention factor) of the module's output),
or refuse it by name. Where transformers' class refuses or fails on a variant, posenc must refuse
it too, or the case is in TRANSFORMERS_FAILS with the reason posenc reads it.
"""

import copy
import json
import pathlib
import warnings

import numpy as np
import pytest

import posenc
from test_golden_sweep import (DIVERGES, REFUSED, TYPES, assert_cos_sin_match,
                               assert_rope_matches)

GOLD = pathlib.Path(__file__).resolve().parents[1] / "golden" / "transformers"
VARIANTS = json.loads((GOLD / "variants.json").read_text())
COS_SIN = np.load(GOLD / "variants_cos_sin.npz")
U64 = 2.0**-53

# Variants transformers' class fails on where posenc reads the config: {(model type, variant):
# (words of the failure, why posenc reads it)}. Each is checked: transformers' error holds the
# words, and posenc reads the config.
_HEAD_DIM_NONE = ("unsupported operand type(s) for *: 'NoneType' and 'float'",
                  "the class's head_dim default is None and the dynamic / yarn init functions read "
                  "getattr(config, 'head_dim', ...) without the `or hidden_size // heads` fallback "
                  "the default init has; posenc derives head_dim as the default init does")
_YARN_ORIGINAL = ("Missing required keys in `rope_parameters` for 'rope_type'='yarn': "
                  "{'original_max_position_embeddings'}",
                  "these classes validate yarn blocks strictly; the others run yarn without it "
                  "(original = max_position_embeddings), which posenc follows for every class, "
                  "with a note")
TRANSFORMERS_FAILS = {
    **{(mt, v): _HEAD_DIM_NONE for mt in ("hunyuan_v1_dense", "hunyuan_v1_moe", "minimax",
                                          "ministral", "mixtral")
       for v in ("common:dynamic", "common:yarn")},
    **{(mt, "common:yarn"): _YARN_ORIGINAL for mt in (
        "cohere2_moe", "diffusion_gemma", "diffusion_gemma_text", "gemma4", "gemma4_text",
        "gemma4_unified", "gemma4_unified_text", "laguna", "mellum", "mimo_v2_flash", "step3p5",
        "step3p7", "zaya")},
    **{("dbrx", v): ("Found unknown kwargs", "DbrxConfig cannot load the sub-config dicts its own "
                     "to_dict writes (_name_or_path); not a RoPE matter")
       for v in ("common:default", "common:linear", "common:dynamic", "common:yarn",
                 "probe:partial_rotary_factor")},
    ("zaya", "tests/models/zaya/test_modeling_zaya.py:140"): (
        "KeyError: 'hybrid'",
        "the test's block names hybrid_sliding, a layer type the default config (every layer "
        "hybrid) lacks, so transformers' standardisation reads it as one flat block and the "
        "rotary module finds no 'hybrid' entry; posenc reads the per-layer-type block"),
}


# Variants transformers runs and posenc refuses, with the words of posenc's error and why.
_TYPE_TWICE = ("rope_type", "the class writes both type and rope_type; the variant changes "
               "rope_type alone, so the two disagree: transformers takes rope_type silently, posenc "
               "refuses the ambiguous block by name")
_TINY_SECTIONS = ("mrope_section must sum to rotary_dim / 2",
                  "the tests' tiny model's sections on the full-size default: transformers' rotary "
                  "module does not check them (its attention's split would fail); posenc refuses")
_NEGATIVE_FACTOR = ("factor must be >= 1",
                    "the family's test checks that transformers only warns on a negative factor; its "
                    "rotary module then divides by -999; posenc refuses")
_CLASS_SECTIONS = ("mrope_section must sum to rotary_dim / 2",
                   "the class's own M-RoPE sections [11, 11, 10] cover 32 pairs and factor 0.5 "
                   "makes 64: transformers' interleaving turns the rest at the temporal id, posenc "
                   "refuses sections that do not sum to the pairs (GLM-OCR's split fails in "
                   "transformers too, so it is a plain refusal)")
VARIANT_REFUSED = {
    **{(mt, "probe:partial_rotary_factor"): _CLASS_SECTIONS
       for mt in ("qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5_text")},
    ("diffllama", "tests/models/diffllama/test_modeling_diffllama.py:300"): _NEGATIVE_FACTOR,
    ("eurobert", "tests/models/eurobert/test_modeling_eurobert.py:327"): _NEGATIVE_FACTOR,
    **{(mt, f"common:{t}"): _TYPE_TWICE for mt in ("ministral3", "mistral4")
       for t in ("default", "linear", "dynamic")},
    **{(mt, v): _TINY_SECTIONS for mt, v in (
        ("qwen2_5_omni_dit", "tests/models/qwen2_5_omni/test_modeling_qwen2_5_omni.py:97"),
        ("qwen2_5_omni_talker", "tests/models/qwen2_5_omni/test_modeling_qwen2_5_omni.py:97"),
        ("qwen2_5_omni_text", "tests/models/qwen2_5_omni/test_modeling_qwen2_5_omni.py:97"),
        ("qwen2_5_omni_thinker", "tests/models/qwen2_5_omni/test_modeling_qwen2_5_omni.py:97"),
        ("qwen3_omni_moe_talker_code_predictor",
         "tests/models/qwen3_omni_moe/test_modeling_qwen3_omni_moe.py:115"),
        ("qwen3_omni_moe_talker_text", "tests/models/qwen3_omni_moe/test_modeling_qwen3_omni_moe.py:115"),
        ("qwen3_vl", "tests/models/qwen3_vl/test_modeling_qwen3_vl.py:74"),
        ("qwen3_vl", "tests/models/qwen3_vl/test_modeling_qwen3_vl.py:411"),
        ("qwen3_vl_moe", "tests/models/qwen3_vl_moe/test_modeling_qwen3_vl_moe.py:77"),
        ("qwen3_vl_moe_text", "tests/models/qwen3_vl_moe/test_modeling_qwen3_vl_moe.py:77"),
        ("qwen3_vl_text", "tests/models/qwen3_vl/test_modeling_qwen3_vl.py:74"),
        ("qwen3_vl_text", "tests/models/qwen3_vl/test_modeling_qwen3_vl.py:411"))},
}


# Variants where transformers' rotary module departs from what its model can run and posenc
# keeps the model's convention: {(model type, variant): (posenc's values, why)}; both sides held.
VARIANT_DIVERGES = {
    ("gpt_neox_japanese", "probe:partial_rotary_factor"): (
        {"rotary_dim": 40},
        "GPTNeoXJapaneseRotaryEmbedding builds 40 frequencies over the whole head_dim 80 while the "
        "attention rotates its first rotary_ndims = int(80 * 0.5) = 40 dims: the shapes do not "
        "broadcast and the model fails; posenc rotates 40 dims as GPT-NeoX does (rotary_pct)"),
}


def _config(mt, name):
    cfg = copy.deepcopy(TYPES[mt]["config"])
    text = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    text["rope_parameters"] = copy.deepcopy(VARIANTS["model_types"][mt][name]["rope_parameters"])
    text.pop("rope_scaling", None)
    return cfg


def _read(mt, name, lt=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return posenc.RopeConfig.from_hf(_config(mt, name), layer_type=lt)


def run_cases():
    out = []
    for mt, e in sorted(VARIANTS["model_types"].items()):
        for name, v in e.items():
            for lt in v.get("rope", {}):
                out.append(pytest.param(mt, name, None if lt == "all" else lt, id=f"{mt}-{name}-{lt}"))
    return out


def failed_cases():
    return [pytest.param(mt, name, id=f"{mt}-{name}")
            for mt, e in sorted(VARIANTS["model_types"].items())
            for name, v in e.items() if "transformers_error" in v]


def test_every_swept_model_type_has_its_variants():
    assert VARIANTS["transformers_commit"] == json.loads((GOLD / "sweep.json").read_text())["transformers_commit"]
    assert set(VARIANTS["model_types"]) == set(TYPES)
    for mt, e in VARIANTS["model_types"].items():
        assert {"common:default", "common:linear", "common:dynamic", "common:yarn"} <= set(e), mt
    c = VARIANTS["counts"]
    assert c["variants"] == c["run"] + c["refused_by_transformers"]


@pytest.mark.parametrize("mt,name,lt", run_cases())
def test_variant_reads_as_transformers(mt, name, lt):
    g = VARIANTS["model_types"][mt][name]["rope"][lt or "all"]
    if mt in REFUSED:
        words, _why = REFUSED[mt]
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            _read(mt, name, lt)
        return
    if (mt, name) in VARIANT_REFUSED:
        words, _why = VARIANT_REFUSED[(mt, name)]
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            _read(mt, name, lt)
        return
    cfg = _read(mt, name, lt)
    if (mt, name) in VARIANT_DIVERGES:
        want, why = VARIANT_DIVERGES[(mt, name)]
        for k, v in want.items():
            assert getattr(cfg, k) == v, f"{mt}/{name}: posenc's {k} {getattr(cfg, k)} != {v} ({why})"
            assert g[k] != v, f"{mt}/{name}: transformers now gives {k} = {v}: drop the divergence"
        return
    if mt in DIVERGES:
        want, why = DIVERGES[mt]
        for k, v in want.items():
            assert getattr(cfg, k) == v, f"{mt}/{name}: posenc's {k} {getattr(cfg, k)} != {v} ({why})"
        return
    key = f"{mt}/{name}/{lt or 'all'}"
    assert_rope_matches(cfg, g, key)
    # float32 cos / sin of the module's forward (the buffer it used for the positions)
    module = {n: COS_SIN[f"{key}/{n}"] for n in ("cos", "sin")}
    assert_cos_sin_match(cfg, g, key, VARIANTS["positions"],
                         g.get("inv_freq_f32_forward", g["inv_freq_f32"]), module)


@pytest.mark.parametrize("mt,name", failed_cases())
def test_variant_transformers_refuses(mt, name):
    err = VARIANTS["model_types"][mt][name]["transformers_error"]
    if (mt, name) in TRANSFORMERS_FAILS:
        words, _why = TRANSFORMERS_FAILS[(mt, name)]
        assert words in err, f"{mt}/{name}: transformers now fails otherwise: {err}"
        for lt in _layer_types(mt, name):
            _read(mt, name, lt)
        return
    words = REFUSED.get(mt, VARIANT_REFUSED.get((mt, name), (None,)))[0]
    for lt in _layer_types(mt, name):
        with pytest.raises(ValueError, match=None if words is None else
                           words.replace("(", r"\(").replace(")", r"\)")):
            _read(mt, name, lt)


def _layer_types(mt, name):
    """The layer types to read: those of a per-layer-type block, else the config's one RoPE."""
    rp = VARIANTS["model_types"][mt][name]["rope_parameters"]
    if rp and all(isinstance(v, dict) for v in rp.values()):
        return list(rp)
    return [None]


# ---------------------------------------------------------------------------------------------
# M-RoPE sections a rotary class applies of its own (variants.json's mrope_probe): the module
# run on (3, T) ids whose rows differ. posenc reads the swept config (which states no sections)
# with the class's sections (hf_swept_mrope_default) and must give the module's float32 cos /
# sin of every pair within 2 ulp (hf_f32 angles; the module's cos / sin are torch's, 1 ulp from
# the correctly rounded values, which posenc's are), or refuse (3, T) ids by name where the
# class's sections do not fit the config's rotary width.
MROPE = {mt: p for mt, p in VARIANTS["mrope_probe"].items() if "error" not in p}


@pytest.mark.parametrize("mt", sorted(MROPE))
def test_class_mrope_sections_on_distinct_ids(mt):
    p = MROPE[mt]
    ids = np.array(p["ids"], dtype=np.int64)  # (3, T)
    if mt in REFUSED:
        with pytest.raises(ValueError):
            _read_sweep(mt)
        return
    cfg = _read_sweep(mt)
    sec = p["class_default_section"]
    fits = bool(sec) and sum(sec) == p["pairs"] and "mrope_section" not in p["rope_parameters"]
    assert (cfg.mrope_section is not None) == fits, (
        f"{mt}: posenc's sections {cfg.mrope_section}, the class's {sec} over {p['pairs']} pairs")
    if fits:
        assert cfg.mrope_section == sec, f"{mt}: {cfg.mrope_section} vs the class's {sec}"
    if cfg.mrope_section is None:
        # the class's sections do not fill this config's rotary width: M-RoPE ids are refused
        x = np.zeros((ids.shape[1], 1, cfg.head_dim))
        with pytest.raises(ValueError, match="mrope_section|M-RoPE"):
            posenc.mrope_apply(x, ids, cfg=cfg, angle="hf_f32")
        return
    half = cfg.rotary_dim // 2
    x = np.zeros((ids.shape[1], 1, cfg.head_dim), dtype=np.float32)
    x[:, :, :half] = 1
    out = posenc.mrope_apply(x, ids, cfg=cfg, layout="half", angle="hf_f32")[:, 0, :]
    for name, got in (("cos", out[:, :half]), ("sin", out[:, half:2 * half])):
        want = COS_SIN[f"{mt}/probe:mrope_ids/{name}"]
        assert got.shape == want.shape, f"{mt}: {got.shape} vs {want.shape}"
        d = np.abs(got.astype(np.float32).view(np.int32).astype(np.int64)
                   - want.view(np.int32).astype(np.int64))
        assert d.max() <= 2, f"{mt}: {name} {d.max()} ulp from the module at pair {int(np.argmax(d.max(0)))}"


def _read_sweep(mt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return posenc.RopeConfig.from_hf(TYPES[mt]["config"])
