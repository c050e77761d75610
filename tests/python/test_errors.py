"""Bad input: each wrong call raises the right exception, naming the argument and the value."""

import subprocess

import numpy as np
import pytest

import posenc

CFG = posenc.RopeConfig(head_dim=8)
X = np.zeros((2, 3, 8), dtype=np.float32)
Q = np.zeros((4, 2, 8))
POS = np.arange(2)

BAD = [
    # (call, exception, message fragment)
    (lambda: posenc.RopeConfig(head_dim=8, theta=0.5), ValueError, "rope_theta"),
    (lambda: posenc.RopeConfig(head_dim=8, scaling="linear", factor=0.5), ValueError,
     "rope_scaling.factor must be >= 1, got 0.5"),
    (lambda: posenc.RopeConfig(head_dim=8, scaling="magic"), ValueError, "magic"),
    (lambda: posenc.RopeConfig(head_dim=8, rotary_dim=3), ValueError, "partial_rotary_factor"),
    (lambda: posenc.RopeConfig(head_dim="8"), TypeError, "head_dim must be an int"),
    (lambda: posenc.RopeConfig.from_hf(42), TypeError, "path_or_dict"),
    (lambda: posenc.RopeConfig.from_hf("/nonexistent/config.json"), OSError,
     "/nonexistent/config.json"),
    (lambda: posenc.apply_rope(X.astype(np.int32), POS, cfg=CFG), TypeError,
     "x must be float32 or float64, got int32"),
    (lambda: posenc.apply_rope(X.astype(np.float16), POS, cfg=CFG), TypeError, "float16"),
    (lambda: posenc.apply_rope(np.zeros((2, 3, 6), np.float32), POS, cfg=CFG), ValueError,
     "head_dim = 8"),
    (lambda: posenc.apply_rope(np.zeros((2, 8), np.float32), POS, cfg=CFG), ValueError,
     "x must have shape (B, T, H, D) or (T, H, D), got (2, 8)"),
    (lambda: posenc.apply_rope(X, np.arange(3), cfg=CFG), ValueError,
     "positions must have shape (T,) = (2,), got (3,)"),
    (lambda: posenc.apply_rope(X, np.array([0, -1]), cfg=CFG), ValueError,
     "positions must be >= 0, got -1 at index 1"),
    (lambda: posenc.apply_rope(X, np.array([0.0, 1.0]), cfg=CFG), TypeError,
     "positions must hold integers"),
    (lambda: posenc.apply_rope(X, POS, cfg=CFG, layout="diagonal"), ValueError, "diagonal"),
    (lambda: posenc.apply_rope(X, POS, cfg=CFG, angle="fast"), ValueError, "fast"),
    (lambda: posenc.apply_rope(X, POS, cfg=CFG, seqlen_offsets=3), ValueError, "seqlen_offsets"),
    (lambda: posenc.apply_rope(X, cfg=CFG, cu_seqlens=np.array([0, 1])), ValueError,
     "cu_seqlens must end at the total token count 2, got 1"),
    (lambda: posenc.apply_rope(np.zeros((4, 2, 2, 8))[:, :, :, ::-1], POS, cfg=CFG,
                               inplace=True), ValueError, "C-contiguous"),
    (lambda: posenc.apply_rope(X, POS, cfg=CFG, seq_len=-1), ValueError,
     "seq_len must be >= 0, got -1"),
    (lambda: posenc.rope_cos_sin(CFG, POS, dtype=np.int64), TypeError, "dtype"),
    (lambda: posenc.sinusoidal_table(4, width=5), ValueError, "width must be even"),
    (lambda: posenc.sinusoidal_table(4, width=8, base=1.0), ValueError, "base"),
    (lambda: posenc.sinusoidal_table(np.array([1, -2]), width=8), ValueError, "-2"),
    (lambda: posenc.sinusoidal_table(4, width=8, layout="rows"), ValueError, "rows"),
    (lambda: posenc.alibi_slopes(0), ValueError, "heads"),
    (lambda: posenc.alibi_slopes(4, convention="bloom"), ValueError, "bloom"),
    (lambda: posenc.alibi_slopes(4, max_bias=float("nan")), ValueError, "max_bias"),
    (lambda: posenc.t5_buckets(np.arange(3), num_buckets=3), ValueError, "num_buckets"),
    (lambda: posenc.t5_bias(np.zeros((32,), np.float32), POS, POS), ValueError,
     "table must have shape (num_buckets, H)"),
    (lambda: posenc.attention(Q, Q, Q.astype(np.float32)), TypeError,
     "v must have the dtype of q (float64), got float32"),
    (lambda: posenc.attention(Q, np.zeros((4, 3, 8)), np.zeros((4, 3, 8))), ValueError, "Hkv"),
    (lambda: posenc.attention(Q, Q, np.zeros((5, 2, 8))), ValueError,
     "v must have the shape of k (4, 2, 8), got (5, 2, 8)"),
    (lambda: posenc.attention(Q.astype(np.int64), Q, Q), TypeError, "q must be float32"),
    (lambda: posenc.attention(Q, Q, Q, q_positions=np.arange(3)), ValueError,
     "q_positions must have shape (T,) = (4,), got (3,)"),
    (lambda: posenc.attention(Q, Q, Q, key_padding=np.ones(4, np.int32)), TypeError,
     "key_padding must be bool or uint8"),
    (lambda: posenc.attention(Q, Q, Q, alibi=np.ones(3)), ValueError,
     "alibi must have shape (Hq,) = (2,), got (3,)"),
    (lambda: posenc.attention(Q, Q, Q, t5_table=np.zeros((32, 3))), ValueError, "t5_table"),
    (lambda: posenc.attention(Q, Q, Q, shaw_keys=np.zeros((3, 8)),
                               shaw_values=np.zeros((3, 8)), shaw_clip=2), ValueError,
     "shaw_clip = 2 does not match the tables' 3 rows"),
    (lambda: posenc.attention(Q, Q, Q, rope=posenc.RopeConfig(head_dim=16)), ValueError,
     "rope.head_dim"),
    (lambda: posenc.attention(Q, Q, Q, rope="llama"), TypeError, "rope must be a posenc.RopeConfig"),
    (lambda: posenc.attention(Q, Q, Q, window=-1), ValueError, "window must be >= 0"),
    (lambda: posenc.attention(Q, Q, Q, cu_seqlens=np.array([0, 5])), ValueError, "cu_seqlens"),
    (lambda: posenc.attention_backward(Q, Q, Q, Q, np.zeros((4, 2)), np.zeros((4, 2, 4))),
     ValueError, "dout must have the shape of q (4, 2, 8), got (4, 2, 4)"),
    # the research schemes and the query temperature
    (lambda: posenc.attention(Q, Q, Q, kerple=np.zeros((2, 3))), ValueError,
     "kerple must have shape (2, Hq) = (2, 2), got (2, 3)"),
    (lambda: posenc.attention(Q, Q, Q, kerple=np.zeros((2, 2), np.int32)), TypeError,
     "kerple must be float32 or float64, got int32"),
    (lambda: posenc.attention(Q, Q, Q, kerple=np.full((2, 2), np.nan)), ValueError,
     "kerple must be finite"),
    (lambda: posenc.attention(Q, Q, Q, kerple=np.zeros((2, 2)), kerple_kernel="cubic"),
     ValueError, "kerple_kernel must be log or power, got 'cubic'"),
    (lambda: posenc.attention(Q, Q, Q, kerple_kernel="power"), ValueError,
     "kerple_kernel needs kerple"),
    (lambda: posenc.attention(Q, Q, Q, fire=np.zeros((2, 7))), ValueError,
     "fire must have shape (Hq, 3 m + 3) with m, the hidden units, in [1, 4096], got width 7"),
    (lambda: posenc.attention(Q, Q, Q, fire=np.zeros((2, 6)), fire_hidden=2), ValueError,
     "fire_hidden = 2 does not match fire's width 6 = 3 m + 3 (m = 1)"),
    (lambda: posenc.attention(Q, Q, Q, fire=np.zeros((3, 6))), ValueError, "got (3, 6)"),
    (lambda: posenc.attention(Q, Q, Q, xpos="yes"), TypeError, "xpos must be a bool"),
    (lambda: posenc.attention(Q, Q, Q, xpos=True, xpos_gamma=0.0), ValueError,
     "xpos_gamma must be finite and > 0, got 0"),
    (lambda: posenc.attention(Q, Q, Q, xpos=True, xpos_scale_base=float("inf")), ValueError,
     "xpos_scale_base must be finite"),
    (lambda: posenc.attention(Q, Q, Q, xpos=True, xpos_theta=1.0), ValueError,
     "xpos_theta must be finite and > 1"),
    (lambda: posenc.attention(Q, Q, Q, xpos=True, rope=CFG), ValueError,
     "rope cannot be combined with xpos: both map q and k at hook 1"),
    (lambda: posenc.attention(np.zeros((4, 2, 7)), np.zeros((4, 2, 7)), np.zeros((4, 2, 7)),
                              xpos=True), ValueError, "xpos needs an even head dim D, got D = 7"),
    (lambda: posenc.attention(Q, Q, Q, cope=np.zeros((5, 8))), ValueError,
     "cope needs causal attention (causal = true)"),
    (lambda: posenc.attention(Q, Q, Q, causal=True, cope=np.zeros((5, 4))), ValueError,
     "cope must have shape (npos, D) = (5, 8), got (5, 4)"),
    (lambda: posenc.attention(Q, Q, Q, causal=True, cope=np.zeros((5, 8)), alibi=True),
     ValueError, "cope cannot be combined with alibi: cope's positions come from the content"),
    (lambda: posenc.attention(Q, Q, Q, causal=True, cope=np.zeros((5, 8)),
                              attn_temperature_tuning=True), ValueError, "cope cannot be combined with temperature"),
    (lambda: posenc.attention(Q, Q, Q, causal=True, cope=np.zeros((5, 8)),
                              kerple=np.zeros((2, 2)), fire=np.zeros((2, 6))), ValueError,
     "cope cannot be combined with kerple"),
    (lambda: posenc.attention(Q, Q, Q, attn_temperature_tuning=True, floor_offset=-1), ValueError,
     "floor_offset must be finite and >= 0 (Llama 4: 1, Ministral 3: 0), got -1"),
    (lambda: posenc.attention(Q, Q, Q, attn_temperature_tuning=True, rope=CFG,
                              self_extend=True, causal=True), ValueError,
     "self_extend cannot be combined with temperature"),
    (lambda: posenc.attention(Q, Q, Q, attn_temperature_tuning=True, floor_scale=0), ValueError,
     "floor_scale must be finite and > 0, got 0"),
    (lambda: posenc.attention(Q, Q, Q, attn_temperature_tuning=True, attn_scale=-1), ValueError,
     "attn_scale must be finite and >= 0, got -1"),
    (lambda: posenc.attention(Q, Q, Q, attn_temperature_tuning=True, floor_scale=float("nan")),
     ValueError, "floor_scale must be finite"),
    (lambda: posenc.attention_backward(Q, Q, Q, Q, np.zeros((4, 2)), Q, kerple=np.zeros((3, 2))),
     ValueError, "kerple must have shape (2, Hq)"),
    (lambda: posenc.hf_layer_plan(42), TypeError, "path_or_dict"),
    (lambda: posenc.hf_layer_plan("/nonexistent/config.json"), OSError,
     "/nonexistent/config.json"),
    (lambda: posenc.RopeConfig.from_hf({"head_dim": 8}, layer_type="full_attention"), ValueError,
     "no per-layer-type RoPE"),
    (lambda: posenc.compare(np.zeros(3), np.zeros(4)), ValueError, "actual must have the shape"),
    (lambda: posenc.compare(np.zeros(3, np.int32), np.zeros(3, np.int32)), TypeError, "int32"),
]


