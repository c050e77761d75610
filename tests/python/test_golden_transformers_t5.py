"""posenc's T5 buckets and its T5 bias in attention against transformers' T5Attention run unchanged
(tests/golden/transformers/t5.json, scripts/golden/transformers_t5.py at the commit it names).

- The buckets of offsets -300..300 for T5's sizes (32 buckets, max distance 128) and the case
  tables' (16, 20), both directions: equal, integer for integer.
- compute_bias of an encoder layer (is_decoder False) and a decoder layer (True) with a known
  table: posenc.attention with that table as t5_table and t5_bidirectional left at its default
  ("not causal") must attend with that bias, the encoder without a mask and the decoder causal.
  With q = 0 the scores are the bias alone and one-hot values read the probabilities out, which
  are compared with the softmax of transformers' bias in float64: the bias entries are copies of
  float32 table values, so the only difference is the softmax's rounding (a few ulp).
"""

import json
import pathlib

import numpy as np

import posenc

GOLDEN = json.loads((pathlib.Path(__file__).parents[1] / "golden" / "transformers" /
                     "t5.json").read_text())


def test_buckets_equal_transformers():
    offsets = np.array(GOLDEN["offsets"], dtype=np.int64)
    for case in GOLDEN["buckets"]:
        got = posenc.t5_buckets(offsets, bidirectional=case["bidirectional"],
                                num_buckets=case["num_buckets"], max_distance=case["max_distance"])
        assert np.array_equal(np.asarray(got), np.array(case["buckets"])), case["num_buckets"]


def test_attention_bias_follows_the_layer_kind():
    table = np.array(GOLDEN["table"], dtype=np.float32).astype(np.float64)  # (num_buckets, H)
    for case in GOLDEN["biases"]:
        bias = np.array(case["bias"])  # (H, T, T)
        H, T = bias.shape[0], case["T"]
        q = np.zeros((T, H, T))
        k = np.zeros((T, 1, T))
        v = np.eye(T).reshape(T, 1, T)  # one-hot: out[i, h] = the probabilities of row (h, i)
        causal = case["is_decoder"]
        out = posenc.attention(q, k, v, causal=causal, t5_table=table,
                               t5_max_distance=GOLDEN["max_distance"])
        s = bias.copy()
        if causal:
            s[:, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] = -np.inf
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(out.transpose(1, 0, 2), p, rtol=0, atol=1e-14)
        # The other direction's buckets attend differently: the default is the layer's.
        other = posenc.attention(q, k, v, causal=causal, t5_table=table,
                                 t5_max_distance=GOLDEN["max_distance"],
                                 t5_bidirectional=causal)
        assert np.abs(other - out).max() > 1e-3
