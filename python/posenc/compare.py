"""posenc.compare: another engine's RoPE output against posenc's, with a tolerance derived for
each angle pipeline, a verdict that names the pipeline the engine follows, and hints.

    r = posenc.compare(hf_out, x=x, positions=positions, cfg=cfg)  # or compare(hf_out, ref, ...)
    assert r.ok, r
    r.pipeline    # "exact", "f32", "hf_f32" or "ggml_f32": the angle arithmetic it matches
    r.max_ratio   # its distance to exact angles, in units of the exact tolerance

The comparison is the library's (rope_compare, include/posenc/encodings/rope_compare.hpp, the
same code as `posenc rope compare`); this module converts arrays and tensors and builds the
result.

Verdict. `actual` is first compared with `expected` (posenc's output, by default computed with
exact angles; recomputed from x when not given). Within tolerance: "ok". Otherwise, when x and
cfg are given, posenc recomputes the output under each float32 pipeline: f32 (a plain float32
angle), hf_f32 (transformers: float32 inv_freq, angle = inv_freq * float(position), float32
cos/sin times the attention factor) and ggml_f32 (ggml's CPU backend: theta multiplied by
theta_scale pair after pair). An engine within tolerance of one of them is "ok as transformers'
float32 (hf_f32)" (when several fit, the one with the most entries bit-identical, then the
smallest summed error: the pipeline the engine follows reproduces every entry where its angle and
rotation order agree), shown with its
error under that pipeline and, separately, its distance to exact (max_error, max_ratio). Else
MISMATCH, and every hint is tried under each of exact, f32, hf_f32 and ggml_f32: the other pair
layout, the output without the attention factor, positions shifted by a constant per sequence
(left padding counted as positions). Without x only a uniform scale of every vector (from the
norms) is looked for.

Tolerance. Rounding errors of RoPE scale with the head's vector, not the single entry, so the
error of an entry (position p, channel of pair i) is compared with

    tol = atol + (rtol + eps * omega_i * p) * max |candidate| over the head's vector.

exact: rtol = 8 u of the less precise of actual and expected (u = 2^-53 float64, 2^-24 float32,
    2^-11 float16, 2^-8 bfloat16): a few roundings of the engine's rotation; eps = 10 * 2^-53:
    an engine forming p * omega in float64 from an omega within 2 ulp (4 * 2^-53 relative) is
    off by 5 * 2^-53 omega p, and an angle error delta moves a pair by <= 2 |delta| max.
named pipelines (derivation): the engine and posenc form the same float32 angle theta_i and take
    cos/sin of it in float32. Per output of a pair (u, v) with magnitude a, what remains is
    - cos/sin: each library's float32 cos/sin is within 1 ulp of cos(theta_i) (torch's SLEEF,
      libm's cosf; posenc's is correctly rounded): <= 2 ulp <= 2u apart below 1, <= 4u a after
      each rounds the product with float(a), i.e. <= 4u a (|u| + |v|) in the output;
    - the engine's rotation in its data type (two products and a sum, 2 u_d) and, for data
      narrower than float32, its cast of cos/sin and of x to it (2 u_d): <= 4 u_d a (|u| + |v|);
    - posenc's rotation (a fused multiply-add and a product; float32 for float32 and narrower
      data, float64 for float64: u_w): <= 2 u_w a (|u| + |v|);
    so rho = 4u + 4 u_d + 2 u_w per pair, with u = 2^-24; since a (|u| + |v|) <=
    sqrt(2) |(u', v')| <= 2 max(|u'|, |v'|), rtol = 2 rho on the vector's scale (float32 data:
    20u = 1.2e-6). The angle: ggml_f32 calls the same libm powf/cosf/sinf as ggml's CPU backend,
    so theta_i is the same float: eps = 0. hf_f32 and f32: torch's float32 pow (SLEEF, 1 ulp)
    against posenc's correctly rounded one leaves inv_freq a few ulp apart (measured: none for
    Llama 2, 1 ulp on one pair for CodeLlama, up to 2 ulp for dynamic NTK past its length); 4 ulp
    (8u relative) plus the two products' roundings (2u) bound the angle difference by
    10u omega_i p, and an angle error delta moves a pair by <= 2 |delta| max: eps = 20u.
    An engine that is bit-identical to posenc's pipeline has error 0 (r.pipeline_identical).
rtol, when given, replaces every mode's rtol.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_UNIT_ROUNDOFF = {
    np.dtype(np.float64): 2.0**-53,
    np.dtype(np.float32): 2.0**-24,
    np.dtype(np.float16): 2.0**-11,
}


def _to_numpy(a, name):
    """A NumPy view of an array or a CPU torch tensor (bfloat16 converted to float32), and the
    unit roundoff of a bfloat16 tensor (else None)."""
    if type(a).__module__.startswith("torch"):
        t = a.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if str(t.dtype) == "torch.bfloat16":
            return t.float().numpy(), 2.0**-8
        return t.numpy(), None
    try:
        return np.asarray(a), None
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"{name} must be an array or a tensor, got {type(a).__name__}") from e


def _roundoff(arr, override, name):
    if override is not None:
        return override
    if arr.dtype not in _UNIT_ROUNDOFF:
        raise TypeError(
            f"{name} must be float16, bfloat16, float32 or float64, got {arr.dtype}"
        )
    return _UNIT_ROUNDOFF[arr.dtype]


@dataclass
class CompareResult:
    """Outcome of posenc.compare. Truthy when ok; str() is the verdict."""

    ok: bool
    max_error: float  # largest |actual - expected|: against exact angles unless angle= says else
    max_ratio: float  # largest error / tolerance against expected (the distance to exact)
    tolerance: float  # tolerance at the worst entry
    rtol: float
    atol: float
    worst_index: tuple  # index of the worst entry
    worst_position: int | None = None  # its position (when positions are given)
    worst_pair: int | None = None  # its RoPE channel pair (layout of `layout`)
    ratio_by_position: np.ndarray | None = field(default=None, repr=False)  # over axis -3
    ratio_by_pair: np.ndarray | None = field(default=None, repr=False)  # over channel pairs
    hint: str | None = None  # the hints joined by "; "
    angle_rtol: float = 0.0  # eps * omega_i * p at the worst entry
    verdict: str = ""  # "ok", "ok as transformers' float32 (hf_f32)", ..., "MISMATCH"
    pipeline: str | None = None  # the mode it is ok under (exact, f32, hf_f32, ggml_f32)
    pipeline_max_error: float | None = None  # its error under that pipeline
    pipeline_max_ratio: float | None = None  # ... in units of that pipeline's tolerance
    pipeline_identical: float | None = None  # fraction of entries bit-identical there
    pipelines: dict = field(default_factory=dict, repr=False)  # mode -> max_ratio, as given
    hints: list = field(default_factory=list, repr=False)  # each hint in words
    text: str = field(default="", repr=False)

    def __bool__(self):
        return self.ok

    def __str__(self):
        return self.text


def compare(
    actual,
    expected=None,
    *,
    rtol=None,
    atol=0.0,
    x=None,
    positions=None,
    cfg=None,
    layout="half",
    angle="exact",
    seq_len=None,
):
    """Error of `actual` against posenc's output, its verdict and hints (module documentation).

    actual: the engine's output, shape (..., T, H, D) (any shape without x and positions), a
    float array or CPU tensor. expected: posenc's output in mode `angle` (default exact), same
    shape; None = recomputed from x (then x and cfg are required). x: the engine's input (same
    shape). positions: broadcasting to the token axes (..., T); None = 0 .. T-1 per sequence.
    cfg: posenc.RopeConfig. layout: "half" or "interleaved". seq_len: for the frequencies
    (dynamic, longrope); None = max position + 1.
    """
    from . import _posenc  # the package's extension, imported lazily (this module is its import)

    a, a_u = _to_numpy(actual, "actual")
    u_a = _roundoff(a, a_u, "actual")
    if a.ndim == 0 or a.size == 0:
        raise ValueError(f"actual must be a non-empty array with a last axis, got shape {a.shape}")
    e = None
    u_e = 2.0**-53
    if expected is not None:
        e, e_u = _to_numpy(expected, "expected")
        u_e = _roundoff(e, e_u, "expected")
        if e.shape != a.shape:
            raise ValueError(f"actual must have the shape of expected {e.shape}, got {a.shape}")
    xn = None
    if x is not None:
        xn, _ = _to_numpy(x, "x")
        if xn.shape != a.shape:
            raise ValueError(f"x must have the shape of actual {a.shape}, got {xn.shape}")
    if a.ndim >= 3:
        B, (T, H, D) = int(np.prod(a.shape[:-3], dtype=np.int64)), a.shape[-3:]
    else:
        if xn is not None:
            raise ValueError(f"actual must have shape (..., T, H, D) when x is given, got {a.shape}")
        B, T, H, D = 1, int(np.prod(a.shape[:-1], dtype=np.int64)), 1, a.shape[-1]
        positions = None
    pos = None
    if positions is not None:
        p = np.asarray(positions)
        try:
            pos = np.broadcast_to(p, a.shape[:-2]).reshape(-1)
        except ValueError:
            raise ValueError(
                f"positions must broadcast to the token axes {a.shape[:-2]} of actual, got "
                f"shape {p.shape}"
            ) from None
    d = _posenc._rope_compare(
        a.reshape(-1), u_a, None if e is None else e.reshape(-1), u_e,
        None if xn is None else xn.reshape(-1), pos, cfg, B, T, H, D,
        layout=layout, angle=angle, rtol=None if rtol is None else float(rtol),
        atol=float(atol), seq_len=seq_len,
    )
    res = CompareResult(
        ok=d["ok"],
        max_error=d["max_error"],
        max_ratio=d["max_ratio"],
        tolerance=d["tolerance"],
        rtol=d["rtol"],
        atol=d["atol"],
        worst_index=tuple(int(i) for i in np.unravel_index(d["worst"], a.shape)),
        worst_position=d["worst_position"],
        worst_pair=d["worst_pair"],
        ratio_by_position=d["ratio_by_t"] if a.ndim >= 3 else None,
        ratio_by_pair=d["ratio_by_pair"],
        hint="; ".join(d["hints"]) or None,
        angle_rtol=d["angle_rtol"],
        verdict=d["verdict"],
        pipelines={p["angle"]: p["max_ratio"] for p in d["pipelines"]},
        hints=list(d["hints"]),
        text=d["text"],
    )
    m = d["match"]
    if m is not None:
        res.pipeline = m["angle"]
        res.pipeline_max_error = m["max_error"]
        res.pipeline_max_ratio = m["max_ratio"]
        res.pipeline_identical = m["identical"] / max(m["compared"], 1)
    elif res.ok:
        res.pipeline = d["reference"]
        res.pipeline_max_error = res.max_error
        res.pipeline_max_ratio = res.max_ratio
    return res
