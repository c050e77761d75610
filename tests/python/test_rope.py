"""RoPE from Python against the NumPy reference (tests/python/reference.py) and the CLI."""

import json
import math
import pathlib
import subprocess

import numpy as np
import pytest
import reference as ref

import posenc

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "rope"


def rope_tol(x, positions, inv_freq, R, layout, dtype, a=1.0):
    """Bound on |posenc - reference| per channel of [0, R).

    reference (float64): (p omega + 4) u a (|x_u| + |x_v|) (reference.rope_rotate), plus
      2 p omega u for omega within 1 ulp on either side;
    posenc float64: 5.5 u a (|x_u| + |x_v|) (include/posenc/verify/rope_cases.hpp);
    posenc float32: (3 u_f + 5.5 u) a (|x_u| + |x_v|) on the float32 input.
    """
    pw = float(np.max(positions)) * float(np.max(inv_freq))
    per = (3 * pw + 4 + 5.5) * ref.U64 + (3 * ref.U32 if dtype == np.float32 else 0)
    return per * a * ref.pair_magnitude(x, R, layout)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_apply_rope_matches_reference(rng, layout, dtype):
    B, T, H, D = 2, 17, 3, 64
    cfg = posenc.RopeConfig(head_dim=D, theta=10000.0)
    x = rng.standard_normal((B, T, H, D)).astype(dtype)
    pos = rng.integers(0, 50, size=(B, T))
    y = posenc.apply_rope(x, pos, cfg=cfg, layout=layout)
    assert y.dtype == dtype and y.shape == x.shape
    inv = ref.inv_freq_default(10000.0, D)
    want = ref.rope_rotate(x, pos, inv, layout)
    tol = rope_tol(x, pos, inv, D, layout, dtype)
    assert np.all(np.abs(y.astype(np.float64) - want) <= tol)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rotary_passes_channels_through_bitwise(rng, layout):
    D, R = 80, 32
    cfg = posenc.RopeConfig(head_dim=D, rotary_dim=R, theta=500000.0)
    assert cfg.rotary_dim == R
    x = rng.standard_normal((9, 4, D))
    pos = np.arange(9) * 7
    y = posenc.apply_rope(x, pos, cfg=cfg, layout=layout)
    assert np.array_equal(y[..., R:], x[..., R:])
    inv = ref.inv_freq_default(500000.0, R)
    want = ref.rope_rotate(x, pos, inv, layout)
    assert np.all(np.abs(y[..., :R] - want[..., :R]) <= rope_tol(x, pos, inv, R, layout, np.float64))


def test_default_positions_seqlen_offsets_and_varlen(rng):
    D = 16
    cfg = posenc.RopeConfig(head_dim=D)
    x = rng.standard_normal((3, 5, 2, D))
    # positions None: offset + t per sequence
    offsets = np.array([0, 4, 11])
    y = posenc.apply_rope(x, cfg=cfg, seqlen_offsets=offsets)
    explicit = posenc.apply_rope(x, offsets[:, None] + np.arange(5)[None, :], cfg=cfg)
    assert np.array_equal(y, explicit)
    # an int offset applies to every sequence
    assert np.array_equal(
        posenc.apply_rope(x, cfg=cfg, seqlen_offsets=3),
        posenc.apply_rope(x, np.arange(3, 8), cfg=cfg),
    )
    # varlen: (total, H, D) with cu_seqlens; positions restart at each sequence (+ offset)
    cu = np.array([0, 2, 7, 10], dtype=np.int32)
    xv = rng.standard_normal((10, 2, D))
    yv = posenc.apply_rope(xv, cfg=cfg, cu_seqlens=cu, seqlen_offsets=np.array([1, 0, 5]))
    pos = np.concatenate([np.arange(2) + 1, np.arange(5), np.arange(3) + 5])
    assert np.array_equal(yv, posenc.apply_rope(xv, pos, cfg=cfg))


def test_inverse_is_transpose_and_inplace(rng):
    cfg = posenc.RopeConfig(head_dim=32, scaling="yarn", factor=4.0,
                            original_max_position_embeddings=64)
    a = cfg.attention_factor
    assert a == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-15)
    x = rng.standard_normal((6, 2, 32))
    g = rng.standard_normal((6, 2, 32))
    pos = np.array([0, 1, 5, 63, 64, 300])
    y = posenc.apply_rope(x, pos, cfg=cfg, seq_len=301)
    gt = posenc.apply_rope(g, pos, cfg=cfg, inverse=True, seq_len=301)
    # adjoint identity <f(x), g> = <x, f^T(g)>
    assert np.vdot(y, g) == pytest.approx(np.vdot(x, gt), rel=1e-13)
    # inplace returns the same array, rotated
    z = x.copy()
    r = posenc.apply_rope(z, pos, cfg=cfg, inplace=True, seq_len=301)
    assert r is z and np.array_equal(z, y)


