"""NumPy references written from the papers' formulas, independent of posenc's code.

Every function computes in float64 and states where its own rounding error comes from, so the
tests can derive their tolerances (u = 2^-53 float64, u_f = 2^-24 float32).
"""

import math

import numpy as np

U64 = 2.0**-53
U32 = 2.0**-24


# ---- RoPE frequencies (Su et al. 2021 eq. 34; HF transformers modeling_rope_utils) ---------


def inv_freq_default(theta, R):
    # omega_i = theta^(-2i/R), i < R/2. np.power: < 1 ulp.
    return 1.0 / np.power(float(theta), np.arange(0, R, 2, dtype=np.float64) / R)


def inv_freq_linear(theta, R, factor):
    return inv_freq_default(theta, R) / factor


def inv_freq_dynamic(theta, R, factor, max_pos, seq_len):
    # HF _compute_dynamic_ntk_parameters: base' = base * ((s L / M) - (s - 1))^(R / (R - 2))
    L = max(seq_len, max_pos)
    base = theta * ((factor * L / max_pos) - (factor - 1)) ** (R / (R - 2))
    return inv_freq_default(base, R)


def inv_freq_llama3(theta, R, factor, low_freq_factor, high_freq_factor, original):
    # HF _compute_llama3_parameters
    inv = inv_freq_default(theta, R)
    low_wl = original / low_freq_factor
    high_wl = original / high_freq_factor
    wl = 2 * math.pi / inv
    out = np.where(wl > low_wl, inv / factor, inv)
    smooth = (original / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = (wl >= high_wl) & (wl <= low_wl)
    return np.where(medium, smoothed, out)


def yarn(theta, R, factor, original, beta_fast=32.0, beta_slow=1.0, truncate=True):
    # HF _compute_yarn_parameters (Peng et al. 2023): returns (inv_freq, attention_factor)
    attention_factor = 0.1 * math.log(factor) + 1.0

    def corr_dim(rot):
        return (R * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(theta))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, R - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(R // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = np.power(float(theta), np.arange(0, R, 2, dtype=np.float64) / R)
    inter = 1.0 / (factor * pos_freqs)
    extra = 1.0 / pos_freqs
    extrapolation_factor = 1 - ramp
    inv = inter * (1 - extrapolation_factor) + extra * extrapolation_factor
    return inv, attention_factor


# ---- RoPE rotation ---------------------------------------------------------------------------


def rope_rotate(x, pos, inv_freq, layout, a=1.0, inverse=False):
    """x: (..., T, H, D) float64, pos: broadcastable to x.shape[:-2]. Rotates channels [0, R).

    Error: the angle p * omega rounds once (|d angle| <= u p omega), np.cos/np.sin add ~1 ulp,
    the rotation 2 products and a sum: |error| <= (p omega + 4) u a (|x_u| + |x_v|).
    """
    x = np.asarray(x, dtype=np.float64)
    R = 2 * len(inv_freq)
    ang = np.asarray(pos, dtype=np.float64)[..., None] * inv_freq  # (..., T, R/2)
    c = (a * np.cos(ang))[..., None, :]
    s = (a * np.sin(ang))[..., None, :]
    if inverse:
        s = -s
    y = x.copy()
    if layout == "half":
        u, v = x[..., : R // 2], x[..., R // 2 : R]
        y[..., : R // 2] = u * c - v * s
        y[..., R // 2 : R] = v * c + u * s
    else:
        u, v = x[..., 0:R:2], x[..., 1:R:2]
        y[..., 0:R:2] = u * c - v * s
        y[..., 1:R:2] = v * c + u * s
    return y


def pair_magnitude(x, R, layout):
    """|x_u| + |x_v| for each channel of [0, R) (the same value for both members of a pair)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    m = np.zeros_like(x[..., :R])
    if layout == "half":
        s = x[..., : R // 2] + x[..., R // 2 : R]
        m[..., : R // 2] = s
        m[..., R // 2 :] = s
    else:
        s = x[..., 0:R:2] + x[..., 1:R:2]
        m[..., 0:R:2] = s
        m[..., 1:R:2] = s
    return m


# ---- tables ------------------------------------------------------------------------------------


def sinusoidal(positions, width, base=10000.0, layout="interleaved", denominator="width"):
    # Vaswani et al. 2017 sec. 3.5: PE(p, 2r) = sin(p w_r), PE(p, 2r+1) = cos(p w_r).
    r = np.arange(width // 2, dtype=np.float64)
    if denominator == "width":
        w = base ** (-2 * r / width)
    else:
        w = base ** (-r / max(width // 2 - 1, 1))
    ang = np.asarray(positions, dtype=np.float64)[:, None] * w
    out = np.empty((len(positions), width))
    if layout == "interleaved":
        out[:, 0::2], out[:, 1::2] = np.sin(ang), np.cos(ang)
    else:
        out[:, : width // 2], out[:, width // 2 :] = np.sin(ang), np.cos(ang)
    return out


def alibi_slopes_press(n):
    # Press et al. 2022 reference code (get_slopes).
    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return np.array(pow2(n))
    p = 2 ** math.floor(math.log2(n))
    return np.array(pow2(p) + pow2(2 * p)[0::2][: n - p])


def t5_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128):
    # mesh-tensorflow / HF T5Attention._relative_position_bucket, float32 log branch.
    rel = np.asarray(rel, dtype=np.int64)
    ret = np.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n //= 2
        ret += (rel > 0).astype(np.int64) * n
        r = np.abs(rel)
    else:
        r = -np.minimum(rel, 0)
    max_exact = n // 2
    small = r < max_exact
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) of the exact branch
        large = max_exact + (
            np.log(r.astype(np.float32) / np.float32(max_exact))
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(n - max_exact)
        ).astype(np.int64)
    large = np.minimum(large, n - 1)
    return ret + np.where(small, r, large)


# ---- attention ---------------------------------------------------------------------------------


def attention(q, k, v, *, causal=False, scale=None, bias=None, mask=None, shaw=None,
              qpos=None, kpos=None):
    """One batch element: q (T, Hq, D), k, v (S, Hkv, D) in float64.

    s_hij = scale q_i . (k_j + aK_c) + bias[h, i, j]; masked -> -inf; p = softmax; o = p (v + aV).
    mask: (T, S) bool, True = visible (causal added here, bottom-right aligned).
    Rows that see nothing: out 0, lse -inf. Returns out (T, Hq, D), lse (T, Hq).
    Error: dot products and sums of S terms in float64, ~ (D + S) u relative.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    G = Hq // Hkv
    scale = 1 / math.sqrt(D) if scale is None else scale
    vis = np.ones((T, S), dtype=bool) if mask is None else mask.copy()
    if causal:
        vis &= np.arange(S)[None, :] <= (S - T + np.arange(T))[:, None]
    out = np.zeros((T, Hq, D))
    lse = np.full((T, Hq), -np.inf)
    if shaw is not None:
        ak, av, K = shaw
        c = np.clip(np.asarray(kpos)[None, :] - np.asarray(qpos)[:, None], -K, K) + K  # (T, S)
    for h in range(Hq):
        kk, vv = k[:, h // G], v[:, h // G]
        if shaw is None:
            s = scale * q[:, h] @ kk.T
        else:
            s = scale * np.einsum("td,tsd->ts", q[:, h], kk[None] + ak[c])
        if bias is not None:
            s = s + bias[h]
        s = np.where(vis, s, -np.inf)
        for i in range(T):
            if not vis[i].any():
                continue
            m = s[i].max()
            e = np.exp(s[i] - m)
            z = e.sum()
            p = e / z
            lse[i, h] = m + math.log(z)
            vals = vv if shaw is None else vv + av[c[i]]
            out[i, h] = p @ vals
    return out, lse
