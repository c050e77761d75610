"""posenc.compare: derived tolerance, and hints for the usual RoPE mistakes."""

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


def test_float32_engine_with_exact_angles_passes(setup):
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    # an engine that rotates float32 data with float64 angles rounded to float32
    inv = ref.inv_freq_default(10000.0, 32)
    mine = ref.rope_rotate(x.astype(np.float32), pos, inv, "half").astype(np.float32)
    r = posenc.compare(mine, expected)
    assert r.ok and r.max_ratio <= 1 and r.hint is None
    assert r.rtol == 8 * 2.0**-24


def test_other_layout_is_named(setup):
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg, layout="half")
    mine = ref.rope_rotate(x, pos, ref.inv_freq_default(10000.0, 32), "interleaved")
    r = posenc.compare(mine, expected, x=x, positions=pos, cfg=cfg)
    assert not r.ok and "other pair layout (interleaved)" in r.hint
    assert r.worst_position is not None and r.worst_pair is not None


def test_float32_angles_are_named(setup):
    cfg, x, pos = setup
    expected = posenc.apply_rope(x, pos, cfg=cfg)
    # HF's float32 path: float32 inv_freq times float32 positions, float32 cos/sin
    ang = pos.astype(np.float32)[..., None] * ref.inv_freq_default(10000.0, 32).astype(np.float32)
    c, s = np.cos(ang).astype(np.float64), np.sin(ang).astype(np.float64)
    u, v = x[..., :16], x[..., 16:]
    mine = np.concatenate([u * c[:, :, None] - v * s[:, :, None],
                           v * c[:, :, None] + u * s[:, :, None]], axis=-1)
    r = posenc.compare(mine, expected, x=x, positions=pos, cfg=cfg)
    assert not r.ok and "float32 angles" in r.hint
    # the error grows with the position: the last positions are the worst
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
