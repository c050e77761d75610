"""posenc: positional encodings for transformer attention, from Python.

NumPy in, NumPy out; the C++ library does the work with the GIL released. ``posenc.torch``
(imported on first use; needs PyTorch) wraps the same kernels as autograd Functions.

Array rules (docs/python.md): float data is float32 or float64 (anything else is a TypeError
naming the argument); a C-contiguous array is used without a copy; a non-contiguous one is
copied for an out-of-place call and refused for ``inplace=True``; integer data (positions,
offsets, cu_seqlens) may be any integer dtype and is converted to int64. A bad shape, value or
config raises ValueError whose message names the argument, the value and what is allowed (the
CLI's messages); an unreadable file raises OSError.
"""

from __future__ import annotations

import importlib
import json
import os

import numpy as np

from . import _posenc
from ._posenc import (
    RopeConfig,
    alibi_bias,
    alibi_slopes,
    mrope_apply,
    num_threads,
    positions_mrope,
    rope_cos_sin,
    set_num_threads,
    sinusoidal_table,
    t5_buckets,
    t5_bias,
)
from .compare import CompareResult, compare

__all__ = [
    "RopeConfig",
    "rope_config",
    "rope_cos_sin",
    "apply_rope",
    "hf_layer_plan",
    "schemes",
    "mrope_apply",
    "positions_mrope",
    "sinusoidal_table",
    "LearnedTable",
    "alibi_slopes",
    "alibi_bias",
    "t5_buckets",
    "t5_bias",
    "attention",
    "attention_backward",
    "KVCache",
    "compare",
    "CompareResult",
    "set_num_threads",
    "num_threads",
]


def _config_json(path_or_dict):
    """(path, None) for a path to config.json, (None, JSON text) for a dict or a transformers
    PretrainedConfig (to_dict())."""
    if isinstance(path_or_dict, (str, os.PathLike)):
        return os.fspath(path_or_dict), None
    if isinstance(path_or_dict, dict):
        return None, json.dumps(path_or_dict)
    to_dict = getattr(path_or_dict, "to_dict", None)  # a transformers PretrainedConfig
    if callable(to_dict):
        return None, json.dumps(to_dict())
    raise TypeError(
        "path_or_dict must be a path to config.json, a dict or an object with to_dict(), got "
        f"{type(path_or_dict).__name__}"
    )


def _from_hf(path_or_dict, layer_type=None):
    """RopeConfig from a Hugging Face config.json (a path) or its dict (the same keys).

    layer_type: one layer type's RoPE ("sliding_attention", "full_attention", ... as
    hf_layer_plan lists them) for per-layer-type configs (Gemma 2/3/4: layer_types,
    sliding_window_pattern, nested rope_parameters, rope_local_base_freq, global_head_dim);
    None = the config's one RoPE configuration. An unknown layer type is a ValueError naming
    the allowed ones. Proportional RoPE (rope_type "proportional") and M-RoPE (mrope_section)
    are read from the same keys (cfg.rotated_pairs, cfg.mrope_section).
    """
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a str or None, got {type(layer_type).__name__}")
    path, text = _config_json(path_or_dict)
    if path is not None:
        return RopeConfig._from_file(path, layer_type or "")
    return RopeConfig._from_json(text, layer_type or "")


def schemes():
    """Every position scheme as the library declares it (`posenc schemes`): a list of dicts with
    name, title, citation, enters_at, learned, causal_only, float_kv_only, attention_level,
    params ([{name, shape, dtype, default, doc}], the keywords of posenc.attention) and
    conflicts_with (the schemes it may not be combined with in one attention call)."""
    return json.loads(_posenc._schemes_json())


def hf_layer_plan(path_or_dict):
    """Which layer of a Hugging Face config has which RoPE (`posenc rope layers`).

    Returns a dict: layer_types (one per layer, [] when the config states none), types (the
    distinct layer types, in order), source (the key they came from), layers ({type: [layer
    indices]}), rope_layers (one bool per layer, False = NoPE; [] = every layer has RoPE),
    nope_layers (indices), nope_source, attn_temperature_tuning, floor_scale and attn_scale
    (Llama 4's query temperature on the NoPE layers: posenc.attention's options of the same
    names), defaults (one note per key the config leaves out and its transformers class
    supplies, e.g. Gemma 3's rope_theta 1000000; each is also raised as a UserWarning). Each
    layer type's RoPE: RopeConfig.from_hf(path_or_dict, layer_type=t).
    """
    path, text = _config_json(path_or_dict)
    if path is not None:
        return _posenc._hf_layer_plan_file(path)
    return _posenc._hf_layer_plan(text)