@pytest.mark.parametrize("call,exc,fragment", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_naming_the_argument(call, exc, fragment):
    with pytest.raises(exc) as e:
        call()
    assert fragment in str(e.value)


def test_no_output_from_garbage():
    # a refused in-place call leaves its input untouched
    x = np.ones((2, 3, 8), dtype=np.float32)
    with pytest.raises(ValueError):
        posenc.apply_rope(x, np.array([0, -5]), cfg=CFG, inplace=True)
    assert np.all(x == 1)


def test_nonfinite_and_overflowing_inputs_are_warned_about_and_still_computed(cli, tmp_path):
    q = np.ones((4, 2, 8), np.float32)
    q[2, 1, 3] = np.nan
    with pytest.warns(RuntimeWarning, match=r"q holds 1 NaN or infinite value\(s\) \(the first at "
                      r"\(2, 1, 3\)\)"):
        out = posenc.attention(q, q, q)
    assert np.isnan(out).any()  # computed all the same: the engine propagates NaN
    q[2, 1, 3] = 1e30
    with pytest.warns(RuntimeWarning, match=r"beyond 1.84e\+19 in magnitude"):
        posenc.attention(q, np.ones_like(q), np.ones_like(q))
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "k.npy", np.ones_like(q))
    r = subprocess.run([str(cli), "attend", "--q", str(tmp_path / "q.npy"), "--k",
                        str(tmp_path / "k.npy"), "--v", str(tmp_path / "k.npy"), "--out",
                        str(tmp_path / "o.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ("posenc: warning: --q holds 1 value beyond 2^64 in magnitude (the first at (2, 1, 3))"
            in r.stderr)
    assert (tmp_path / "o.npy").exists()


def test_torch_attention_warns_of_nonfinite_inputs_too():
    torch = pytest.importorskip("torch")
    import posenc.torch as pt
    q = torch.ones((3, 2, 8))
    q[1, 0, 4] = float("inf")
    with pytest.warns(RuntimeWarning, match=r"q holds 1 NaN or infinite value\(s\) \(the first at "
                      r"\(1, 0, 4\)\)"):
        pt.attention(q, torch.ones((3, 2, 8)), torch.ones((3, 2, 8)))


# The owner of the format, run unchanged beside posenc: every malformed .npy header posenc refuses
# (tests/test_core.cpp, Npy.HeadersNumPyRefusesAreRefused) NumPy's own np.load refuses too, and
# posenc attend exits 2 on it naming the file.
@pytest.mark.parametrize("frm,to", [
    ("), }", "), "),
    ("'fortran_order': False", "'descr': '<f8',"),
    ("'fortran_order'", "'fortran\0order'"),
    ("'fortran_order': False", "'fortran_order': 0"),
    ("'descr'", "'dtype'"),
    ("(4, 2)", "[4, 2]"),
    ("(4, 2)", "(8)"),
    ("(4, 2)", "(4 2)"),
    ("'descr': '<f4', ", "'shape': (8,), "),
    (None, None),  # version 1.1
])
def test_npy_headers_numpy_refuses_are_refused(cli, tmp_path, frm, to):
    import io
    buf = io.BytesIO()
    np.save(buf, np.zeros((4, 2), np.float32))
    b = buf.getvalue()
    if frm is None:
        bad = b[:7] + b"\x01" + b[8:]
    else:
        h = b.decode("latin1")
        bad = h.replace(frm, to.ljust(len(frm)), 1).encode("latin1")
        assert len(bad) == len(b)
    with pytest.raises(Exception):
        np.load(io.BytesIO(bad))
    (tmp_path / "bad.npy").write_bytes(bad)
    good = tmp_path / "x.npy"
    np.save(good, np.zeros((4, 2, 8), np.float32))
    r = subprocess.run([str(cli), "attend", "--q", str(tmp_path / "bad.npy"), "--k", str(good),
                        "--v", str(good), "--out", str(tmp_path / "o.npy")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "bad.npy is not a valid .npy file" in r.stderr, r.stderr
    assert not (tmp_path / "o.npy").exists()
