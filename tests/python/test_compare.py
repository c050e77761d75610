"""posenc.compare: derived tolerances, the verdict under each float32 pipeline, and hints for the
usual RoPE mistakes.

The engines' float32 outputs below are written here from the engines' published formulas, not
from posenc's code: transformers' LlamaRotaryEmbedding and apply_rotary_pos_emb in torch
float32 (inv_freq = 1 / (theta ** (arange(0, R, 2, int64).float() / R)), the angle the float32
product inv_freq @ position_ids.float(), cos / sin of it in float32, q * cos + rotate_half(q) *
sin), and ggml's CPU rope (theta_scale = powf(base, -2 / R), theta = float(p) multiplied by
theta_scale pair after pair, cosf / sinf from libm).
"""

import ctypes
import ctypes.util

import numpy as np
import pytest
import reference as ref

import posenc


@pytest.fixture
def setup(rng):
    cfg = posenc.RopeConfig(head_dim=32, theta=10000.0)
    x = rng.standard_normal((2, 40, 2, 32))
    pos = np.tile(np.arange(40) * 50, (2, 1))  # positions up to 1950
    return cfg, x, pos


def hf_rope_f32(x, pos, theta, layout="half", attention_scaling=1.0):
    """transformers' float32 RoPE on x (B, T, H, D) float32 at positions (B, T), in torch."""
    import torch

    R = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.int64).float() / R))
    p = torch.from_numpy(np.asarray(pos, dtype=np.int64))
    inv = inv_freq[None, :, None].float().expand(p.shape[0], -1, 1)
    freqs = (inv @ p[:, None, :].float()).transpose(1, 2)  # (B, T, R/2)
    q = torch.from_numpy(np.asarray(x, dtype=np.float32))
    if layout == "half":
        emb = torch.cat((freqs, freqs), dim=-1)
    else:  # GPT-J: rotate_every_two with cos / sin repeated per pair
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
    cos = (emb.cos() * attention_scaling)[:, :, None, :]
    sin = (emb.sin() * attention_scaling)[:, :, None, :]
    if layout == "half":
        x1, x2 = q[..., : R // 2], q[..., R // 2 :]
        rot = torch.cat((-x2, x1), dim=-1)
    else:
        x1, x2 = q[..., ::2], q[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return (q * cos + rot * sin).numpy()


def ggml_rope_f32(x, pos, base):
    """ggml's CPU rope, NEOX mode (half layout), on x (B, T, H, D) float32, libm's float calls."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    for fn in ("powf", "cosf", "sinf"):
        getattr(libm, fn).restype = ctypes.c_float
    libm.powf.argtypes = [ctypes.c_float, ctypes.c_float]
    libm.cosf.argtypes = libm.sinf.argtypes = [ctypes.c_float]
    D = x.shape[-1]
    n = D // 2
    theta_scale = np.float32(libm.powf(base, np.float32(-2.0) / np.float32(D)))
    xf = np.asarray(x, dtype=np.float32)
    out = np.empty_like(xf)
    for b in range(xf.shape[0]):
        for t in range(xf.shape[1]):
            theta = np.float32(int(pos[b, t]))
            c = np.empty(n, np.float32)
            s = np.empty(n, np.float32)
            for i in range(n):
                c[i] = libm.cosf(theta)
                s[i] = libm.sinf(theta)
                theta = np.float32(theta * theta_scale)
            x0, x1 = xf[b, t, :, :n], xf[b, t, :, n:]
            out[b, t, :, :n] = x0 * c - x1 * s
            out[b, t, :, n:] = x0 * s + x1 * c
    return out


def long_positions(rng, B, T, top=100_000):
    """(B, T) sorted positions in [0, top) that include 0 and top - 1."""
    p = np.sort(rng.integers(1, top - 1, size=(B, T)), axis=1)
    p[:, 0], p[:, -1] = 0, top - 1
    return p


@pytest.mark.parametrize("theta", [10000.0, 1e6])  # Llama 2; CodeLlama (torch's pow: 1 ulp off)
def test_transformers_float32_is_ok_as_hf_f32(rng, theta):
    cfg = posenc.RopeConfig(head_dim=128, theta=theta)
    pos = long_positions(rng, 2, 48)
    x = rng.standard_normal((2, 48, 4, 128)).astype(np.float32)
    mine = hf_rope_f32(x, pos, theta)
    r = posenc.compare(mine, x=x, positions=pos, cfg=cfg)
    assert r.ok and r.pipeline == "hf_f32", str(r)
    assert r.verdict == "ok as transformers' float32 (hf_f32)"
    assert str(r).startswith("ok as transformers' float32 (hf_f32): max error")
    assert r.pipeline_max_ratio <= 1
    # the distance to exact is shown apart: far outside the exact tolerance at position ~1e5
    assert r.max_ratio > 100 and "against exact angles (exact)" in str(r)
    assert r.worst_position > 10_000
    # the same with posenc's own exact output given as expected
    expected = posenc.apply_rope(x.astype(np.float64), pos, cfg=cfg)
    r2 = posenc.compare(mine, expected, x=x, positions=pos, cfg=cfg)
    assert r2.ok and r2.pipeline == "hf_f32" and r2.max_ratio == pytest.approx(r.max_ratio)


def test_transformers_float32_at_short_positions(rng):
    # positions 0..63 (where the float64 tolerance already failed by 6.5-8x): ok as hf_f32 or
    # within exact, never a mismatch
    cfg = posenc.RopeConfig(head_dim=128, theta=10000.0)
    pos = np.tile(np.arange(64), (1, 1))
    x = rng.standard_normal((1, 64, 8, 128)).astype(np.float32)
    r = posenc.compare(hf_rope_f32(x, pos, 10000.0), x=x, positions=pos, cfg=cfg)
    assert r.ok and r.pipeline in ("exact", "hf_f32"), str(r)


def test_layout_swap_under_hf_f32_is_named(rng):
    cfg = posenc.RopeConfig(head_dim=64, theta=10000.0)
    pos = long_positions(rng, 1, 32)
    x = rng.standard_normal((1, 32, 2, 64)).astype(np.float32)
    mine = hf_rope_f32(x, pos, 10000.0, layout="interleaved")
    r = posenc.compare(mine, x=x, positions=pos, cfg=cfg, layout="half")
    assert not r.ok and r.verdict == "MISMATCH" and r.pipeline is None
    assert r.hints[0].startswith(
        "matches the other pair layout (interleaved) under transformers' float32 (hf_f32)"), r.hint
    assert "hint: matches the other pair layout" in str(r)


def test_ggml_float32_is_ok_as_ggml_f32(rng):
    cfg = posenc.RopeConfig(head_dim=64, theta=10000.0)
    pos = long_positions(rng, 1, 24)
    x = rng.standard_normal((1, 24, 2, 64)).astype(np.float32)
    mine = ggml_rope_f32(x, pos, 10000.0)
    r = posenc.compare(mine, x=x, positions=pos, cfg=cfg)
    assert r.ok and r.pipeline == "ggml_f32", str(r)
    assert r.verdict == "ok as ggml's float32 (ggml_f32)"
    assert r.max_ratio > 1  # not within the exact tolerance
    assert r.pipelines["hf_f32"] > r.pipeline_max_ratio


def test_wrong_theta_is_still_a_mismatch(rng):
    cfg = posenc.RopeConfig(head_dim=64, theta=10000.0)
    pos = long_positions(rng, 1, 32)
    x = rng.standard_normal((1, 32, 2, 64)).astype(np.float32)
    mine = hf_rope_f32(x, pos, 10000.0 * 1.001)
    r = posenc.compare(mine, x=x, positions=pos, cfg=cfg)
    assert not r.ok and r.pipeline is None and str(r).startswith("MISMATCH")
    assert min(r.pipelines.values()) > 1 and r.hint is None
    # a small position set too: theta 1e4 against 5e5
    mine = hf_rope_f32(x, np.tile(np.arange(32), (1, 1)), 500000.0)
    r = posenc.compare(mine, x=x, positions=np.arange(32)[None], cfg=cfg)
    assert not r.ok


def test_padding_shift_under_hf_f32_is_named(rng):
    cfg = posenc.RopeConfig(head_dim=64, theta=10000.0)
    pos = np.tile(np.arange(5000, 5040), (2, 1))
    x = rng.standard_normal((2, 40, 2, 64)).astype(np.float32)
    mine = hf_rope_f32(x, pos, 10000.0)
    mine[1] = hf_rope_f32(x[1:2], pos[1:2] + 3, 10000.0)[0]  # row 1 counted 3 pad tokens
    r = posenc.compare(mine, x=x, positions=pos, cfg=cfg)
    assert not r.ok
    assert any(h.startswith("matches positions shifted per sequence (row 1: +3) under "
                            "transformers' float32 (hf_f32)") for h in r.hints), r.hint


def test_float32_engine_with_exact_angles_passes(setup):
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    # an engine that rotates float32 data with float64 angles rounded to float32
    inv = ref.inv_freq_default(10000.0, 32)
    mine = ref.rope_rotate(x.astype(np.float32), pos, inv, "half").astype(np.float32)
    r = posenc.compare(mine, expected)
    assert r.ok and r.max_ratio <= 1 and r.hint is None and r.pipeline == "exact"
    assert r.rtol == 8 * 2.0**-24 and r.verdict == "ok"


def test_other_layout_is_named(setup):
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg, layout="half")
    mine = ref.rope_rotate(x, pos, ref.inv_freq_default(10000.0, 32), "interleaved")
    r = posenc.compare(mine, expected, x=x, positions=pos, cfg=cfg)
    assert not r.ok and "other pair layout (interleaved) under exact angles (exact)" in r.hint
    assert r.worst_position is not None and r.worst_pair is not None


def test_float32_angles_are_named(setup):
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    # a plain float32 angle: float32 inv_freq times float32 positions, float32 cos/sin
    ang = pos.astype(np.float32)[..., None] * ref.inv_freq_default(10000.0, 32).astype(np.float32)
    c, s = np.cos(ang).astype(np.float64), np.sin(ang).astype(np.float64)
    u, v = x[..., :16], x[..., 16:]
    mine = np.concatenate([u * c[:, :, None] - v * s[:, :, None],
                           v * c[:, :, None] + u * s[:, :, None]], axis=-1)
    r = posenc.compare(mine, expected, x=x, positions=pos, cfg=cfg)
    assert r.ok and r.pipeline == "f32" and "ok as plain float32 angles (f32)" in str(r)
    assert r.max_ratio > 1  # against exact it is out of tolerance ...
    # ... and the error grows with the position: the last positions are the worst
    assert r.ratio_by_position[-1] > 100 * max(r.ratio_by_position[0], 1e-3)


def test_missing_attention_factor_is_named(rng):
    cfg = posenc.RopeConfig(head_dim=16, scaling="yarn", factor=4.0,
                            original_max_position_embeddings=32)
    x = rng.standard_normal((1, 8, 2, 16))
    pos = np.arange(8)[None]
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    mine = expected / cfg.attention_factor
    r = posenc.compare(mine, expected, x=x, positions=pos, cfg=cfg)
    assert not r.ok and "attention factor" in r.hint
    r = posenc.compare(mine, expected)  # without x: from the norms
    assert "scaled by" in r.hint


def test_padding_shift_is_named(setup):
    cfg, x, pos = setup
    pos = np.tile(np.arange(40), (2, 1))
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    # row 1 was left-padded by 3 and its positions counted the padding
    mine = expected.copy()
    mine[1] = posenc.apply_rope(x[1:2], pos[1:2] + 3, cfg=cfg)[0]
    r = posenc.compare(mine, expected, x=x, positions=pos, cfg=cfg)
    assert not r.ok and "row 1: +3" in r.hint


def test_compare_accepts_torch_tensors(setup):
    import torch
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    assert posenc.compare(torch.from_numpy(expected.copy()), expected).ok
    hf = torch.from_numpy(hf_rope_f32(x, pos, 10000.0))
    r = posenc.compare(hf, x=torch.from_numpy(x.astype(np.float32)), positions=pos, cfg=cfg)
    assert r.ok


def test_bad_input_names_the_argument(setup):
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    with pytest.raises(ValueError, match="x must have the shape of actual"):
        posenc.compare(expected, x=x[:, :3], positions=pos, cfg=cfg)
    with pytest.raises(ValueError, match="compare needs expected, or x and cfg"):
        posenc.compare(expected, x=x)
    with pytest.raises(ValueError, match="layout must be half or interleaved"):
        posenc.compare(expected, expected, layout="neox")
    with pytest.raises(ValueError, match="positions must broadcast"):
        posenc.compare(expected, x=x, positions=pos[:, :3], cfg=cfg)
    with pytest.raises(ValueError, match="positions must be >= 0"):
        posenc.compare(expected, x=x, positions=pos - 100, cfg=cfg)
    with pytest.raises(TypeError, match="actual must be float16, bfloat16, float32 or float64"):
        posenc.compare(expected.astype(np.int32), expected)


def test_real_transformers_float32_is_ok_as_hf_f32(rng):
    # transformers' own float32 cos / sin (tests/golden/transformers, commit c49429ed, positions
    # 0 to 100000) applied by its rotation, q * cos + rotate_half(q) * sin in float32 (or the
    # interleaved form its model class uses): every config ok as hf_f32, none within exact.
    import json
    import pathlib
    import warnings

    gold = pathlib.Path(__file__).resolve().parents[1] / "golden" / "transformers"
    configs = json.loads((gold / "rope.json").read_text())
    cs = np.load(gold / "rope_cos_sin.npz")
    pos = np.asarray(configs["positions"])[None]
    checked = 0
    for name, c in configs["configs"].items():
        for lt, r in (c.get("rope") or {}).items():
            if f"{name}/{lt}/cos" not in cs:
                continue
            with warnings.catch_warnings():  # precedence notes of the partial configs
                warnings.simplefilter("ignore")
                cfg = posenc.RopeConfig.from_hf(c["processed"], None if lt == "all" else lt)
            R, lay = r["rotary_dim"], r["cos_sin_layout"]
            if cfg.rotary_dim != R:  # proportional: transformers lists the rotated pairs only
                continue
            cos, sin = cs[f"{name}/{lt}/cos"], cs[f"{name}/{lt}/sin"]
            x = rng.standard_normal((1, pos.shape[1], 2, cfg.head_dim)).astype(np.float32)
            xr = x[..., :R]
            if lay == "half":
                C, S = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
                rot = np.concatenate([-xr[..., R // 2:], xr[..., : R // 2]], -1)
            else:
                C, S = np.repeat(cos, 2, -1), np.repeat(sin, 2, -1)
                rot = np.stack([-xr[..., 1::2], xr[..., ::2]], -1).reshape(xr.shape)
            out = x.copy()
            out[..., :R] = xr * C[None, :, None] + rot * S[None, :, None]
            res = posenc.compare(out, x=x, positions=pos, cfg=cfg, layout=lay,
                                 seq_len=r["forward_seq_len"])
            assert res.ok and res.pipeline == "hf_f32", f"{name} {lt}: {res}"
            assert res.max_ratio > 1, f"{name} {lt}: {res}"
            checked += 1
    assert checked >= 50