def rope_config(
    *,
    head_dim,
    rotary_dim=None,
    theta=10000.0,
    scaling="default",
    factor=None,
    max_position_embeddings=None,
    original_max_position_embeddings=None,
    beta_fast=None,
    beta_slow=None,
    truncate=None,
    attention_factor=None,
    mscale=None,
    mscale_all_dim=None,
    short_factor=None,
    long_factor=None,
    low_freq_factor=None,
    high_freq_factor=None,
):
    """RopeConfig from explicit parameters (HF names; None = the HF default).

    Built as the config.json these parameters describe and parsed by the same code as
    ``RopeConfig.from_hf``, so the validation and its messages are the same.
    ``posenc.RopeConfig(head_dim=..., ...)`` calls this.
    """
    if not isinstance(head_dim, (int, np.integer)) or isinstance(head_dim, bool):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    cfg = {"head_dim": int(head_dim), "rope_theta": theta}
    if rotary_dim is not None:
        if head_dim <= 0:
            raise ValueError(f"head_dim must be >= 1, got {head_dim}")
        cfg["partial_rotary_factor"] = rotary_dim / head_dim
    if max_position_embeddings is not None:
        cfg["max_position_embeddings"] = max_position_embeddings
    if original_max_position_embeddings is not None:
        cfg["original_max_position_embeddings"] = original_max_position_embeddings
    scaling_keys = {
        "factor": factor,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
        "truncate": truncate,
        "attention_factor": attention_factor,
        "mscale": mscale,
        "mscale_all_dim": mscale_all_dim,
        "short_factor": None if short_factor is None else [float(v) for v in short_factor],
        "long_factor": None if long_factor is None else [float(v) for v in long_factor],
        "low_freq_factor": low_freq_factor,
        "high_freq_factor": high_freq_factor,
    }
    rs = {"rope_type": scaling}
    rs.update({k: v for k, v in scaling_keys.items() if v is not None})
    if scaling != "default" or len(rs) > 1:
        cfg["rope_scaling"] = rs
    return RopeConfig._from_json(json.dumps(cfg))


def _inv_freq(self, seq_len=None):
    """inv_freq (R/2,) float64 for a sequence length (dynamic and longrope depend on it)."""
    return self.frequencies(seq_len)[0]


RopeConfig.from_hf = staticmethod(_from_hf)
RopeConfig.inv_freq = _inv_freq
RopeConfig.attention_factor = property(lambda self: self.frequencies(None)[1])


def apply_rope(
    x,
    positions=None,
    *,
    cfg,
    layout="half",
    angle="exact",
    seqlen_offsets=0,
    cu_seqlens=None,
    inplace=False,
    inverse=False,
    seq_len=None,
    hf_inv_freq=None,
):
    """Rotate x by RoPE at its positions.

    x: (B, T, H, D), (total, H, D) with cu_seqlens (B + 1,), or (T, H, D); float32 or float64.
    positions: (B, T), (1, T) or (T,) for 4-D x, (total,) or (T,) for 3-D x, any integer
    dtype, >= 0; None = seqlen_offsets[b] + index within the sequence (an int or (B,)).
    layout: "half" (NeoX, HF rotate_half) or "interleaved" (GPT-J); angle: "exact", "f32"
    (a plain float32 angle; "compat_f32" is its former name), "hf_f32" (transformers' float32
    pipeline) or "ggml_f32" (ggml's). inverse=True applies the transpose a R(p)^T (the
    backward; undoes the forward when the attention factor is 1). seq_len (dynamic, longrope)
    defaults to max position + 1 as in HF's forward. hf_inv_freq (angle "hf_f32" only): the
    engine's own float32 inv_freq buffer (transformers' rotary_emb.inv_freq, (R/2,) float32)
    in place of posenc's model of it (cfg.hf_inv_freq(): torch's float32 pow rounded
    correctly; torch's CPU pow can differ in the last bit for a pair or two). Returns a new
    array, or x when inplace.
    """
    return _posenc.apply_rope(
        x,
        positions,
        cfg=cfg,
        layout=layout,
        angle=angle,
        seqlen_offsets=seqlen_offsets,
        cu_seqlens=cu_seqlens,
        inplace=inplace,
        inverse=inverse,
        seq_len=seq_len,
        hf_inv_freq=hf_inv_freq,
    )


