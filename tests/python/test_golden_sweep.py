"""posenc against every rotary model type of transformers, swept (tests/golden/transformers/
sweep.json, scripts/golden/transformers_sweep.py at the commit it names).

For each swept model type the golden holds the config its class builds with nothing (as
save_pretrained writes it), what its rotary module computes per layer type, and, per layer,
whether the model's own attention layer applied position when run. posenc reads that config
and must agree on each, or refuse it with an error that names why (REFUSED below, each with the
words its error must contain). The bounds are those of test_golden_transformers.py:
- rope_type, rotary_dim, theta: equal; attention factor within 8 * 2^-53 relative;
- inv_freq in float64 within (ln(theta) + 8) * 2^-53 relative per frequency;
- float32 cos / sin (angle "hf_f32", given transformers' float32 buffer): bit for bit equal to
  the correctly rounded cos / sin of transformers' float32 angles times the attention factor,
  and within 1 ulp (2 with an attention factor) of the module's own torch output;
- per layer: posenc's plan has RoPE on a layer exactly when the layer's output changed when its
  positions were stretched (0, 1, 2, .. against 0, 3, 6, ..).
"""

import json
import math
import pathlib
import warnings

import numpy as np
import pytest

import posenc

GOLD = pathlib.Path(__file__).resolve().parents[1] / "golden" / "transformers"
SWEEP = json.loads((GOLD / "sweep.json").read_text())
COS_SIN = np.load(GOLD / "sweep_cos_sin.npz")
CLASS_TABLE = json.loads((GOLD / "class_table.json").read_text())
TYPES = SWEEP["model_types"]
U64 = 2.0**-53

# Model types posenc refuses, each with the words its error must contain and why.
_UNMODELLED = "posenc does not model this class's RoPE"
REFUSED = {
    # the class's own default config: hidden_size 4096 over 96 heads gives head_dim 42.67, which
    # transformers truncates to 42 and then rotates int(42 * 0.5) = 21 dims (11 frequencies over
    # an odd width); no published GLM-4.5 config relies on it (they state head_dim 128)
    "glm4_moe": ("must be a positive multiple of num_attention_heads", "no integer head_dim"),
    # rotary classes posenc does not model: refused by name rather than read as a plain RoPE
    "cosmos3_edge": (_UNMODELLED, "three inv_freq tables, one per M-RoPE axis"),
    "cosmos3_edge_text": (_UNMODELLED, "three inv_freq tables, one per M-RoPE axis"),
    "ernie4_5_vl_moe": (_UNMODELLED, "its own frequency order over the M-RoPE axes"),
    "ernie4_5_vl_moe_text": (_UNMODELLED, "its own frequency order over the M-RoPE axes"),
    "minimax_m3_vl": (_UNMODELLED, "rotary_dim in the config, another width in the module"),
    "minimax_m3_vl_text": (_UNMODELLED, "rotary_dim in the config, another width in the module"),
    "xcodec2": (_UNMODELLED, "rotates by the head index, not by position"),
    # classes with a rotary module whose default config switches RoPE off: the layer runs
    # measure no position, and posenc says the model applies none
    "esm": ("the model applies no RoPE", "position_embedding_type 'absolute' by default"),
    "zamba2": ("the model applies no RoPE", "use_mem_rope false by default"),
    "granitemoehybrid": ("the model applies no RoPE", "position_embedding_type null by default"),
}

# Model types where transformers at this commit departs from the model's reference and posenc
# keeps the reference: {model type: (what posenc gives, why)}. The test holds both sides, so a
# regenerated golden in which transformers changes fails here and is looked at again.
DIVERGES = {
    # RecurrentGemmaRotaryEmbedding (c49429ed) builds its frequencies over the whole head_dim
    # and rotates all of it, dropping partial_rotary_factor = 0.5; Griffin / RecurrentGemma
    # (De et al. 2024; google-deepmind/recurrentgemma) rotate the first half of each head, as
    # transformers' own implementation did before (query chunked by 1 / partial_rotary_factor).
    "recurrent_gemma": ({"rotary_dim": 128}, "transformers rotates all 256 dims; the model rotates 128"),
}


