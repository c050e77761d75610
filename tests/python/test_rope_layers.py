"""Per-layer-type RoPE, proportional RoPE, NoPE layers and M-RoPE from Python, against values
derived independently (reference.py and the configs' own numbers)."""

import pathlib

import numpy as np
import pytest
import reference as ref

import posenc

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "rope"


def close(got, want):
    # posenc rounds each frequency once from long double; np.power is within 1 ulp
    np.testing.assert_allclose(got, want, rtol=4 * ref.U64, atol=0)


def test_gemma3_legacy_layer_plan_and_frequencies():
    path = DATA / "gemma3_1b_legacy.json"
    plan = posenc.hf_layer_plan(path)
    # sliding_window_pattern 6: layer i is global when (i + 1) % 6 == 0
    full = [i for i in range(26) if (i + 1) % 6 == 0]
    assert plan["types"] == ["sliding_attention", "full_attention"]
    assert plan["layers"]["full_attention"] == full == [5, 11, 17, 23]
    assert plan["layers"]["sliding_attention"] == [i for i in range(26) if i not in full]
    assert len(plan["layer_types"]) == 26
    assert plan["rope_layers"] == [] and plan["nope_layers"] == []
    # sliding layers: rope_local_base_freq 10^4 unscaled; global: 10^6 with linear x8
    sl = posenc.RopeConfig.from_hf(path, layer_type="sliding_attention")
    gl = posenc.RopeConfig.from_hf(path, layer_type="full_attention")
    assert sl.scaling == "default" and gl.scaling == "linear" and gl.factor == 8.0
    close(sl.inv_freq(), ref.inv_freq_default(1e4, 256))
    close(gl.inv_freq(), ref.inv_freq_linear(1e6, 256, 8.0))


def test_nested_rope_parameters_from_a_dict():
    import json

    cfg = json.loads((DATA / "gemma3_nested.json").read_text())
    plan = posenc.hf_layer_plan(cfg)
    assert plan["layers"] == {"sliding_attention": [0, 1, 2, 3, 4, 6, 7], "full_attention": [5]}
    gl = posenc.RopeConfig.from_hf(cfg, layer_type="full_attention")
    close(gl.inv_freq(), ref.inv_freq_linear(1e6, 256, 8.0))
    # a nested config names its layer types when none is chosen, and refuses an unknown one
    with pytest.raises(ValueError, match="sliding_attention"):
        posenc.RopeConfig.from_hf(cfg)
    with pytest.raises(ValueError, match="layer type must be one of sliding_attention, "
                                         "full_attention, got 'global'"):
        posenc.RopeConfig.from_hf(cfg, layer_type="global")
    with pytest.raises(TypeError, match="layer_type must be a str"):
        posenc.RopeConfig.from_hf(cfg, layer_type=1)


def test_proportional_rope():
    # Gemma 4's global layers: D = global_head_dim = 512, partial_rotary_factor 0.25 -> 64
    # rotated pairs of 256 with exponents over 512, frequency 0 after
    path = DATA / "gemma4_proportional.json"
    gl = posenc.RopeConfig.from_hf(path, layer_type="full_attention")
    assert gl.scaling == "proportional" and gl.head_dim == 512 and gl.rotated_pairs == 64
    close(gl.inv_freq(), ref.inv_freq_proportional(1e6, 512, 0.25))
    assert gl.inv_freq()[64:].max() == 0.0
    # the factor divides every rotated pair: D = 8, factor 2, 0.5 -> [1/2, 0.1/2, 0, 0]
    small = posenc.RopeConfig.from_hf({"head_dim": 8, "rope_parameters": {
        "rope_type": "proportional", "rope_theta": 1e4, "factor": 2.0,
        "partial_rotary_factor": 0.5}})
    close(small.inv_freq(), [0.5, 0.05, 0.0, 0.0])
    # applied: the unrotated pairs pass through bit for bit, the rotated ones match the
    # reference rotation
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 2, 8))
    pos = np.array([0, 1, 7, 100, 12345])
    y = posenc.apply_rope(x, pos, cfg=small)
    assert np.array_equal(y[..., [2, 3, 6, 7]], x[..., [2, 3, 6, 7]])
    want = ref.rope_rotate(x, pos, np.array([0.5, 0.05, 0.0, 0.0]), "half")
    # reference.rope_rotate's bound (p omega + 4) u (|x_u| + |x_v|), twice for both sides
    assert np.max(np.abs(y - want)) <= 2 * (12345 * 0.5 + 4) * ref.U64 * 2 * np.abs(x).max()