class LearnedTable:
    """A learned absolute position table (rows, width) float32, in posenc's checksummed file
    format (see include/posenc/encodings/learned.hpp)."""

    def __init__(self, weights):
        w = np.asarray(weights)
        if w.dtype != np.float32:
            raise TypeError(f"weights must be float32 (the file format's dtype), got {w.dtype}")
        if w.ndim != 2:
            raise ValueError(f"weights must have shape (rows, width), got {w.shape}")
        self.weights = w

    @classmethod
    def load(cls, path):
        return cls(_posenc._learned_load(os.fspath(path)))

    def save(self, path):
        _posenc._learned_save(os.fspath(path), self.weights)

    def lookup(self, positions):
        p = np.asarray(positions)
        if p.dtype.kind not in "iu":
            raise TypeError(f"positions must hold integers, got {p.dtype}")
        rows = self.weights.shape[0]
        bad = (p < 0) | (p >= rows)
        if bad.any():
            v = int(p[bad].flat[0])
            raise ValueError(
                f"position {v} is outside the learned table: it has {rows} rows "
                f"(positions 0..{rows - 1}); no embedding exists there"
            )
        return self.weights[p]


def _attention_opts(
    causal,
    scale,
    rope,
    rope_layout,
    rope_angle,
    rope_seq_len,
    keys_rotated,
    alibi,
    t5_table,
    t5_max_distance,
    t5_bidirectional,
    shaw,
    q_positions,
    k_positions,
    key_padding,
    cu_seqlens,
    window,
    kv_dtype=None,
    *,
    research=None,
):
    if rope is not None and not isinstance(rope, RopeConfig):
        raise TypeError(f"rope must be a posenc.RopeConfig or None, got {type(rope).__name__}")
    opts = {
        "causal": bool(causal),
        "scale": None if scale is None else float(scale),
        "rope": rope,
        "rope_layout": rope_layout,
        "rope_angle": rope_angle,
        "rope_seq_len": rope_seq_len,
        "keys_rotated": bool(keys_rotated),
        "alibi": alibi,
        "t5_table": t5_table,
        "t5_max_distance": int(t5_max_distance),
        "t5_bidirectional": t5_bidirectional,
        "shaw": shaw,
        "q_positions": q_positions,
        "k_positions": k_positions,
        "key_padding": key_padding,
        "cu_seqlens": cu_seqlens,
        "window": window,
        "kv_dtype": kv_dtype,
    }
    opts.update(research or {})
    return opts