def _read(mt, layer_type=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return posenc.RopeConfig.from_hf(TYPES[mt]["config"], layer_type=layer_type)


def _plan(mt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return posenc.hf_layer_plan(TYPES[mt]["config"])


def layer_cases():
    out = []
    for mt, e in sorted(TYPES.items()):
        for lt in e["rope"]:
            out.append(pytest.param(mt, None if lt == "all" else lt, id=f"{mt}-{lt}"))
    return out


def test_the_sweep_covers_transformers():
    c = SWEEP["counts"]
    assert SWEEP["transformers_commit"] == "c49429ed1f8b89749de77c0ec930ef19685c9ae5"
    assert c["swept"] == len(TYPES) and c["not_run"] == len(SWEEP["not_run"])
    assert c["rotary"] == c["swept"] + c["not_run"] + c["not_a_text_decoder"]
    # every model type of the commit is accounted for: rotary (swept, not run with a reason,
    # or not a text decoder) or without rotary code
    assert c["rotary"] + c["no_rotary_code"] == c["model_types"]
    assert all(SWEEP["not_run"].values()) and all(SWEEP["not_a_text_decoder"].values())
    assert c["swept"] >= 140


def _refusal(mt, fn):
    """fn() or, for a model type of REFUSED, the check that it raises with the words named."""
    if mt in REFUSED:
        words, _why = REFUSED[mt]
        with pytest.raises(ValueError) as e:
            fn()
        assert words in str(e.value), f"{mt}: refused, but the error does not say {words!r}: {e.value}"
        return None
    return fn()


@pytest.mark.parametrize("mt", sorted(TYPES))
def test_layer_plan_matches_the_layers_run(mt):
    e = TYPES[mt]
    cfg = e["config"].get("text_config") or e["config"]
    row = CLASS_TABLE["model_types"].get(mt, {})
    if (not cfg.get("layer_types") and _text_type(mt) not in CLASS_TABLE["hand_rows"]
            and row.get("pattern") == "unmodelled" and "unclassified" not in row):
        # the class builds its layer pattern in a way posenc does not model (Bamba from
        # attn_layer_indices, Falcon-H1's "hybrid" property): a plan is refused by name
        with pytest.raises(ValueError, match=_STATE_TYPES):
            _plan(mt)
        return
    plan = _plan(mt)
    ran = [(i, l["applies_position"]) for i, l in enumerate(e["layers"]) if "applies_position" in l]
    if not ran:
        # nothing to compare: the default config has no attention layer (all Mamba) or the
        # class cannot be run here; the reason is recorded in the golden and shown
        pytest.skip(f"{mt}: no layer ran: {e['layers'][0].get('error') or e['layers'][0].get('note')}"[:300])
    n = len(e["layers"])
    rope = plan["rope_layers"] or [True] * n
    assert len(rope) == n, f"{mt}: posenc plans {len(rope)} layers, the class has {n}"
    wrong = [i for i, applied in ran if rope[i] != applied]
    assert not wrong, (f"{mt}: layers {wrong[:8]}: posenc says RoPE {[rope[i] for i in wrong[:8]]}, "
                       f"the layer run says {[e['layers'][i]['applies_position'] for i in wrong[:8]]} "
                       f"(layer types {[e['layers'][i]['layer_type'] for i in wrong[:8]]})")
    # layer types as the config states them (falcon_h1's "hybrid" is a class property, not a
    # saved key: every layer there is attention and Mamba side by side)
    if cfg.get("layer_types"):
        types_ = [l["layer_type"] for l in e["layers"]]
        assert plan["layer_types"] == types_, f"{mt}: layer types differ"


def assert_rope_matches(cfg, g, key):
    """posenc's reading cfg against a rotary module's golden g (rope_type, rotary_dim, theta,
    attention factor, float64 inv_freq), with the bounds of the module docstring."""
    assert cfg.scaling == g["rope_type"], f"{key}: rope_type {cfg.scaling} != {g['rope_type']}"
    assert cfg.rotary_dim == g["rotary_dim"], f"{key}: rotary_dim {cfg.rotary_dim} != {g['rotary_dim']}"
    assert cfg.theta == g["rope_parameters"]["rope_theta"], f"{key}: theta"
    a = g["attention_factor"]
    assert abs(cfg.attention_factor - a) <= 8 * U64 * abs(a), (
        f"{key}: attention factor {cfg.attention_factor!r} != {a!r}")
    want = np.array(g["inv_freq_f64"])
    got = cfg.inv_freq()
    assert got.shape == want.shape, f"{key}: {got.shape} frequencies, transformers {want.shape}"
    zero = want == 0
    assert np.array_equal(got[zero], want[zero])
    rel = np.zeros_like(want)
    rel[~zero] = np.abs(got[~zero] - want[~zero]) / want[~zero]
    bound = (math.log(cfg.theta) + 8) * U64
    worst = int(np.argmax(rel))
    assert rel[worst] <= bound, (f"{key}: inv_freq[{worst}] {got[worst]!r} vs transformers' "
                                 f"{want[worst]!r} ({rel[worst]:.2e} > {bound:.2e})")


def assert_cos_sin_match(cfg, g, key, positions, inv, module):
    """posenc's float32 cos / sin (angle hf_f32, given transformers' float32 buffer inv) at
    positions: the correctly rounded values of transformers' float32 angles times the attention
    factor, and within 1 ulp (2 with a factor) of the module's output module[name]."""
    pos = np.array(positions, dtype=np.int64)
    inv = np.array(inv, dtype=np.float32)
    cos, sin = posenc.rope_cos_sin(cfg, pos, angle="hf_f32", dtype=np.float32, hf_inv_freq=inv)
    angle = inv[None, :] * pos.astype(np.float32)[:, None]
    a = np.float32(g["attention_factor"])
    limit = 1 if g["attention_factor"] == 1.0 else 2
    for name, got, fn in (("cos", cos, np.cos), ("sin", sin, np.sin)):
        exact = fn(angle.astype(np.float64)).astype(np.float32) * a
        assert np.array_equal(got, exact), f"{key}: {name} differs from transformers' float32 angles"
        d = _ulps(got, module[name])
        assert d.max(initial=0) <= limit, f"{key}: {name} {d.max()} ulp from the module's output"


@pytest.mark.parametrize("mt,lt", layer_cases())
def test_rope_parameters_and_inv_freq(mt, lt):
    g = TYPES[mt]["rope"][lt or "all"]
    cfg = _refusal(mt, lambda: _read(mt, lt))
    if cfg is None:
        return
    if mt in DIVERGES:
        want, why = DIVERGES[mt]
        for k, v in want.items():
            assert getattr(cfg, k) == v, f"{mt}: posenc's {k} {getattr(cfg, k)} != {v} ({why})"
            assert g[k] != v, f"{mt}: transformers now gives {k} = {v}: drop the divergence"
        return
    assert_rope_matches(cfg, g, f"{mt}/{lt}")


def _ulps(got, want):
    return np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))