def test_nope_layers_and_temperature_plan():
    plan = posenc.hf_layer_plan(DATA / "llama4_irope.json")
    # Llama 4: no_rope_layer_interval 4 by default -> layers 3, 7, 11 are NoPE
    assert plan["nope_layers"] == [3, 7, 11]
    assert plan["rope_layers"] == [(i + 1) % 4 != 0 for i in range(12)]
    assert plan["attn_temperature_tuning"] is True
    assert plan["floor_scale"] == 8192 and plan["attn_scale"] == 0.1
    smol = posenc.hf_layer_plan(DATA / "smollm3_nope.json")
    assert smol["nope_layers"] == [3, 7] and smol["attn_temperature_tuning"] is False
    with pytest.raises(ValueError, match=r"no_rope_layers\[1\] must be 0 or 1, got 2"):
        posenc.hf_layer_plan({"num_hidden_layers": 2, "no_rope_layers": [1, 2]})


def test_temperature_from_the_plan_in_attention():
    # the plan's options drive posenc.attention on a NoPE layer: q scaled by
    # log(floor((p + 1) / floor_scale) + 1) attn_scale + 1 (reference.temperature_scale)
    plan = posenc.hf_layer_plan(DATA / "llama4_irope.json")
    rng = np.random.default_rng(6)
    T, H, D = 4, 2, 8
    q, k, v = (rng.standard_normal((T, H, D)) for _ in range(3))
    pos = np.array([0, 8190, 8191, 40000])
    kw = {key: plan[key] for key in ("attn_temperature_tuning", "floor_scale", "attn_scale")}
    out = posenc.attention(q, k, v, causal=True, q_positions=pos, k_positions=pos, **kw)
    s = ref.temperature_scale(pos, 8192, 0.1)
    assert s[0] == s[1] == 1.0 and s[2] > 1.0  # floor((8191 + 1) / 8192) = 1
    want, _ = ref.attention(q * s[:, None, None], k, v, causal=True)
    assert np.max(np.abs(out - want)) <= 1e-13