def _research_opts(kerple, kerple_kernel, fire, xpos, xpos_theta, xpos_gamma, xpos_scale_base,
                   xpos_center, cope, attn_temperature_tuning, floor_scale, attn_scale):
    """The research schemes' and the query temperature's options (docs/research_schemes.md)."""
    for name, val in (("xpos", xpos), ("attn_temperature_tuning", attn_temperature_tuning)):
        if not isinstance(val, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {type(val).__name__}")
    if not isinstance(kerple_kernel, str):
        raise TypeError(f"kerple_kernel must be \"log\" or \"power\", got "
                        f"{type(kerple_kernel).__name__}")
    return {
        "kerple": kerple,
        "kerple_kernel": kerple_kernel,
        "fire": fire,
        "xpos": bool(xpos),
        "xpos_theta": xpos_theta,
        "xpos_gamma": xpos_gamma,
        "xpos_scale_base": xpos_scale_base,
        "xpos_center": xpos_center,
        "cope": cope,
        "attn_temperature_tuning": bool(attn_temperature_tuning),
        "floor_scale": floor_scale,
        "attn_scale": attn_scale,
    }


def _declared_keywords(q, alibi, alibi_max_bias, alibi_convention, t5_table, t5_num_buckets,
                       shaw, shaw_keys, shaw_values, shaw_clip, fire, fire_hidden):
    """The declared keywords (posenc.schemes()) that the CLI spells as flags, folded into the
    forms the binding takes: alibi slopes from (alibi_max_bias, alibi_convention) by the
    library's alibi_slopes, the Shaw tables and clip as the (keys, values, clip) tuple, and
    t5_num_buckets / fire_hidden checked against their tables' shapes. Returns (alibi, shaw)."""
    default_alibi = alibi_max_bias == 8.0 and alibi_convention == "press"
    if not default_alibi:
        if alibi is not True:
            raise ValueError("alibi_max_bias and alibi_convention need alibi=True (slopes given "
                             "as an array are used as they are)")
        alibi = alibi_slopes(int(np.shape(q)[-2]), max_bias=float(alibi_max_bias),
                             convention=alibi_convention)
    if t5_num_buckets is not None:
        if t5_table is None:
            raise ValueError("t5_num_buckets needs t5_table")
        if int(np.shape(t5_table)[0]) != int(t5_num_buckets):
            raise ValueError(f"t5_table must have t5_num_buckets = {t5_num_buckets} rows, got "
                             f"shape {tuple(np.shape(t5_table))}")
    if shaw_keys is not None or shaw_values is not None or shaw_clip is not None:
        if shaw is not None:
            raise ValueError("give shaw = (keys, values, clip) or shaw_keys, shaw_values and "
                             "shaw_clip, not both")
        if shaw_keys is None or shaw_values is None or shaw_clip is None:
            raise ValueError("Shaw needs all of shaw_keys, shaw_values and shaw_clip")
        shaw = (shaw_keys, shaw_values, int(shaw_clip))
    if fire_hidden is not None:
        if fire is None:
            raise ValueError("fire_hidden needs fire")
        width = int(np.shape(fire)[-1])
        if width != 3 * int(fire_hidden) + 3:
            raise ValueError(f"fire must have shape (Hq, 3 fire_hidden + 3) = (Hq, "
                             f"{3 * int(fire_hidden) + 3}), got {tuple(np.shape(fire))}")
    return alibi, shaw


_ATTENTION_DOC = """
    q: (T, Hq, D) or (B, T, Hq, D); k, v: (S, Hkv, D) or (B, S, Hkv, D); one float dtype
    (float64 stays float64). Hq % Hkv == 0 (GQA/MQA read kv head h // (Hq // Hkv)).
    causal: bottom-right aligned (query i is token S - T + i). scale: default 1/sqrt(D).
    rope: a RopeConfig (rope_layout "half"/"interleaved", rope_angle "exact"/"f32"/"hf_f32"/"ggml_f32",
      rope_seq_len default S; keys_rotated: k is already rotated, as a KV cache stores it).
    alibi: False, True (slopes for Hq heads: alibi_max_bias 8, alibi_convention "press",
      "mpt" or "geometric") or slopes (Hq,).
    t5_table: (num_buckets, Hq); t5_num_buckets (checked against the table when given);
      t5_max_distance 128; t5_bidirectional default not causal.
    shaw_keys, shaw_values (2K+1, D) and shaw_clip K, or shaw = (keys, values, K).
    q_positions (T,) / k_positions (S,) (or (B, ...)): position ids, -1 = padding slot. With an
      M-RoPE rope config, (3, T) / (3, S) ids (or (B, 3, ...)) rotate q and k pair by pair
      (mrope_apply) and the masks and biases see the temporal row; 1-D ids are text tokens.
    key_padding: (S,) or (B, S) bool/uint8, True = real key. cu_seqlens: packed documents over
    the S keys (unbatched only). window: sliding window W (None or 0 = none).
    kv_dtype (attention only): k and v stored in half precision with float32 q, computed in
    float32: float16 arrays are read as float16 (kv_dtype None or "f16"); bfloat16 bits travel
    as uint16 arrays with kv_dtype="bf16" (NumPy has no bfloat16). The backward needs float k, v.
    Research schemes (docs/research_schemes.md), d = |qpos - kpos|:
    kerple: (2, Hq) rows a1, a2 (Chi et al. 2022); kerple_kernel "log": -r1 log(1 + r2 d),
      "power": -r1 d^r2, with r1 = softplus(a1), r2 = softplus(a2) (log) or 2 sigmoid(a2).
    fire: (Hq, 3m + 3), per head [w1 (m) | b1 (m) | w2 (m) | b2, a_c, a_L] (Li et al. 2023;
      fire_hidden m is checked against the width when given):
      bias = w2 . relu(w1 x + b1) + b2, x = log(c d + 1) / log(c max(L, qpos) + 1),
      c = softplus(a_c), L = softplus(a_L).
    xpos: True for xPos (Sun et al. 2022; half layout, rotary width D) with xpos_theta 10000,
      xpos_gamma 0.4, xpos_scale_base 512, xpos_center 0; excludes rope.
    cope: (npos, D) position embeddings of CoPE (Golovneva et al. 2024); needs causal=True, no
      other position scheme, float k and v.
    attn_temperature_tuning: Llama 4's query scale log(floor((qpos + 1) / floor_scale) + 1)
      * attn_scale + 1 (floor_scale 8192, attn_scale 0.1); excludes rope and xpos.
"""


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    scale=None,
    rope=None,
    rope_layout="half",
    rope_angle="exact",
    rope_seq_len=None,
    keys_rotated=False,
    alibi=False,
    alibi_max_bias=8.0,
    alibi_convention="press",
    t5_table=None,
    t5_num_buckets=None,
    t5_max_distance=128,
    t5_bidirectional=None,
    shaw=None,
    shaw_keys=None,
    shaw_values=None,
    shaw_clip=None,
    q_positions=None,
    k_positions=None,
    key_padding=None,
    cu_seqlens=None,
    window=None,
    return_lse=False,
    kv_dtype=None,
    kerple=None,
    kerple_kernel="log",
    fire=None,
    fire_hidden=None,
    xpos=False,
    xpos_theta=10000.0,
    xpos_gamma=0.4,
    xpos_scale_base=512.0,
    xpos_center=0.0,
    cope=None,
    attn_temperature_tuning=False,
    floor_scale=8192.0,
    attn_scale=0.1,
):
    alibi, shaw = _declared_keywords(q, alibi, alibi_max_bias, alibi_convention, t5_table,
                                     t5_num_buckets, shaw, shaw_keys, shaw_values, shaw_clip,
                                     fire, fire_hidden)
    research = _research_opts(kerple, kerple_kernel, fire, xpos, xpos_theta, xpos_gamma,
                              xpos_scale_base, xpos_center, cope, attn_temperature_tuning,
                              floor_scale, attn_scale)
    opts = _attention_opts(
        causal, scale, rope, rope_layout, rope_angle, rope_seq_len, keys_rotated, alibi,
        t5_table, t5_max_distance, t5_bidirectional, shaw, q_positions, k_positions,
        key_padding, cu_seqlens, window, kv_dtype, research=research,
    )
    return _posenc._attention_forward(q, k, v, opts, bool(return_lse))