@pytest.mark.parametrize("mt,lt", layer_cases())
def test_cos_sin_float32(mt, lt):
    g = TYPES[mt]["rope"][lt or "all"]
    cfg = _refusal(mt, lambda: _read(mt, lt))
    if cfg is None or mt in DIVERGES:
        return
    key = f"{mt}/{lt or 'all'}"
    module = {n: COS_SIN[f"{key}/{n}"] for n in ("cos", "sin")}
    assert_cos_sin_match(cfg, g, key, g["positions"], g["inv_freq_f32_forward"], module)


# ---------------------------------------------------------------------------------------------
# A config that names only its model type: posenc fills in what the class would (its table of
# class defaults, tests/golden/transformers/class_table.json) and must give the class's RoPE,
# or refuse by name. Published configs often rely on these defaults.

# Minimal configs posenc refuses, with the words the error must contain.
MINIMAL_REFUSED = {
    **{mt: v for mt, (v, _why) in REFUSED.items()},
}
_STATE_TYPES = "state layer_types in the config"


def _text_type(mt):
    """The model type of the decoder's config (what a config.json names: EvollaModel's is
    evolla)."""
    cfg = TYPES[mt]["config"]
    tc = cfg.get("text_config")
    if isinstance(tc, dict) and tc.get("model_type"):
        return tc["model_type"]
    return cfg.get("model_type", mt)


