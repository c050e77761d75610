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
    AxialRope,
    RopeConfig,
    axial_apply,
    axial_grid_ids,
    axial_rope_2d,
    axial_rope_nd,
    alibi_bias,
    alibi_slopes,
    bf16_products_native,
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
    "hf_dca",
    "schemes",
    "mrope_apply",
    "AxialRope",
    "axial_rope_2d",
    "axial_rope_nd",
    "axial_grid_ids",
    "axial_apply",
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
    "bf16_products_native",
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


def hf_dca(path_or_dict):
    """Dual Chunk Attention as a Hugging Face config states it (Qwen2.5-1M's
    dual_chunk_attention_config: chunk_size, local_size, original_max_position_embeddings), as
    posenc.attention's keywords: {"dca": True, "dca_chunk_size": ..., "dca_local_size": ...,
    "dca_original_max_position_embeddings": ...}, or {} when the config has none. vLLM runs such
    a model with DCA; transformers ignores the key. Pass the dict on:
    posenc.attention(q, k, v, rope=cfg, causal=True, **posenc.hf_dca(path)). A config without
    original_max_position_embeddings gives 0 (no length scaling) with a UserWarning."""
    import warnings as _warnings
    path, text = _config_json(path_or_dict)
    out, notes = _posenc._hf_dca_file(path) if path is not None else _posenc._hf_dca(text)
    for n in notes:
        _warnings.warn(n, UserWarning, stacklevel=2)
    return dict(out)


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
RopeConfig.attention_factor = property(
    lambda self: self.frequencies(None)[1],
    doc="The factor cos and sin are multiplied by (yarn, longrope; 1 for most types).")


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
        """The table stored at path; OSError for an unreadable or corrupt file (checksum,
        header, size)."""
        return cls(_posenc._learned_load(os.fspath(path)))

    def save(self, path):
        """Writes the table to path in the checksummed format (OSError when it cannot)."""
        _posenc._learned_save(os.fspath(path), self.weights)

    def lookup(self, positions):
        """The rows of the table at positions (any integer shape): (*positions.shape, width)
        float32, by the library's learned_lookup. ValueError for a position outside the table
        (no embedding exists there: reported, never clamped)."""
        p = np.asarray(positions)
        if p.dtype.kind not in "iu":
            raise TypeError(f"positions must hold integers, got {p.dtype}")
        return _posenc._learned_lookup(self.weights, p)


def _attention_opts(
    causal,
    scale,
    rope,
    rope_layout,
    rope_angle,
    rope_seq_len,
    keys_rotated,
    q_positions,
    k_positions,
    key_padding,
    cu_seqlens,
    window,
    kv_dtype=None,
):
    if rope is not None and not isinstance(rope, (RopeConfig, AxialRope)):
        raise TypeError("rope must be a posenc.RopeConfig, a posenc.AxialRope or None, got "
                        f"{type(rope).__name__}")
    opts = {
        "causal": bool(causal),
        "scale": None if scale is None else float(scale),
        "rope": rope,
        "rope_layout": rope_layout,
        "rope_angle": rope_angle,
        "rope_seq_len": rope_seq_len,
        "keys_rotated": bool(keys_rotated),
        "q_positions": q_positions,
        "k_positions": k_positions,
        "key_padding": key_padding,
        "cu_seqlens": cu_seqlens,
        "window": window,
        "kv_dtype": kv_dtype,
    }
    return opts


# The schemes reached by name (posenc.schemes(): "named"), whose keywords come from their
# declarations alone: a switch named as the scheme (bool, a tensor that turns it on when given,
# or either: "bool | tensor64", True for the values the scheme derives, or the tensor), numeric
# parameters and tensor parameters. A "tensor64" travels in float64 whatever q's dtype.
_TENSOR = ("tensor", "tensor64", "bool | tensor64")
_NAMED = [d for d in json.loads(_posenc._schemes_json()) if d["named"]]


def _named_default(p, switch=False):
    if p["dtype"] == "bool | tensor64":
        return False
    if p["dtype"] in _TENSOR:
        return None
    if p["dtype"] == "str":
        return p["default"]
    if p["dtype"] == "bool":  # a switch is off; a parameter: True, False or None ("not causal")
        return False if switch else {"True": True, "False": False}.get(p["default"])
    return int(p["default"]) if p["dtype"] == "int" else float(p["default"])