attention.__doc__ = (
    "Multi-head attention with position; returns out (q's shape), or (out, lse) with\n"
    "    return_lse (lse: q's shape without D, natural log, -inf for a row that sees no key).\n"
    + _ATTENTION_DOC
)


def attention_backward(
    q,
    k,
    v,
    out,
    lse,
    dout,
    *,
    causal=False,
    scale=None,
    rope=None,
    rope_layout="half",
    rope_angle="exact",
    rope_seq_len=None,
    keys_rotated=False,
    alibi=False,
    alibi_max_bias=8.0,
    alibi_convention="press",
    t5_table=None,
    t5_num_buckets=None,
    t5_max_distance=128,
    t5_bidirectional=None,
    shaw=None,
    shaw_keys=None,
    shaw_values=None,
    shaw_clip=None,
    q_positions=None,
    k_positions=None,
    key_padding=None,
    cu_seqlens=None,
    window=None,
    param_grads=True,
    kerple=None,
    kerple_kernel="log",
    fire=None,
    fire_hidden=None,
    xpos=False,
    xpos_theta=10000.0,
    xpos_gamma=0.4,
    xpos_scale_base=512.0,
    xpos_center=0.0,
    cope=None,
    attn_temperature_tuning=False,
    floor_scale=8192.0,
    attn_scale=0.1,
):
    alibi, shaw = _declared_keywords(q, alibi, alibi_max_bias, alibi_convention, t5_table,
                                     t5_num_buckets, shaw, shaw_keys, shaw_values, shaw_clip,
                                     fire, fire_hidden)
    research = _research_opts(kerple, kerple_kernel, fire, xpos, xpos_theta, xpos_gamma,
                              xpos_scale_base, xpos_center, cope, attn_temperature_tuning,
                              floor_scale, attn_scale)
    opts = _attention_opts(
        causal, scale, rope, rope_layout, rope_angle, rope_seq_len, keys_rotated, alibi,
        t5_table, t5_max_distance, t5_bidirectional, shaw, q_positions, k_positions,
        key_padding, cu_seqlens, window, research=research,
    )
    return _posenc._attention_backward(q, k, v, out, lse, dout, opts, bool(param_grads))