def test_non_contiguous_input_is_copied_not_changed(rng):
    cfg = posenc.RopeConfig(head_dim=8)
    base = rng.standard_normal((4, 3, 16))
    x = base[:, :, ::2]  # non-contiguous view
    before = x.copy()
    y = posenc.apply_rope(x, np.arange(4), cfg=cfg)
    assert np.array_equal(x, before)
    assert np.array_equal(y, posenc.apply_rope(np.ascontiguousarray(x), np.arange(4), cfg=cfg))


def test_f32_angles(rng):
    # angle = float32(p) * float32(omega) in float32, then float cos/sin (HF's float32 path)
    D = 16
    cfg = posenc.RopeConfig(head_dim=D)
    pos = np.array([0, 1, 100, 5000, 70000])
    c, s = posenc.rope_cos_sin(cfg, pos, angle="f32", dtype=np.float32)
    ang = pos.astype(np.float32)[:, None] * ref.inv_freq_default(10000.0, D).astype(np.float32)
    assert ang.dtype == np.float32
    # the same float32 angle: posenc's cosf/sinf within 1 ulp, NumPy's float32 cos/sin within
    # 3 ulp (an ulp is <= 2^-23 = 2 u_f for |value| <= 1)
    assert np.max(np.abs(c - np.cos(ang))) <= 8 * ref.U32
    assert np.max(np.abs(s - np.sin(ang))) <= 8 * ref.U32


def test_rope_cos_sin_float64(rng):
    cfg = posenc.RopeConfig(head_dim=64, theta=10000.0)
    pos = np.array([0, 1, 2, 31, 1000])
    c, s = posenc.rope_cos_sin(cfg, pos)
    assert c.dtype == np.float64 and c.shape == (5, 32)
    inv = ref.inv_freq_default(10000.0, 64)
    ang = pos[:, None] * inv
    # omega within 1 ulp on either side (each moves the angle by <= u p omega), the
    # reference's p omega rounded once (<= u p omega), np.cos/np.sin 1 ulp, posenc 2.5 u
    tol = (3 * ang + 4) * ref.U64
    assert np.all(np.abs(c - np.cos(ang)) <= tol)
    assert np.all(np.abs(s - np.sin(ang)) <= tol)


def test_inv_freq_every_scaling():
    R = 128
    got = posenc.RopeConfig(head_dim=R, theta=500000.0).inv_freq()
    assert np.allclose(got, ref.inv_freq_default(500000.0, R), rtol=4 * ref.U64, atol=0)
    got = posenc.RopeConfig(head_dim=R, scaling="linear", factor=4.0).inv_freq()
    assert np.allclose(got, ref.inv_freq_linear(10000.0, R, 4.0), rtol=4 * ref.U64, atol=0)
    cfg = posenc.RopeConfig(head_dim=R, scaling="dynamic", factor=2.0, max_position_embeddings=2048)
    assert np.allclose(cfg.inv_freq(), ref.inv_freq_default(10000.0, R), rtol=4 * ref.U64, atol=0)
    # pow of a rounded base: relative error of omega_i grows with the exponent (< 64 u here)
    assert np.allclose(cfg.inv_freq(seq_len=5000),
                       ref.inv_freq_dynamic(10000.0, R, 2.0, 2048, 5000), rtol=64 * ref.U64, atol=0)
    cfg = posenc.RopeConfig(head_dim=R, theta=500000.0, scaling="llama3", factor=8.0,
                            low_freq_factor=1.0, high_freq_factor=4.0,
                            original_max_position_embeddings=8192)
    assert np.allclose(cfg.inv_freq(), ref.inv_freq_llama3(500000.0, R, 8.0, 1.0, 4.0, 8192),
                       rtol=8 * ref.U64, atol=0)
    cfg = posenc.RopeConfig(head_dim=R, theta=1000000.0, scaling="yarn", factor=4.0,
                            original_max_position_embeddings=32768)
    inv, a = ref.yarn(1000000.0, R, 4.0, 32768)
    assert np.allclose(cfg.inv_freq(), inv, rtol=8 * ref.U64, atol=0)
    assert cfg.attention_factor == pytest.approx(a, rel=4 * ref.U64)


def test_from_hf_path_and_dict():
    path = DATA / "llama3_1_8b.json"
    cfg = posenc.RopeConfig.from_hf(path)
    with open(path) as f:
        d = json.load(f)
    assert np.array_equal(posenc.RopeConfig.from_hf(d).inv_freq(), cfg.inv_freq())
    assert cfg.scaling == "llama3" and cfg.head_dim == 128
    rs = d["rope_scaling"]
    want = ref.inv_freq_llama3(d["rope_theta"], 128, rs["factor"], rs["low_freq_factor"],
                               rs["high_freq_factor"], rs["original_max_position_embeddings"])
    assert np.allclose(cfg.inv_freq(), want, rtol=8 * ref.U64, atol=0)


