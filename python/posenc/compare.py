"""posenc.compare: another engine's tensor against posenc's, with a derived tolerance and a hint.

    ref = posenc.apply_rope(x, positions, cfg=cfg)
    r = posenc.compare(my_rope_out, ref, x=x, positions=positions, cfg=cfg)
    assert r.ok, r

Tolerance. Rounding errors of RoPE and attention outputs scale with the magnitude of the
vector they belong to, not with the single entry (a rotated pair (u', v') has error ~
u (|u| + |v|)). So each entry's error is compared with

    tol = atol + (rtol + 2 u64 p omega_max) * max |expected| over the last axis (the head's
          vector),
    rtol = 8 u of the compared dtype (u = 2^-53 float64, 2^-24 float32, 2^-11 float16,
           2^-8 bfloat16): a few roundings of a float computation (posenc's own float32 RoPE
           bound is (3 u_f + 5.5 u) a (|x_u| + |x_v|), include/posenc/encodings/rope_cases.hpp),

where the compared dtype is the less precise of the two. The angle term applies when positions
and cfg are given (p is the entry's position): an engine that forms p * omega in float64, as
it should, is off by up to u64 p omega radians there, and omega itself by an ulp. An engine computing angles in float32
(HF's inv_freq * position in float32) is off by about position * omega * 2^-24 radians and
fails this tolerance once positions reach a few hundred; the hint says so.

Hints, tried when the error exceeds the tolerance and x, positions and cfg are given (each
alternative recomputed by posenc and accepted when it is within tolerance of `actual`): the
other pair layout, float32 angles (angle="f32"), a missing attention factor, positions
shifted by a constant per sequence (left padding counted as positions). Without x only the
attention-factor hint is tried (from the ratio of vector norms).
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
    """A NumPy view of an array or a CPU torch tensor (bfloat16 converted to float32)."""
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


def _roundoff(arr, override):
    if override is not None:
        return override
    if arr.dtype not in _UNIT_ROUNDOFF:
        raise TypeError(
            f"compare needs float16, bfloat16, float32 or float64 arrays, got {arr.dtype}"
        )
    return _UNIT_ROUNDOFF[arr.dtype]


@dataclass
class CompareResult:
    """Outcome of posenc.compare. Truthy when ok."""

    ok: bool
    max_error: float  # largest |actual - expected|
    max_ratio: float  # largest error / tolerance (<= 1 when ok)
    tolerance: float  # tolerance at the worst entry
    rtol: float
    atol: float
    worst_index: tuple  # index of the worst entry
    worst_position: int | None = None  # its position (when positions are given)
    worst_pair: int | None = None  # its RoPE channel pair (layout of `layout`)
    ratio_by_position: np.ndarray | None = field(default=None, repr=False)  # over axis -3
    ratio_by_pair: np.ndarray | None = field(default=None, repr=False)  # over channel pairs
    hint: str | None = None
    angle_rtol: float = 0.0  # 2 u64 p omega_max at the worst entry (positions and cfg given)

    def __bool__(self):
        return self.ok

    def __str__(self):
        s = (
            f"{'ok' if self.ok else 'MISMATCH'}: max error {self.max_error:.3g} at "
            f"{self.worst_index}, {self.max_ratio:.3g} x the tolerance "
            f"({self.tolerance:.3g} = {self.atol:.3g} + ({self.rtol:.3g} + {self.angle_rtol:.3g}) x "
            "|vector|)"
        )
        if self.worst_position is not None:
            s += f"; position {self.worst_position}"
        if self.worst_pair is not None:
            s += f", channel pair {self.worst_pair}"
        if self.hint:
            s += f"\nhint: {self.hint}"
        return s


def _ratios(actual, expected, rtol, atol, angle_rtol=0.0):
    """Per-entry error, tolerance and their ratio; angle_rtol broadcasts against the leading
    axes (..., T, H, 1) like rtol."""
    err = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    scale = np.max(np.abs(expected.astype(np.float64)), axis=-1, keepdims=True)
    tol = atol + (rtol + angle_rtol) * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / tol)
    ratio = np.where(np.isnan(actual.astype(np.float64)) != np.isnan(expected), np.inf, ratio)
    return err, tol, ratio


def _pair_of(channel, D, R, layout):
    if channel >= R:
        return None
    if layout == "interleaved":
        return channel // 2
    return channel % (R // 2)


def compare(
    actual,
    expected,
    *,
    rtol=None,
    atol=0.0,
    x=None,
    positions=None,
    cfg=None,
    layout="half",
    angle="exact",
):
    """Error of `actual` against posenc's `expected` (same shape), per entry against a
    tolerance scaled by its vector's magnitude; see the module documentation."""
    a, a_u = _to_numpy(actual, "actual")
    e, e_u = _to_numpy(expected, "expected")
    if a.shape != e.shape:
        raise ValueError(f"actual must have the shape of expected {e.shape}, got {a.shape}")
    if a.ndim == 0 or a.size == 0:
        raise ValueError(f"actual must be a non-empty array with a last axis, got shape {a.shape}")
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be one of half, interleaved, got '{layout}'")
    u = max(_roundoff(a, a_u), _roundoff(e, e_u))
    rtol = 8 * u if rtol is None else float(rtol)
    atol = float(atol)
    if not (rtol >= 0 and atol >= 0):
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    pos = None if positions is None else np.asarray(positions)
    angle_rtol = 0.0
    if pos is not None and cfg is not None and a.ndim >= 3:
        try:
            pb = np.broadcast_to(pos, a.shape[:-2]).astype(np.float64)
        except ValueError:
            raise ValueError(
                f"positions must broadcast to the token axes {a.shape[:-2]} of actual, got "
                f"shape {pos.shape}"
            ) from None
        omega_max = float(np.max(cfg.inv_freq(int(pb.max()) + 1 if pb.size else None)))
        angle_rtol = (2 * 2.0**-53 * omega_max * pb)[..., None, None]
    err, tol, ratio = _ratios(a, e, rtol, atol, angle_rtol)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    max_ratio = float(ratio[worst])
    res = CompareResult(
        ok=bool(max_ratio <= 1.0),
        max_error=float(np.max(err)),
        max_ratio=max_ratio,
        tolerance=float(np.broadcast_to(tol, ratio.shape)[worst]),
        angle_rtol=float(np.broadcast_to(angle_rtol, ratio.shape[:-1] + (1,))[worst[:-1] + (0,)]),
        rtol=rtol,
        atol=atol,
        worst_index=tuple(int(i) for i in worst),
    )
    D = a.shape[-1]
    R = cfg.rotary_dim if cfg is not None else D
    if a.ndim >= 3:
        res.ratio_by_position = ratio.reshape(-1, *a.shape[-3:]).max(axis=(0, 2, 3))
    if cfg is not None:
        pr = ratio[..., :R].reshape(-1, R)
        if layout == "interleaved":
            res.ratio_by_pair = pr.reshape(-1, R // 2, 2).max(axis=(0, 2))
        else:
            res.ratio_by_pair = np.maximum(pr[:, : R // 2], pr[:, R // 2 :]).max(axis=0)
        res.worst_pair = _pair_of(int(worst[-1]), D, R, layout)
    if pos is not None:
        if a.ndim >= 3:
            lead = a.shape[:-2]
            try:
                pb = np.broadcast_to(pos, lead)
                res.worst_position = int(pb[tuple(worst[:-2])])
            except ValueError:
                pass
    if not res.ok:
        res.hint = _hint(a, e, rtol, atol, angle_rtol, x, pos, cfg, layout, angle)
    return res


def _within(candidate, a, rtol, atol, angle_rtol=0.0):
    return float(np.max(_ratios(a, candidate, rtol, atol, angle_rtol)[2])) <= 1.0


def _hint(a, e, rtol, atol, angle_rtol, x, pos, cfg, layout, angle):
    from . import apply_rope  # the package, imported lazily (this module is imported by it)

    hints = []
    if x is not None and cfg is not None:
        xn, _ = _to_numpy(x, "x")
        xd = np.asarray(xn, dtype=np.float64)
        other = "interleaved" if layout == "half" else "half"

        def rope(**kw):
            args = dict(cfg=cfg, layout=layout, angle=angle)
            args.update(kw)
            return apply_rope(xd, pos, **args)

        if _within(rope(layout=other), a, rtol, atol, angle_rtol):
            hints.append(
                f"matches the other pair layout ({other}); posenc used {layout} "
                "(half = NeoX / HF rotate_half, interleaved = GPT-J / Meta llama)"
            )
        # float32 angles come with float32 cos and sin: accepted within float32 roundings
        if angle == "exact" and _within(rope(angle="f32"), a, max(rtol, 8 * 2.0**-24), atol):
            hints.append(
                "matches float32 angles (float32 inv_freq x float32 position, as HF transformers "
                "computes them); the error grows with the position"
            )
        af = cfg.attention_factor
        if af != 1 and _within(rope() / af, a, rtol, atol, angle_rtol):
            hints.append(f"matches without the attention factor a = {af:.6g} (cos and sin unscaled)")
        if pos is not None and xd.ndim == 4 and pos.ndim == 2 and pos.shape[0] == xd.shape[0]:
            shifts = []
            for b in range(xd.shape[0]):
                found = None
                for d in range(-64, 65):
                    if d == 0 or pos[b].min() + d < 0:
                        continue
                    cand = apply_rope(
                        xd[b : b + 1], pos[b : b + 1] + d, cfg=cfg, layout=layout, angle=angle
                    )
                    ar = angle_rtol[b : b + 1] + 2 * 2.0**-53 * abs(d) if np.ndim(angle_rtol) else 0
                    if _within(cand, a[b : b + 1], rtol, atol, ar):
                        found = d
                        break
                shifts.append(found)
            if any(s is not None for s in shifts) and all(
                s is not None
                or _within(e[b : b + 1], a[b : b + 1], rtol, atol,
                           angle_rtol[b : b + 1] if np.ndim(angle_rtol) else 0)
                for b, s in enumerate(shifts)
            ):
                desc = ", ".join(f"row {b}: {s:+d}" for b, s in enumerate(shifts) if s is not None)
                hints.append(
                    f"matches positions shifted per sequence ({desc}): padding counted as "
                    "positions? (left-padded rows must start at 0 at their first real token)"
                )
    if not hints:
        na = np.linalg.norm(a.astype(np.float64), axis=-1)
        ne = np.linalg.norm(e.astype(np.float64), axis=-1)
        mask = ne > 0
        if mask.any():
            r = na[mask] / ne[mask]
            c = float(np.median(r))
            if abs(c - 1) > 1e-3 and np.max(np.abs(r - c)) <= 1e-3 * c:
                hints.append(
                    f"every vector is scaled by {c:.6g} against posenc's: a missing or extra "
                    "attention factor (YaRN, LongRoPE) or softmax scale?"
                )
    return "; ".join(hints) if hints else None