attention_backward.__doc__ = (
    "Gradients through attention (FlashAttention-2's backward) given out and lse of the\n"
    "    forward with the same arguments and dout = dL/dout. Returns a dict with dq, dk, dv\n"
    "    and, with param_grads, the scheme parameters' gradients: dalibi (Hq,) float64,\n"
    "    dt5_table, dshaw_keys, dshaw_values, dkerple (2, Hq), dfire (Hq, 3m + 3), dcope\n"
    "    (npos, D) in q's dtype (summed over the batch).\n" + _ATTENTION_DOC
)


class KVCache:
    """A growing cache of keys and values for decoding, keys stored rotated (as engines do).

    cache = posenc.KVCache(n_kv_heads, head_dim, rope=cfg)
    cache.append(k, v)            # k, v: (T, Hkv, D); positions continue from the cache
    out = cache.attend(q)         # q: (T, Hq, D), the queries of the tokens appended last

    Keys are rotated once when appended (at their positions, with rope_seq_len if given,
    else max position + 1); attend rotates only q (attention's keys_rotated=True), with the
    same rope_seq_len (else the cache length). For "dynamic" and "longrope", whose frequencies
    depend on the length, give rope_seq_len so that keys and queries use the same ones.
    With an M-RoPE config, append takes (3, T) ids (or (T,) for text tokens; default: text
    after the largest id so far) and keys are rotated by mrope_apply. Schemes without a cached
    rotation (xpos, kerple, fire, cope, attn_temperature_tuning) are options of attend, with
    rope=None: the cache then stores the keys as given.
    """

    def __init__(self, n_kv_heads, head_dim, *, capacity=256, dtype=np.float32, rope=None,
                 rope_layout="half", rope_angle="exact", rope_seq_len=None):
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        for name, val in (("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                          ("capacity", capacity)):
            if not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{name} must be an int >= 1, got {val!r}")
        if rope is not None and not isinstance(rope, RopeConfig):
            raise TypeError(f"rope must be a posenc.RopeConfig or None, got {type(rope).__name__}")
        self.rope, self.rope_layout, self.rope_angle = rope, rope_layout, rope_angle
        self.rope_seq_len = rope_seq_len
        # M-RoPE: every token has (temporal, height, width) ids; keys are rotated by mrope_apply
        self._mrope = rope is not None and rope.mrope_section is not None
        self._pos3 = np.empty((3, capacity), np.int64) if self._mrope else None
        self._k = np.empty((capacity, n_kv_heads, head_dim), dtype)
        self._v = np.empty((capacity, n_kv_heads, head_dim), dtype)
        self._pos = np.empty(capacity, np.int64)
        self._n = 0
        self._last = 0  # tokens appended by the last append

    def __len__(self):
        return self._n

    @property
    def keys(self):
        """(n, Hkv, D) keys as stored (rotated)."""
        return self._k[: self._n]

    @property
    def values(self):
        return self._v[: self._n]

    @property
    def positions(self):
        """(n,) position ids; with an M-RoPE config the temporal row of positions3."""
        return self._pos[: self._n]

    @property
    def positions3(self):
        """(3, n) M-RoPE ids (temporal, height, width); None without an M-RoPE config."""
        return None if self._pos3 is None else self._pos3[:, : self._n]

    def append(self, k, v, positions=None):
        k, v = np.asarray(k), np.asarray(v)
        shape = self._k.shape[1:]
        if k.ndim != 3 or k.shape[1:] != shape:
            raise ValueError(f"k must have shape (T, Hkv, D) = (T, {shape[0]}, {shape[1]}), "
                             f"got {k.shape}")
        if v.shape != k.shape:
            raise ValueError(f"v must have the shape of k {k.shape}, got {v.shape}")
        for a, name in ((k, "k"), (v, "v")):
            if a.dtype != self._k.dtype:
                raise TypeError(f"{name} must be {self._k.dtype} (the cache's dtype), got {a.dtype}")
        T = k.shape[0]
        if positions is None:
            if self._mrope:  # one past the largest id so far (transformers' rope_deltas at decode)
                start = int(self._pos3[:, : self._n].max()) + 1 if self._n else 0
            else:
                start = int(self._pos[self._n - 1]) + 1 if self._n else 0
            positions = np.arange(start, start + T, dtype=np.int64)
        else:
            positions = np.asarray(positions)
            if positions.dtype.kind not in "iu":
                raise TypeError(f"positions must hold integers, got {positions.dtype}")
            shapes = [(T,), (3, T)] if self._mrope else [(T,)]
            if positions.shape not in shapes:
                want = " or ".join(f"({', '.join(str(d) for d in sh)}{',' if len(sh) == 1 else ''})"
                                   for sh in shapes)
                raise ValueError(f"positions must have shape {want}, got {positions.shape}")
        pos3 = None
        if self._mrope:
            pos3 = positions if positions.ndim == 2 else np.tile(positions, (3, 1))
            positions = pos3[0]
        if self._n + T > self._k.shape[0]:
            cap = max(2 * self._k.shape[0], self._n + T)
            for name in ("_k", "_v", "_pos"):
                old = getattr(self, name)
                new = np.empty((cap,) + old.shape[1:], old.dtype)
                new[: self._n] = old[: self._n]
                setattr(self, name, new)
            if self._mrope:
                new = np.empty((3, cap), np.int64)
                new[:, : self._n] = self._pos3[:, : self._n]
                self._pos3 = new
        if self._mrope:
            k = mrope_apply(k, pos3, cfg=self.rope, layout=self.rope_layout,
                            angle=self.rope_angle, seq_len=self.rope_seq_len)
            self._pos3[:, self._n : self._n + T] = pos3
        elif self.rope is not None:
            k = apply_rope(k, positions, cfg=self.rope, layout=self.rope_layout,
                           angle=self.rope_angle, seq_len=self.rope_seq_len)
        self._k[self._n : self._n + T] = k
        self._v[self._n : self._n + T] = v
        self._pos[self._n : self._n + T] = positions
        self._n += T
        self._last = T

    def attend(self, q, *, q_positions=None, causal=True, **kwargs):
        """Attention of q (T, Hq, D) over the cache; q_positions default to the positions of
        the last T tokens (the queries of the tokens appended last). Other arguments as
        posenc.attention (alibi, t5_table, window, ...)."""
        q = np.asarray(q)
        if q.ndim != 3:
            raise ValueError(f"q must have shape (T, Hq, D), got {q.shape}")
        T = q.shape[0]
        kpos = self.positions3 if self._mrope else self.positions
        if q_positions is None:
            if T > self._n:
                raise ValueError(f"q has {T} tokens but the cache holds {self._n}: give q_positions")
            q_positions = kpos[..., self._n - T : self._n]
        return attention(
            q, self.keys, self.values, causal=causal, rope=self.rope, rope_layout=self.rope_layout,
            rope_angle=self.rope_angle, rope_seq_len=self.rope_seq_len, keys_rotated=True,
            q_positions=q_positions, k_positions=kpos, **kwargs,
        )


def __getattr__(name):
    # posenc.torch is imported on first use, so `import posenc` works without PyTorch.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'posenc' has no attribute {name!r}")
