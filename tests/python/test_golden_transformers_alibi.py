"""posenc's ALiBi against transformers' Bloom, Falcon and MPT run unchanged
(tests/golden/transformers/alibi.json, scripts/golden/transformers_alibi.py at the commit it names).

Bounds, with u = 2^-24 (float32's unit roundoff):

- Bloom computes slope h as float32 pow(b, k) with b = 2^(-8/n) rounded to float32 (n = P, the
  largest power of two <= H, for the first P heads, k = h + 1; n = 2P, k = 1, 3, 5, .. for the
  rest). b carries a relative error <= u, which the power multiplies by k, and pow rounds (<= 2u
  for a faithful float pow): |bloom / exact - 1| <= (k + 3) u. posenc's slopes are the exact ones
  to 2 ulp of double.
- Falcon rounds Bloom's float32 slopes to bfloat16 (8 significant bits) before multiplying: its
  slopes are posenc's rounded to bfloat16, exactly, for every H here (a test below). Its slopes
  differ from Bloom's by up to 2^-9 relative: to run a Falcon ALiBi model, pass those slopes.
- MPT: 1 / pow(2, k * bias_max / P) in float32, the exponent exact (bias_max / P a power of two),
  pow and the division rounding once each: |mpt / exact - 1| <= 3u (one u of slack). MPT's
  formula (P = 2^ceil(log2 H), the odd-indexed slopes first) gives Press's slopes for every H:
  its slopes at even k are 2^(-b m / (P/2)), Press's first P/2 heads, and those at odd k Press's
  second sequence. posenc's mpt and press conventions agree to the last bit (a test below).
- BloomAttention in float64 adds slope * key position (the softmax forgets the per-row constant
  slope * query position), and computes that product in float32 (float32 slopes times integer
  positions) even in a float64 model: its bias is off the exact one by <= u |slope| j. posenc adds
  -slope (i - j) in double. Each score thus differs by ds <= u max|slope| (T - 1) (plus a few ulp
  of double), each probability by <= 2 ds p and each output by <= 2 ds max|v|.
"""

import json
import pathlib

import numpy as np
import pytest

import posenc

GOLDEN = json.loads((pathlib.Path(__file__).parents[1] / "golden" / "transformers" /
                     "alibi.json").read_text())
U = 2.0**-24


def press_powers(H):
    """k of each head's slope: b^k, b = 2^(-8/n)."""
    P = 1 << (H.bit_length() - 1)
    return [h + 1 for h in range(P)] + [2 * i + 1 for i in range(H - P)]


def to_bfloat16(x):
    """Round float32 values to bfloat16 (nearest, ties to even), returned as float64."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("H", GOLDEN["heads"])
def test_bloom_slopes_are_press(H):
    got = np.asarray(posenc.alibi_slopes(H, max_bias=8.0, convention="press"))
    want = np.array(GOLDEN["bloom_slopes"][str(H)])
    bound = (np.array(press_powers(H)) + 3) * U
    assert np.all(np.abs(want / got - 1) <= bound), H


def test_falcon_slopes_are_press_in_bfloat16():
    for H in GOLDEN["heads"]:
        got = np.asarray(posenc.alibi_slopes(H, max_bias=8.0, convention="press"))
        want = np.array(GOLDEN["falcon_slopes"][str(H)])
        assert np.array_equal(to_bfloat16(got.astype(np.float32)), want), H
    # The trap: Falcon's slopes are not Bloom's (up to 2^-9 relative).
    bloom = np.array(GOLDEN["bloom_slopes"]["12"])
    falcon = np.array(GOLDEN["falcon_slopes"]["12"])
    assert 0 < np.abs(falcon / bloom - 1).max() <= 2.0**-9


@pytest.mark.parametrize("bias_max", ["8", "16"])
def test_mpt_slopes(bias_max):
    for H in GOLDEN["heads"]:
        got = np.asarray(posenc.alibi_slopes(H, max_bias=float(bias_max), convention="mpt"))
        want = np.array(GOLDEN["mpt_slopes"][bias_max][str(H)])
        assert np.all(np.abs(want / got - 1) <= 3 * U), (bias_max, H)
        # MPT's formula is another way to write Press's slopes.
        press = np.asarray(posenc.alibi_slopes(H, max_bias=float(bias_max), convention="press"))
        assert np.array_equal(got, press), (bias_max, H)


def test_bloom_left_padding_positions():
    # Bloom's positions are cumsum(mask) - 1, 0 at pads: a left-padded row starts at 0.
    assert GOLDEN["bloom_padded_positions"] == [0, 0, 0, 0, 1, 2, 3, 4, 5]


def test_bloom_attention_layer():
    a = GOLDEN["bloom_attention"]
    H, D, T = a["H"], a["D"], a["T"]
    mask = np.array(a["mask"], dtype=bool)  # (B, T), True = real token
    q, k, v = (np.array(a[n]).transpose(0, 2, 1, 3) for n in ("q", "k", "v"))  # (B, T, H, D)
    slopes = np.array(GOLDEN["bloom_slopes"][str(H)])  # the layer's own (float32) slopes
    pos = np.maximum(np.cumsum(mask, axis=1) - 1, 0) * mask
    kw = dict(causal=True, alibi=slopes, q_positions=pos, k_positions=pos, key_padding=mask)
    out = posenc.attention(q, k, v, **kw)  # (B, T, H, D)
    context = np.array(a["context"]).reshape(2, T, H, D)
    probs = np.array(a["probs"])  # (B, H, T, T)
    real = mask  # queries at pads attend to pads only in Bloom: not compared
    ds = 2.0**-24 * np.abs(slopes).max() * (T - 1) + 1e-14
    np.testing.assert_allclose(out[real], context[real], rtol=0, atol=2 * ds * np.abs(v).max())
    # The probabilities, read out with one-hot values (D >= T).
    assert D >= T
    onehot = np.zeros((2, T, H, D))
    for j in range(T):
        onehot[:, j, :, j] = 1
    p = posenc.attention(q, k, onehot, **kw)[..., :T]  # (B, T, H, T)
    np.testing.assert_allclose(p[real], probs.transpose(0, 2, 1, 3)[real], rtol=0, atol=2 * ds)
    # With posenc's own Press slopes (in double) instead of the layer's float32 ones, each score
    # moves by a further max_h |slope_h| (k_h + 3) u (T - 1).
    own = posenc.attention(q, k, v, **{**kw, "alibi": True})
    ds += (np.abs(slopes) * (np.array(press_powers(H)) + 3) * U).max() * (T - 1)
    err = np.abs(own[real] - context[real]).max()
    assert 0 < err <= 2 * ds * np.abs(v).max()
