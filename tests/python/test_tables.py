"""Sinusoidal tables, learned tables, ALiBi and T5 against the formulas."""

import json
import math
import subprocess

import numpy as np
import pytest
import reference as ref

import posenc


@pytest.mark.parametrize("layout", ["interleaved", "halves"])
@pytest.mark.parametrize("denominator", ["width", "half-minus-one"])
def test_sinusoidal_table_matches_formula(layout, denominator):
    pos = np.array([0, 1, 2, 7, 100, 4095])
    got = posenc.sinusoidal_table(pos, width=64, layout=layout, denominator=denominator)
    want = ref.sinusoidal(pos, 64, layout=layout, denominator=denominator)
    # reference: p w rounded once (<= u p w, w <= 1) + 1 ulp; posenc <= 1e-15 + 2e-19 p w
    # (include/posenc/encodings/sinusoidal.hpp)
    tol = (pos.max() + 2) * ref.U64 + 2e-15
    assert got.dtype == np.float64 and got.shape == (6, 64)
    assert np.max(np.abs(got - want)) <= tol
    f32 = posenc.sinusoidal_table(pos, width=64, layout=layout, denominator=denominator,
                                  dtype=np.float32)
    assert f32.dtype == np.float32
    # float32: the float64 table rounded once (<= u_f relative, values <= 1)
    assert np.max(np.abs(f32 - got)) <= ref.U32


def test_sinusoidal_seed_example():
    # The worked example of docs/cli.md: width 4 at positions 0, 1, 2
    got = posenc.sinusoidal_table(3, width=4)
    want = np.array([[0, 1, 0, 1],
                     [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
                     [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]])
    assert np.max(np.abs(got - want)) <= 4 * ref.U64


def test_alibi_slopes_conventions():
    assert np.array_equal(posenc.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    for n in (6, 12, 24, 40):
        got = posenc.alibi_slopes(n)
        # posenc: 2 ulp; the reference's start * start**i: about (i + 2) u with i < 2 n
        assert np.allclose(got, ref.alibi_slopes_press(n), rtol=(4 * n + 4) * ref.U64, atol=0)
    # geometric: m_h = 2^(-8 (h + 1) / H)
    got = posenc.alibi_slopes(6, convention="geometric")
    assert np.allclose(got, 2.0 ** (-8 * np.arange(1, 7) / 6), rtol=4 * ref.U64, atol=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_alibi_bias(causal, dtype):
    slopes = posenc.alibi_slopes(4)
    q = np.array([3, 4, 9])
    k = np.arange(10)
    got = posenc.alibi_bias(slopes, q, k, causal=causal, dtype=dtype)
    d = (k[None, :] - q[:, None]).astype(np.float64)
    want = slopes[:, None, None] * (d if causal else -np.abs(d))[None]
    assert got.dtype == dtype and got.shape == (4, 3, 10)
    # exact in float64 (a power of two times an integer); one rounding in float32
    assert np.array_equal(got, want.astype(dtype))


def test_t5_buckets_match_mesh_tensorflow():
    r = np.arange(-300, 301)
    for bidirectional in (True, False):
        got = posenc.t5_buckets(r, bidirectional=bidirectional)
        assert np.array_equal(got, ref.t5_bucket(r, bidirectional))
    # docs/cli.md: causal buckets of offsets -3..3
    assert posenc.t5_buckets(np.arange(-3, 4), bidirectional=False).tolist() == [3, 2, 1, 0, 0, 0, 0]


def test_t5_bias_gathers_the_table(rng):
    table = rng.standard_normal((32, 3)).astype(np.float32)
    q, k = np.arange(5, 12), np.arange(20)
    got = posenc.t5_bias(table, q, k, bidirectional=True)
    b = ref.t5_bucket(k[None, :] - q[:, None], True)
    assert np.array_equal(got, np.transpose(table[b], (2, 0, 1)))


def test_learned_table_round_trip(tmp_path, rng):
    w = rng.standard_normal((10, 6)).astype(np.float32)
    t = posenc.LearnedTable(w)
    t.save(tmp_path / "t.bin")
    u = posenc.LearnedTable.load(tmp_path / "t.bin")
    assert np.array_equal(u.weights, w)
    assert np.array_equal(u.lookup([0, 9, 3]), w[[0, 9, 3]])
    with pytest.raises(ValueError, match="position 10 is outside the learned table"):
        u.lookup([10])
    (tmp_path / "t.bin").write_bytes((tmp_path / "t.bin").read_bytes()[:-4])
    with pytest.raises(OSError, match="t.bin"):
        posenc.LearnedTable.load(tmp_path / "t.bin")


def test_alibi_slopes_equal_cli(cli):
    out = subprocess.run([str(cli), "alibi", "slopes", "--heads", "6", "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    # JSON numbers are printed with 17 significant digits: they read back exactly
    vals = json.loads(out)["slopes"]
    assert np.array_equal(np.array(vals, dtype=np.float64), posenc.alibi_slopes(6))