MROPE = {"head_dim": 16, "rope_theta": 1e4,
         "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}


def test_positions_mrope():
    # hand-derived (text 2, image (1, 2, 3), text 1):
    want = np.array([[0, 1, 2, 2, 2, 2, 2, 2, 5],
                     [0, 1, 2, 2, 2, 3, 3, 3, 5],
                     [0, 1, 2, 3, 4, 2, 3, 4, 5]])
    got = posenc.positions_mrope([(2, 1, 2, 3), (1,)])
    assert got.dtype == np.int64 and np.array_equal(got, want)
    segs = [(3, 2, 2, 2), (0, 1, 3, 1), (4, 0, 0, 0)]
    assert np.array_equal(posenc.positions_mrope(segs, start=7),
                          ref.mrope_position_ids(segs, start=7))
    with pytest.raises(ValueError, match=r"segments\[0\] must be \(text,\) or \(text, t, h, w\)"):
        posenc.positions_mrope([(1, 2)])
    with pytest.raises(ValueError):
        posenc.positions_mrope([(1, 2, 0, 3)])  # a grid with a zero side


def test_positions_mrope_video_rules():
    # A video with t > max(h, w): transformers 5 starts the text after it at n + max(h, w),
    # transformers 4 at n + max(t, h, w) (one past its largest id).
    segs = [(2, 5, 2, 3), (1, 0, 0, 0), (0, 1, 2, 2), (2, 0, 0, 0)]
    v5 = posenc.positions_mrope(segs)
    v4 = posenc.positions_mrope(segs, rule="transformers_v4")
    assert np.array_equal(v5, ref.mrope_position_ids(segs))
    assert np.array_equal(v4, ref.mrope_position_ids(segs, rule="transformers_v4"))
    assert v5[:, 2 + 30].tolist() == [5, 5, 5]  # 2 + max(2, 3)
    assert v4[:, 2 + 30].tolist() == [7, 7, 7]  # 2 + max(5, 2, 3)
    assert np.array_equal(posenc.positions_mrope(segs, rule="v5"), v5)
    with pytest.raises(ValueError, match="rule must be transformers_v5"):
        posenc.positions_mrope(segs, rule="transformers_v3")


def test_class_defaults_of_gemma3_text_config():
    # google/gemma-3-12b-it's text_config gives no rope_theta, rope_local_base_freq or head_dim:
    # transformers' Gemma3TextConfig makes them 1e6, 1e4 and 256 (not 3840 / 16 = 240).
    cfg = {"model_type": "gemma3", "text_config": {
        "hidden_size": 3840, "model_type": "gemma3_text", "num_attention_heads": 16,
        "num_hidden_layers": 48, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024}}
    with pytest.warns(UserWarning, match="rope_theta is missing; took transformers' "
                                         "Gemma3TextConfig default 1000000"):
        full = posenc.RopeConfig.from_hf(cfg, layer_type="full_attention")
    with pytest.warns(UserWarning, match="rope_local_base_freq is missing"):
        sliding = posenc.RopeConfig.from_hf(cfg, layer_type="sliding_attention")
    assert full.scaling == "linear" and full.factor == 8.0 and full.theta == 1e6
    assert full.head_dim == 256 and sliding.head_dim == 256
    assert sliding.scaling == "default" and sliding.theta == 1e4
    close(sliding.inv_freq(), ref.inv_freq_default(1e4, 256))
    close(full.inv_freq(), ref.inv_freq_linear(1e6, 256, 8.0))
    with pytest.warns(UserWarning, match="layer_types is missing"):
        plan = posenc.hf_layer_plan(cfg)
    assert plan["layers"]["full_attention"] == [i for i in range(48) if (i + 1) % 6 == 0]
    assert any("head_dim is missing" in d for d in plan["defaults"])


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mrope_apply_matches_reference(interleaved, layout, dtype):
    # interleaved: pairs (t h w)(t h w) then t; 3 s_w must not exceed R/2 = 8
    section = [4, 2, 2] if interleaved else [2, 3, 3]
    c = {**MROPE, "rope_scaling": {"type": "mrope", "mrope_section": section,
                                   "mrope_interleaved": interleaved}}
    cfg = posenc.RopeConfig.from_hf(c)
    assert cfg.mrope_section == section and cfg.mrope_interleaved == interleaved
    pos = posenc.positions_mrope([(2, 2, 3, 2), (3,)])
    T = pos.shape[1]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((T, 3, 16)).astype(dtype)
    y = posenc.mrope_apply(x, pos, cfg=cfg, layout=layout)
    inv = ref.inv_freq_default(1e4, 16)
    want = ref.mrope_rotate(x, pos, inv, section, interleaved, layout)
    # the rope_rotate error bound (reference.py), float32: u_f instead of u
    u = ref.U64 if dtype == np.float64 else ref.U32
    bound = (pos.max() + 4) * 4 * u * np.abs(x).max()
    assert y.dtype == dtype and np.max(np.abs(y - want)) <= bound
    # inverse undoes it; text tokens (equal ids) are apply_rope's rotation bit for bit
    back = posenc.mrope_apply(y, pos, cfg=cfg, layout=layout, inverse=True)
    assert np.max(np.abs(back - x)) <= 2 * bound
    text = [0, 1, T - 3, T - 2, T - 1]
    plain = posenc.RopeConfig.from_hf({k: v for k, v in MROPE.items() if k != "rope_scaling"})
    r1 = posenc.apply_rope(x[text], pos[0, text], cfg=plain, layout=layout,
                           seq_len=int(pos.max()) + 1)
    assert np.array_equal(y[text], r1)
    # in place
    z = x.copy()
    assert posenc.mrope_apply(z, pos, cfg=cfg, layout=layout, inplace=True) is z
    assert np.array_equal(z, y)


def test_mrope_errors():
    cfg = posenc.RopeConfig.from_hf(MROPE)
    x = np.zeros((4, 1, 16))
    with pytest.raises(ValueError, match=r"positions must have shape \(3, T\) = \(3, 4\)"):
        posenc.mrope_apply(x, np.arange(4), cfg=cfg)
    with pytest.raises(ValueError, match="cfg must be an M-RoPE config"):
        posenc.mrope_apply(x, np.zeros((3, 4), np.int64), cfg=posenc.RopeConfig(head_dim=16))
    with pytest.raises(ValueError, match="positions must be >= 0"):
        posenc.mrope_apply(x, -np.ones((3, 4), np.int64), cfg=cfg)
    bad = {**MROPE, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 2]}}
    with pytest.raises(ValueError, match=r"mrope_section must sum to rotary_dim / 2 = 8"):
        posenc.RopeConfig.from_hf(bad)


def mrope_case(rng, dtype=np.float64):
    cfg = posenc.RopeConfig.from_hf(MROPE)
    pos = posenc.positions_mrope([(2, 1, 2, 3), (3,)])  # 11 tokens: text, image, text
    n = pos.shape[1]
    q = rng.standard_normal((n, 4, 16)).astype(dtype)
    k = rng.standard_normal((n, 2, 16)).astype(dtype)
    v = rng.standard_normal((n, 2, 16)).astype(dtype)
    return cfg, pos, q, k, v


