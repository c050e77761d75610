"""The scheme declarations against the Python surface: every parameter an attention-level
scheme declares is a keyword of posenc.attention, attention_backward and posenc.torch.attention,
with the declared default; the combination rule speaks through the binding."""

import inspect

import numpy as np
import pytest

import posenc
import posenc.torch as pt

DECLS = posenc.schemes()
# A scheme whose switch is a RoPE config (RoPE, M-RoPE) is reached through the config's keywords
# (ROPE_CONFIG); its declared parameters are the engine's arguments.
ATTENTION_PARAMS = [(d["name"], p) for d in DECLS if d["attention_level"]
                    and d["params"][0]["dtype"] != "RopeConfig" for p in d["params"]]
ROPE_CONFIG = ["rope", "rope_layout", "rope_angle", "rope_seq_len", "keys_rotated"]


@pytest.mark.parametrize("fn", [posenc.attention, posenc.attention_backward, pt.attention],
                         ids=["attention", "attention_backward", "torch.attention"])
def test_every_declared_parameter_is_a_keyword(fn):
    sig = inspect.signature(fn)
    missing = [f"{s}.{p['name']}" for s, p in ATTENTION_PARAMS if p["name"] not in sig.parameters]
    missing += [k for k in ROPE_CONFIG if k not in sig.parameters]
    assert not missing, f"{fn.__qualname__} lacks the declared keywords {missing}"
    for s, p in ATTENTION_PARAMS:
        default = sig.parameters[p["name"]].default
        # the declared default as the keyword's text ("None", "False", "half", "0.4", ...);
        # "S" and "not causal" are computed from the call (the keyword's default is None)
        if p["default"] in ("S", "not causal"):
            assert default is None, f"{s}.{p['name']}"
        elif isinstance(default, str):
            assert default == p["default"], f"{s}.{p['name']}: {default!r}"
        else:
            assert repr(default) in (p["default"], p["default"] + ".0") or \
                float(default) == float(p["default"]), f"{s}.{p['name']}: {default!r}"


def test_the_rule_in_the_binding():
    q = np.zeros((4, 2, 8))
    cfg = posenc.RopeConfig(head_dim=8)
    with pytest.raises(ValueError, match="rope cannot be combined with xpos"):
        posenc.attention(q, q, q, rope=cfg, xpos=True)
    with pytest.raises(ValueError, match="cope cannot be combined with alibi"):
        posenc.attention(q, q, q, causal=True, cope=np.zeros((3, 8)), alibi=True)
    conflicts = {d["name"]: set(d["conflicts_with"]) for d in DECLS}
    assert "mrope" in conflicts["cope"] and "cope" in conflicts["mrope"]
    assert "alibi" not in conflicts["rope"]


def test_declared_keywords_act_as_their_older_forms():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((5, 3, 8)) for _ in range(3))
    slopes = posenc.alibi_slopes(3, max_bias=4.0, convention="mpt")
    a = posenc.attention(q, k, v, causal=True, alibi=True, alibi_max_bias=4.0,
                         alibi_convention="mpt")
    assert np.array_equal(a, posenc.attention(q, k, v, causal=True, alibi=slopes))
    ak, av = rng.standard_normal((5, 8)), rng.standard_normal((5, 8))
    b = posenc.attention(q, k, v, causal=True, shaw_keys=ak, shaw_values=av, shaw_clip=2)
    # Shaw's keywords are its declaration's: no other spelling.
    with pytest.raises(TypeError, match="shaw"):
        posenc.attention(q, k, v, causal=True, shaw=(ak, av, 2))
    t5 = rng.standard_normal((16, 3))
    with pytest.raises(ValueError, match="t5_table must have t5_num_buckets = 8 rows"):
        posenc.attention(q, k, v, t5_table=t5, t5_num_buckets=8)
    with pytest.raises(ValueError, match=r"tensor parameter shaw_values \(C, D\) is required"):
        posenc.attention(q, k, v, shaw_keys=ak)
    # shaw_clip is the tables' own (checked when given).
    assert np.array_equal(b, posenc.attention(q, k, v, causal=True, shaw_keys=ak, shaw_values=av))
    with pytest.raises(ValueError, match="shaw_clip = 1 does not match the tables' 5 rows"):
        posenc.attention(q, k, v, shaw_keys=ak, shaw_values=av, shaw_clip=1)
    with pytest.raises(ValueError, match="alibi_convention needs alibi=True"):
        posenc.attention(q, k, v, alibi_convention="geometric")
    with pytest.raises(ValueError, match=r"fire_hidden = 3 does not match fire.s width 9"):
        posenc.attention(q, k, v, fire=np.zeros((3, 9)), fire_hidden=3)