def _named_opts(kwargs, fn, decls=None):
    """The keywords of the schemes reached by name in kwargs, as the binding takes them:
    [(scheme, {param: value}, {tensor param: array})] for every scheme switched on. TypeError
    for any other keyword (naming the allowed ones) or a value of the wrong type; ValueError for a
    parameter given without its switch."""
    decls = _NAMED if decls is None else decls
    allowed = [p["name"] for d in decls for p in d["params"]]
    for key in kwargs:
        if key not in allowed:
            raise TypeError(f"{fn}() got an unexpected keyword argument '{key}' (the keywords of "
                            f"the schemes reached by name are {', '.join(allowed) or 'none'})")
    out = []
    for d in decls:
        first, params = d["params"][0], d["params"][1:]
        switch = first["name"]
        tensors = {}
        x = kwargs.get(switch)
        if first["dtype"] == "bool | tensor64" and not isinstance(x, (bool, np.bool_)):
            on = x is not None  # the values themselves
            if on:
                tensors[switch] = x
        elif first["dtype"] == "bool | tensor64":
            on = bool(x)
        elif first["dtype"] in _TENSOR:
            on = x is not None
            if on:
                tensors[switch] = x
        else:
            on = kwargs.get(switch, False)
            if not isinstance(on, (bool, np.bool_)):
                raise TypeError(f"{switch} must be a bool, got {type(on).__name__}")
        given = {}
        for p in params:
            if kwargs.get(p["name"]) is None:
                continue
            x = kwargs[p["name"]]
            if p["dtype"] in _TENSOR:
                tensors[p["name"]] = x
                continue
            if p["dtype"] == "str":  # a choice: passed on as its index among the choices
                if not isinstance(x, str):
                    raise TypeError(f"{p['name']} must be a str, one of "
                                    f"{', '.join(p['choices'])}, got {type(x).__name__}")
                if x not in p["choices"]:
                    raise ValueError(f"{p['name']} must be {' or '.join(p['choices'])}, "
                                     f"got '{x}'")
                if x != p["default"]:
                    given[p["name"]] = float(p["choices"].index(x))
                continue
            if p["dtype"] == "bool":
                if not isinstance(x, (bool, np.bool_)):
                    raise TypeError(f"{p['name']} must be a bool, got {type(x).__name__}")
                given[p["name"]] = float(bool(x))
                continue
            if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer,
                                                                     np.floating)):
                kind = "an int" if p["dtype"] == "int" else "a float"
                raise TypeError(f"{p['name']} must be {kind}, got {type(x).__name__}")
            given[p["name"]] = float(x)
        if on:
            out.append((d["name"], given, tensors))
        elif given or len(tensors) > 0:
            extra = list(given) + [t for t in tensors if t != switch]
            how = f"{switch}=..." if first["dtype"] in ("tensor", "tensor64") else f"{switch}=True"
            raise ValueError(f"{', '.join(extra)} need{'s' if len(extra) == 1 else ''} {how}")
    return out


def _named_doc():
    lines = []
    for d in _NAMED:
        first = d["params"][0]
        if first["dtype"] == "bool | tensor64":
            lines.append(f"    {first['name']}: True for {d['title']} ({d['citation']}): "
                         f"{first['doc']}, an array {first['shape']} (float64)"
                         + (f"; its gradient d{first['name']} (float64)" if d["learned"] else "")
                         + ".")
        elif first["dtype"] in _TENSOR:
            per_token = first["shape"].startswith(("(S", "(T"))
            lines.append(f"    {first['name']}: {d['title']} ({d['citation']}): {first['doc']}, "
                         f"an array {first['shape']}"
                         + (" (a row per token: (B, ...) with batched q)" if per_token else "")
                         + (f"; its gradient d{first['name']}" if d["learned"] else "") + ".")
        else:
            lines.append(f"    {d['name']}: True for {d['title']} ({d['citation']}), "
                         f"{first['doc']}.")
        for p in d["params"][1:]:
            if p["dtype"] in _TENSOR:  # a second table (Shaw's a^V): its shape and gradient
                lines.append(f"      {p['name']}: {p['doc']}, an array {p['shape']}"
                             + (f"; its gradient d{p['name']}" if d["learned"] else "") + ".")
                continue
            kind = " or ".join(f'"{c}"' for c in p["choices"]) if "choices" in p else p["dtype"]
            lines.append(f"      {p['name']} ({kind}, default {p['default']}): {p['doc']}.")
    return "\n".join(lines) + ("\n" if lines else "")