def minimal_cases():
    """One case per decoder text class that was swept as itself: a composite may build its
    text_config with other defaults than its text class (Voxtral Realtime: theta 1e6 against the
    text class's 1e4), while a config's text_config dict is read with the text class's."""
    out = []
    for mt in sorted(TYPES):
        tmt = _text_type(mt)
        if "text_config" in TYPES[mt]["config"]:
            continue
        for lt in TYPES[mt]["rope"]:
            out.append(pytest.param(mt, tmt, None if lt == "all" else lt, id=f"{tmt}-{lt}"))
    return out


@pytest.mark.parametrize("mt,tmt,lt", minimal_cases())
def test_minimal_config_gets_the_class_defaults(mt, tmt, lt):
    g = TYPES[mt]["rope"][lt or "all"]

    def read():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return posenc.RopeConfig.from_hf({"model_type": tmt}, layer_type=lt)

    words = MINIMAL_REFUSED.get(mt) or MINIMAL_REFUSED.get(tmt)
    if (lt and tmt not in CLASS_TABLE["hand_rows"]
            and CLASS_TABLE["model_types"].get(mt, {}).get("pattern") == "unmodelled"):
        words = _STATE_TYPES  # a per-layer-type query needs the layer pattern the class builds
    if words:
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            read()
        return
    cfg = read()
    if mt in DIVERGES:
        return
    assert (cfg.scaling, cfg.rotary_dim, cfg.theta) == (
        g["rope_type"], g["rotary_dim"], g["rope_parameters"]["rope_theta"]), f"{tmt}/{lt}"
    assert abs(cfg.attention_factor - g["attention_factor"]) <= 8 * U64 * abs(g["attention_factor"])
    want = np.array(g["inv_freq_f64"])
    got = cfg.inv_freq()
    assert got.shape == want.shape
    nz = want != 0
    assert np.array_equal(got[~nz], want[~nz])
    rel = np.abs(got[nz] - want[nz]) / want[nz]
    assert rel.max(initial=0) <= (math.log(cfg.theta) + 8) * U64, f"{tmt}/{lt}"


def test_per_layer_config_head_dims_are_read_or_refused():
    # transformers 5 saves Gemma 4's full-layer head_dim as per_layer_config overrides
    base = {k: v for k, v in TYPES["gemma4_text"]["config"].items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert posenc.RopeConfig.from_hf(base, layer_type="full_attention").head_dim == 512
        full = [i for i, t in enumerate(base["layer_types"]) if t == "full_attention"]
        mixed = {**base, "per_layer_config": {**base["per_layer_config"], str(full[0]): {"head_dim": 384}}}
        with pytest.raises(ValueError, match="different head_dim values"):
            posenc.RopeConfig.from_hf(mixed, layer_type="full_attention")
        bad = {**base, "per_layer_config": {"layer5": {"head_dim": 512}}}
        with pytest.raises(ValueError, match="per_layer_config keys must be layer indices"):
            posenc.RopeConfig.from_hf(bad, layer_type="full_attention")