def test_attention_with_mrope_positions(rng):
    cfg, pos, q, k, v = mrope_case(rng)
    kw = dict(causal=True, rope=cfg, alibi=True, q_positions=pos, k_positions=pos)
    out, lse = posenc.attention(q, k, v, return_lse=True, **kw)
    inv = ref.inv_freq_default(1e4, 16)
    qr = ref.mrope_rotate(q, pos, inv, [2, 3, 3])
    kr = ref.mrope_rotate(k, pos, inv, [2, 3, 3])
    # ALiBi sees the temporal row
    m = ref.alibi_slopes_press(4)
    bias = -m[:, None, None] * (pos[0][:, None] - pos[0][None, :])[None]
    want, _ = ref.attention(qr, kr, v, causal=True, bias=bias)
    assert np.max(np.abs(out - want)) <= 1e-13
    # gradients of q and k through the rotation, by central differences
    G = rng.standard_normal(out.shape)
    g = posenc.attention_backward(q, k, v, out, lse, G, **kw)
    h = 1e-6
    for name, arr in (("dq", q), ("dk", k)):
        for idx in [(0, 0, 0), (4, 1, 5), (7, 0, 12), (10, 1, 15)]:
            p, mm = arr.copy(), arr.copy()
            p[idx] += h
            mm[idx] -= h
            a = (p, k) if name == "dq" else (q, p)
            b = (mm, k) if name == "dq" else (q, mm)
            fd = (np.vdot(posenc.attention(*a, v, **kw), G)
                  - np.vdot(posenc.attention(*b, v, **kw), G)) / (2 * h)
            assert g[name][idx] == pytest.approx(fd, abs=1e-7), (name, idx)
    # 1-D ids with an M-RoPE config are text tokens: plain RoPE, bit for bit the same
    t = np.arange(len(pos[0]))
    plain = posenc.RopeConfig.from_hf({k_: v_ for k_, v_ in MROPE.items() if k_ != "rope_scaling"})
    assert np.array_equal(
        posenc.attention(q, k, v, causal=True, rope=cfg, q_positions=t, k_positions=t),
        posenc.attention(q, k, v, causal=True, rope=plain, q_positions=t, k_positions=t))
    # batched: (B, 3, n) ids
    qb, kb, vb = np.stack([q, q[::-1].copy()]), np.stack([k, k]), np.stack([v, v])
    pb = np.stack([pos, pos])
    ob = posenc.attention(qb, kb, vb, causal=True, rope=cfg, q_positions=pb, k_positions=pb)
    assert np.array_equal(ob[0], posenc.attention(q, k, v, causal=True, rope=cfg,
                                                  q_positions=pos, k_positions=pos))


def test_kv_cache_with_mrope(rng):
    cfg, pos, q, k, v = mrope_case(rng)
    full = posenc.attention(q, k, v, causal=True, rope=cfg, q_positions=pos, k_positions=pos)
    cache = posenc.KVCache(2, 16, capacity=11, dtype=np.float64, rope=cfg)
    outs = []
    for s, e in ((0, 2), (2, 8), (8, 11)):
        ids = None if s == 8 else pos[:, s:e]  # the last run is text: default ids
        cache.append(k[s:e], v[s:e], ids)
        outs.append(cache.attend(q[s:e]))
    assert np.array_equal(cache.positions3, pos)
    assert np.max(np.abs(np.concatenate(outs) - full)) <= 1e-13


def test_mrope_attention_errors(rng):
    cfg, pos, q, k, v = mrope_case(rng)
    with pytest.raises(ValueError, match="need an M-RoPE rope config"):
        posenc.attention(q, k, v, rope=posenc.RopeConfig(head_dim=16), q_positions=pos,
                         k_positions=pos)
    with pytest.raises(ValueError, match=r"M-RoPE needs both q_positions \(3, T\) and "
                                         r"k_positions \(3, S\)"):
        posenc.attention(q, k, v, rope=cfg, q_positions=pos)
    with pytest.raises(ValueError, match=r"k_positions must have shape \(3, S\) = \(3, 11\)"):
        posenc.attention(q, k, v, rope=cfg, q_positions=pos, k_positions=pos[:, :5])
    bad = pos.copy()
    bad[1, 3] = -1
    with pytest.raises(ValueError, match=r"q_positions must mark a padding slot with -1 in all "
                                         r"three rows, got \(2, -1, 3\) at index 3"):
        posenc.attention(q, k, v, rope=cfg, q_positions=bad, k_positions=pos)
    # a padding slot (-1 in all rows) is masked like a 1-D pad id
    padded = pos.copy()
    padded[:, 0] = -1
    out = posenc.attention(q, k, v, causal=True, rope=cfg, q_positions=pos, k_positions=padded)
    keep = posenc.attention(q, k, v, causal=True, rope=cfg, q_positions=pos, k_positions=pos,
                            key_padding=np.arange(11) != 0)
    assert np.array_equal(out, keep)
    # half-precision k and v: the engine's M-RoPE hook rotates the widened keys in float32,
    # the same bits as the float32 call on the widened values
    q32, k16, v16 = q.astype(np.float32), k.astype(np.float16), v.astype(np.float16)
    kw = dict(causal=True, rope=cfg, q_positions=pos, k_positions=pos)
    assert np.array_equal(posenc.attention(q32, k16, v16, **kw),
                          posenc.attention(q32, k16.astype(np.float32), v16.astype(np.float32),
                                           **kw))