def _with_named_keywords(fn, doc, decls=None):
    """fn(..., **named) with the named schemes' keywords (of decls: all by default) in its
    signature (inspect, help(), editors) and, given doc, their lines in its docstring."""
    import inspect
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind != p.VAR_KEYWORD]
    params += [inspect.Parameter(p["name"], inspect.Parameter.KEYWORD_ONLY,
                                 default=_named_default(p, i == 0))
               for d in (_NAMED if decls is None else decls) for i, p in enumerate(d["params"])]
    fn.__signature__ = sig.replace(parameters=params)
    if doc is not None:
        fn.__doc__ = doc + _named_doc()
    return fn


# The q/k transforms reached by name (hook 1), whose keywords a KVCache takes: it stores keys
# transformed.
_TRANSFORMS = [d for d in _NAMED if d["enters_at"].startswith("q/k transform")]


_ATTENTION_DOC = """
    q: (T, Hq, D) or (B, T, Hq, D); k, v: (S, Hkv, D) or (B, S, Hkv, D); one float dtype
    (float64 stays float64). Hq % Hkv == 0 (GQA/MQA read kv head h // (Hq // Hkv)).
    causal: bottom-right aligned (query i is token S - T + i). scale: default 1/sqrt(D).
    rope: a RopeConfig (rope_layout "half"/"interleaved", rope_angle "exact"/"f32"/"hf_f32"/"ggml_f32",
      rope_seq_len default S; keys_rotated: k is already rotated, as a KV cache stores it).
    q_positions (T,) / k_positions (S,) (or (B, ...)): position ids, -1 = padding slot. With an
      M-RoPE rope config, (3, T) / (3, S) ids (or (B, 3, ...)) rotate q and k pair by pair
      (mrope_apply) and the masks and biases see the temporal row; 1-D ids are text tokens.
    key_padding: (S,) or (B, S) bool/uint8, True = real key. cu_seqlens: packed documents over
    the S keys (unbatched only). window: sliding window W (None or 0 = none).
    kv_dtype (attention only): k and v stored in half precision with float32 q, computed in
    float32: float16 arrays are read as float16 (kv_dtype None or "f16"); bfloat16 bits travel
    as uint16 arrays with kv_dtype="bf16" (NumPy has no bfloat16). q may be stored in k's dtype
    too (read in place; out is float32). The backward needs float q, k, v.
    products (attention only): "f32" (default) or "bf16": the two block products take bfloat16
    operands (q' and k' after RoPE, the probabilities and v rounded to bfloat16) with float32
    accumulation, as bfloat16 models run; vdpbf16ps where the CPU has it
    (posenc.bf16_products_native()), float32 products on the exact values elsewhere. Float32
    or 16-bit inputs, forward only; the error bound is in attention_cases.hpp.
    sinks: (Hq,) attention-sink logits, gpt-oss's convention (transformers' s_aux): each row's
      softmax gets one more score sink_h with no value, so its weights sum to less than 1; lse
      includes it; a row that sees no key gives out 0 and lse sink_h. Not with a scheme on a
      path of its own.
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
    q_positions=None,
    k_positions=None,
    key_padding=None,
    cu_seqlens=None,
    window=None,
    return_lse=False,
    kv_dtype=None,
    products="f32",
    sinks=None,
    **named,
):
    opts = _attention_opts(
        causal, scale, rope, rope_layout, rope_angle, rope_seq_len, keys_rotated,
        q_positions, k_positions, key_padding, cu_seqlens, window, kv_dtype,
    )
    opts["named"] = _named_opts(named, "attention")
    opts["products"] = products
    opts["sinks"] = sinks
    for name, x in (("q", q), ("k", k), ("v", v)):
        _warn_nonfinite(name, x)
    return _posenc._attention_forward(q, k, v, opts, bool(return_lse))


def _warn_nonfinite(name, x):
    """A RuntimeWarning when float32 / float64 / float16 x holds NaN or infinite values, or values
    whose square overflows its dtype (|x| > 2^64 in float32 and float16, which compute in float32;
    2^512 in float64): attention over them means nothing, though it is still computed (engines
    propagate NaN). Other inputs (bfloat16 bits, a KV cache) are not looked at."""
    import warnings

    a = np.asarray(x) if not hasattr(x, "dtype") else x
    if not isinstance(a, np.ndarray) or a.dtype not in (np.float16, np.float32, np.float64):
        return
    finite = np.isfinite(a)
    bad = ~finite
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        warnings.warn(f"{name} holds {int(bad.sum())} NaN or infinite value(s) (the first at "
                      f"{first}): the output of attention over them means nothing",
                      RuntimeWarning, stacklevel=3)
    big = 2.0 ** 512 if a.dtype == np.float64 else 2.0 ** 64
    huge = finite & (np.abs(a) > big)  # in a's dtype: no float64 copy of q, k, v per call
    if huge.any():
        first = tuple(int(i) for i in np.argwhere(huge)[0])
        warnings.warn(f"{name} holds {int(huge.sum())} value(s) beyond {big:.3g} in magnitude (the "
                      f"first at {first}): the product of two overflows, so scores are infinite",
                      RuntimeWarning, stacklevel=3)


_with_named_keywords(attention, (
    "Multi-head attention with position; returns out (q's shape), or (out, lse) with\n"
    "    return_lse (lse: q's shape without D, natural log, -inf for a row that sees no key).\n"
    + _ATTENTION_DOC
))


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
    q_positions=None,
    k_positions=None,
    key_padding=None,
    cu_seqlens=None,
    window=None,
    param_grads=True,
    sinks=None,
    **named,
):
    opts = _attention_opts(
        causal, scale, rope, rope_layout, rope_angle, rope_seq_len, keys_rotated,
        q_positions, k_positions, key_padding, cu_seqlens, window,
    )
    opts["named"] = _named_opts(named, "attention_backward")
    opts["sinks"] = sinks
    return _posenc._attention_backward(q, k, v, out, lse, dout, opts, bool(param_grads))


_with_named_keywords(attention_backward, (
    "Gradients through attention (FlashAttention-2's backward) given out and lse of the\n"
    "    forward with the same arguments and dout = dL/dout. Returns a dict with dq, dk, dv\n"
    "    and, with param_grads, the scheme parameters' gradients: d<tensor> of the schemes\n"
    "    reached by name (their keywords below; a float64 tensor's in float64), dsinks\n"
    "    (Hq,) (with sinks), in q's dtype (a shared one summed over the batch).\n" + _ATTENTION_DOC
))


class KVCache:
    """The library's KV cache (posenc/attention/kv_cache.hpp) for decoding: keys stored
    transformed (RoPE, M-RoPE or a q/k transform reached by name at their positions, once, as
    engines store them), values as given.

    cache = posenc.KVCache(n_kv_heads, head_dim, capacity=4096, rope=cfg)
    cache.append(k, v)            # k, v: (T, Hkv, D); positions continue after the cache's
    out = cache.attend(q)         # q: (T, Hq, D), the queries of the tokens appended last

    capacity: the tokens the cache holds (default 4096), allocated up front (the library's
      cache does not grow: an append past capacity raises ValueError and changes nothing;
      clear() empties it).
    dtype: float32 or float64, the dtype of k, v and q and of the computation.
    kv_dtype: None (keys and values stored in dtype), "f16" or "bf16" (float32 caches only):
      each key is transformed in float32 and then rounded, each value rounded; half the bytes,
      attention computes in float32 on the widened values. keys / values return the stored
      words: float16 arrays, or bfloat16 bits as uint16 (posenc.attention's kv_dtype="bf16").
    Storage is head-major (each kv head's keys and values two contiguous runs); when head_dim
      is a multiple of 8 the keys are kept in 8-key blocks (keys_blocked; stored_keys() and
      key_index() show the layout). Rows or blocks, attend returns the same bits.
    rope: a RopeConfig (rope_layout, rope_angle as posenc.attention). Its frequencies are fixed
      for the cache's life at rope_seq_len (default: capacity, as posenc.attention's default S
      for a call over `capacity` keys); keys are not re-rotated later (dynamic NTK, LongRoPE).
      With an M-RoPE config (mrope_section) every token has (temporal, height, width) ids:
      append takes (3, T) ids or (T,) text ids ((p, p, p)); the next position is one past the
      largest id of any row (Qwen2-VL's rule); the engine's M-RoPE hook rotates the keys.
    The keywords of a q/k transform reached by name (posenc.schemes(): enters at "q/k
      transform", with their parameters, as posenc.attention takes them): keys stored
      after that transform; excludes rope.
    start_position: the position of the first token (default 0).
    attend takes posenc.attention's keywords for the other schemes (the
    keywords of the schemes reached by name (the query temperature's too), window, scale,
    ...); the q/k transform is the cache's (one given to attend must equal the cache's).

    shift_mode: how remove / shift / divide move the stored keys (the engines' position edits,
      llama.cpp's llama_memory_seq_rm / seq_add / seq_div): "rerotate" (default) turns each
      stored key by the change and rounds it again, as llama.cpp's K-shift does (keys drift
      over many shifts: posenc rope shift-drift); "exact" also keeps every key as appended and
      transforms it afresh at its new position, so any edits leave the keys an append at the
      final positions would store, bit for bit (twice the key memory).

    Differences from the NumPy cache of earlier versions, following the library: the capacity
    is fixed; the next position after explicit ids is one past the largest id so far (not the
    last one); a q/k transform is a property of the cache, not an option of attend.
    """

    def __init__(self, n_kv_heads, head_dim, *, capacity=4096, dtype=np.float32, kv_dtype=None,
                 rope=None, rope_layout="half", rope_angle="exact", rope_seq_len=None,
                 start_position=0, shift_mode="rerotate", **named):
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        for name, val in (("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                          ("capacity", capacity), ("start_position", start_position)):
            if not isinstance(val, (int, np.integer)) or isinstance(val, bool):
                raise TypeError(f"{name} must be an int, got {type(val).__name__}")
        if rope is not None and not isinstance(rope, RopeConfig):
            raise TypeError(f"rope must be a posenc.RopeConfig or None, got {type(rope).__name__}")
        transforms = _named_opts(named, "KVCache", _TRANSFORMS)
        if not isinstance(shift_mode, str):
            raise TypeError(f"shift_mode must be \"rerotate\" or \"exact\", got "
                            f"{type(shift_mode).__name__}")
        self._c = _posenc._KVCache(int(n_kv_heads), int(head_dim), int(capacity), dtype.name,
                                   kv_dtype, rope, rope_layout, rope_angle, rope_seq_len,
                                   int(start_position), transforms, shift_mode)
        self.rope = rope

    def __len__(self):
        return self._c.size

    capacity = property(lambda self: self._c.capacity, doc="Tokens the cache holds at most.")
    n_kv_heads = property(lambda self: self._c.kv_heads, doc="Hkv, the key/value heads.")
    head_dim = property(lambda self: self._c.head_dim, doc="D, the head dim.")
    dtype = property(lambda self: self._c.dtype, doc="dtype of k, v, q and the computation.")
    kv_dtype = property(lambda self: self._c.kv_dtype,
                        doc='Storage of keys and values: "f32" (in dtype), "f16" or "bf16".')
    keys_blocked = property(lambda self: self._c.keys_blocked,
                            doc="Keys in 8-key blocks (head_dim a multiple of 8).")
    head_capacity = property(lambda self: self._c.head_capacity,
                             doc="Slots per kv head: capacity, rounded up to whole 8-key "
                                 "blocks when keys_blocked.")
    nbytes = property(lambda self: self._c.nbytes,
                      doc="Bytes of key and value storage (allocated up front).")
    next_position = property(lambda self: self._c.next_position,
                             doc="Position of the next appended token: one past the largest "
                                 "position so far (start_position when empty).")

    @property
    def keys(self):
        """(n, Hkv, D) keys as stored (transformed), a copy in token-major order; float16 or
        uint16 (bfloat16 bits) with kv_dtype "f16" / "bf16"."""
        return self._c.keys()

    @property
    def values(self):
        """(n, Hkv, D) values as stored, a copy (dtypes as keys)."""
        return self._c.values()

    @property
    def positions(self):
        """(n,) position ids; with an M-RoPE config the temporal row of positions3."""
        return self._c.ids()[0]

    @property
    def positions3(self):
        """(3, n) M-RoPE ids (temporal, height, width); None without an M-RoPE config."""
        return self._c.ids() if self._c.ids_per_token == 3 else None

    def stored_keys(self):
        """The key storage itself, (Hkv, head_capacity * D), read-only, shared with the cache
        (it changes as tokens are appended): element e of key j of kv head hk at
        [hk, key_index(j, hk, e)]."""
        return self._c.stored(True)

    def stored_values(self):
        """The value storage, (Hkv, head_capacity * D) read-only: value j of head hk at
        [hk, j * D : (j + 1) * D]."""
        return self._c.stored(False)

    def key_index(self, j, hk, e):
        """Index within stored_keys()[hk] of element e of key j: j * D + e in rows; in 8-key
        blocks (j // 8) * 8 D + (e // 8) * 64 + (j % 8) * 8 + e % 8."""
        return self._c.key_index(int(j), int(hk), int(e))

    def append(self, k, v, positions=None):
        """Appends k, v (T, Hkv, D) in the cache's dtype (float32 for "f16" / "bf16" storage)
        at positions (T,) ((3, T) with M-RoPE; None = after the largest position so far).
        Returns the positions used ((3, T) with M-RoPE). Past capacity: ValueError, nothing
        changed."""
        return self._c.append(k, v, positions)

    def clear(self):
        """Forgets every token; positions restart at start_position."""
        self._c.clear()

    shift_mode = property(lambda self: self._c.shift_mode,
                          doc='How position edits move keys: "rerotate" or "exact".')

    @staticmethod
    def _range(p0, p1):
        for name, val in (("p0", p0), ("p1", p1)):
            if val is not None and (not isinstance(val, (int, np.integer)) or isinstance(val, bool)):
                raise TypeError(f"{name} must be an int or None, got {type(val).__name__}")
        return int(p0), (2**62 + 1 if p1 is None else int(p1))

    def remove(self, p0, p1=None):
        """Forgets the tokens whose position is in [p0, p1) (p1 None: every position from p0;
        llama.cpp's llama_memory_seq_rm). Returns how many. The others keep their order;
        next_position becomes one past the largest remaining position."""
        a, b = self._range(p0, p1)
        return self._c.edit("remove", a, b, 0)

    def shift(self, p0, p1, delta):
        """Adds delta to the positions in [p0, p1) (p1 None: to the end; llama.cpp's
        llama_memory_seq_add, the context shift), moving their keys by shift_mode; a token
        moved below position 0 is dropped, as llama.cpp does. Returns how many were dropped.
        Not on M-RoPE caches; on caches of a q/k transform reached by name only with
        shift_mode="exact"."""
        a, b = self._range(p0, p1)
        if not isinstance(delta, (int, np.integer)) or isinstance(delta, bool):
            raise TypeError(f"delta must be an int, got {type(delta).__name__}")
        return self._c.edit("shift", a, b, int(delta))

    def evict_streaming(self, sink_tokens, window):
        """StreamingLLM's eviction (Xiao et al. 2024): keeps the first sink_tokens tokens and the
        last window, forgets the ones between and moves the window's positions down to follow
        the sinks (positions inside the cache; keys moved by shift_mode). After appending a
        token, evict, then attend: the same as posenc.attention's streaming_llm keywords.
        Returns how many tokens were forgotten."""
        for name, val in (("sink_tokens", sink_tokens), ("window", window)):
            if not isinstance(val, (int, np.integer)) or isinstance(val, bool):
                raise TypeError(f"{name} must be an int, got {type(val).__name__}")
        return self._c.edit("evict_streaming", int(sink_tokens), 0, int(window))

    def divide(self, p0, p1, d):
        """Positions p in [p0, p1) (p1 None: to the end) become p // d, d >= 1 (llama.cpp's
        llama_memory_seq_div, Self-Extend's grouping); keys move by shift_mode."""
        a, b = self._range(p0, p1)
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise TypeError(f"d must be an int, got {type(d).__name__}")
        self._c.edit("divide", a, b, int(d))

    def attend(self, q, *, q_positions=None, causal=True, return_lse=False, **kwargs):
        """Attention of q (T, Hq, D) over the cache (the library's attention_forward_cached).
        q_positions default to the positions (M-RoPE: the (3, T) ids) of the last T tokens
        appended; (T,) or, with M-RoPE, (3, T) ids otherwise. Other keywords as
        posenc.attention (window, the schemes reached by name, ...), except those that belong to
        the cache: rope and its options, keys_rotated, k_positions, kv_dtype."""
        for name in ("rope", "rope_layout", "rope_angle", "rope_seq_len", "keys_rotated",
                     "k_positions", "kv_dtype"):
            if name in kwargs:
                raise TypeError(f"{name} is the cache's (set by KVCache(...) and append()), "
                                "not an argument of attend()")
        return attention(q, self._c, None, causal=causal, q_positions=q_positions,
                         return_lse=return_lse, **kwargs)


_with_named_keywords(KVCache.__init__, None, _TRANSFORMS)


def __getattr__(name):
    # posenc.torch is imported on first use, so `import posenc` works without PyTorch.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'posenc' has no attribute {name!r}")