def test_from_hf_warning_is_a_python_warning():
    with pytest.warns(UserWarning, match="rope_scaling.factor = 4 disagrees"):
        posenc.RopeConfig.from_hf(DATA / "qwen2_5_7b_yarn.json")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_cli_rope_apply(cli, tmp_path, rng, dtype):
    x = rng.standard_normal((7, 3, 16)).astype(dtype)
    pos = np.array([0, 3, 9, 100, 1001, 5, 2], dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "p.npy", pos)
    subprocess.run(
        [str(cli), "rope", "apply", "--x", str(tmp_path / "x.npy"), "--positions",
         str(tmp_path / "p.npy"), "--head-dim", "16", "--theta", "10000", "--layout",
         "interleaved", "--out", str(tmp_path / "y.npy")],
        check=True, capture_output=True,
    )
    cfg = posenc.RopeConfig(head_dim=16, theta=10000.0)
    y = posenc.apply_rope(x, pos, cfg=cfg, layout="interleaved")
    assert np.array_equal(y, np.load(tmp_path / "y.npy"))


@pytest.mark.parametrize("config", ["llama2_7b.json", "llama3_1_8b.json"])
def test_hf_f32_matches_pytorch(config):
    # transformers' float32 pipeline run in PyTorch (the formulas of modeling_rope_utils.py and
    # LlamaRotaryEmbedding, written here with torch ops): for these two configs posenc's hf_f32
    # inv_freq is bit-identical to torch's (docs/conventions.md), so the angles are too, and
    # cos / sin differ only by torch's SLEEF cos / sin (< 1 ulp) against posenc's correctly
    # rounded ones: at most 1 ulp, <= 2^-24 for values below 1. The plain float32 angle (f32)
    # starts from posenc's double frequencies rounded, 19 of which differ from torch's for
    # Llama 2: it is measurably further away.
    import torch

    cfg = posenc.RopeConfig.from_hf(str(DATA / config))
    raw = json.loads((DATA / config).read_text())
    base, dim = float(raw["rope_theta"]), cfg.rotary_dim
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rs = raw.get("rope_scaling") or {}
    if rs.get("rope_type") == "llama3":
        s, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        il = torch.where(wl > old / lo, inv / s, inv)
        sm = (old / wl - lo) / (hi - lo)
        smoothed = (1 - sm) * il / s + sm * il
        medium = ~(wl < old / hi) * ~(wl > old / lo)
        inv = torch.where(medium, smoothed, il)
    pos = np.array([0, 1, 7, 100, 4095, 70000, 1000003])
    freqs = (inv[None, :, None].float() @ torch.tensor(pos)[None, None, :].float())[0].T
    tc, ts = freqs.cos().numpy(), freqs.sin().numpy()
    c, s = posenc.rope_cos_sin(cfg, pos, angle="hf_f32", dtype=np.float32, seq_len=0)
    assert np.max(np.abs(c - tc)) <= 2.0**-24
    assert np.max(np.abs(s - ts)) <= 2.0**-24
    cf, sf = posenc.rope_cos_sin(cfg, pos, angle="f32", dtype=np.float32, seq_len=0)
    assert max(np.max(np.abs(cf - tc)), np.max(np.abs(sf - ts))) > 1e-4


def test_hunyuan_alpha_and_the_note_on_unheld_classes():
    # Hunyuan's rope_scaling.alpha (HunYuanDenseV1RotaryEmbedding): base = theta *
    # alpha ** (D / (D - 2)) up to max_position_embeddings, computed here with math.pow. Its
    # class is swept (tests/golden/transformers/sweep.json, class_table.json): no note; a model
    # type never swept gets one that says so.
    cfg = {"model_type": "hunyuan_v1_dense", "head_dim": 128, "rope_theta": 10000.0,
           "max_position_embeddings": 32768,
           "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = posenc.RopeConfig.from_hf(cfg)
    with pytest.warns(UserWarning, match=r"model_type my_new_model is not among the \d+ model types "
                                         r"held against transformers c49429ed"):
        posenc.RopeConfig.from_hf({**cfg, "model_type": "my_new_model", "rope_scaling": None})
    assert c.alpha == 1000.0 and "alpha=1000" in repr(c)
    base = 10000.0 * math.pow(1000.0, 128 / 126)
    inv, a = c.frequencies()
    want = np.array([1.0 / math.pow(base, 2 * i / 128) for i in range(64)])
    np.testing.assert_allclose(inv, want, rtol=4e-16, atol=0)
    assert a == 1.0
