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


# ---- research schemes and newer conventions ----------------------------------------------------
# Each written from its paper (or the model code the convention comes from), in float64.


def softplus(x):
    return np.logaddexp(0.0, np.asarray(x, dtype=np.float64))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def kerple_bias(params, qpos, kpos, kernel="log"):
    """Chi et al. 2022 (KERPLE), sec. 4: the logarithmic variant -r1 log(1 + r2 |m - n|) and the
    power variant -r1 |m - n|^r2 (0 < r2 <= 2), per head. posenc keeps r1, r2 in range with
    r1 = softplus(a1), r2 = softplus(a2) (log) or 2 sigmoid(a2) (power); params (2, H) = (a1, a2).
    Returns (H, T, S)."""
    a1, a2 = np.asarray(params, dtype=np.float64)
    d = np.abs(np.asarray(qpos)[:, None] - np.asarray(kpos)[None, :]).astype(np.float64)
    r1 = softplus(a1)[:, None, None]
    if kernel == "log":
        r2 = softplus(a2)[:, None, None]
        return -r1 * np.log1p(r2 * d[None])
    r2 = 2.0 * sigmoid(a2)[:, None, None]
    return -r1 * d[None] ** r2


def fire_bias(params, qpos, kpos, hidden):
    """Li et al. 2023 (FIRE), eq. 5 with the learned threshold of sec. 3.2:
    b(i, j) = f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1), f an MLP with one hidden
    ReLU layer. Per head [w1 (m) | b1 (m) | w2 (m) | b2, a_c, a_L], c = softplus(a_c),
    L = softplus(a_L) (posenc's parameterisation); the distance is |i - j| for keys ahead.
    Returns (H, T, S)."""
    w = np.asarray(params, dtype=np.float64)
    m = hidden
    qp = np.asarray(qpos, dtype=np.float64)[:, None]
    d = np.abs(qp - np.asarray(kpos, dtype=np.float64)[None, :])
    out = []
    for row in w:
        w1, b1, w2, b2 = row[:m], row[m : 2 * m], row[2 * m : 3 * m], row[3 * m]
        c, L = softplus(row[3 * m + 1]), softplus(row[3 * m + 2])
        x = np.log(c * d + 1) / np.log(c * np.maximum(L, qp) + 1)  # (T, S)
        hid = np.maximum(0.0, x[..., None] * w1 + b1)  # (T, S, m)
        out.append(hid @ w2 + b2)
    return np.stack(out)


def xpos_transform(x, pos, theta=10000.0, gamma=0.4, scale_base=512.0, center=0.0, key=False):
    """Sun et al. 2022 (A Length-Extrapolatable Transformer), sec. 3.2: RoPE with the scale
    zeta_i = (i / (D/2) + gamma) / (1 + gamma) raised to +(n - c)/B for queries and -(n - c)/B
    for keys; pairs (i, i + D/2), angles n theta^(-2i/D). x: (T, H, D)."""
    x = np.asarray(x, dtype=np.float64)
    D = x.shape[-1]
    i = np.arange(D // 2, dtype=np.float64)
    zeta = (i / (D // 2) + gamma) / (1 + gamma)
    e = (np.asarray(pos, dtype=np.float64) - center) / scale_base
    sc = zeta[None, :] ** ((-e if key else e)[:, None])  # (T, D/2)
    y = rope_rotate(x, pos, inv_freq_default(theta, D), "half")
    y[..., : D // 2] *= sc[:, None, :]
    y[..., D // 2 :] *= sc[:, None, :]
    return y


def temperature_scale(pos, floor_scale, attn_scale):
    """Llama 4 (transformers' Llama4TextAttention): log(floor((pos + 1) / floor_scale) + 1) *
    attn_scale + 1, the query scale of the NoPE layers."""
    p = np.asarray(pos, dtype=np.float64)
    return np.log(np.floor((p + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0


def cope_attention(q, k, v, emb, scale=None, mask=None):
    """Golovneva et al. 2024 (Contextual Position Encoding), sec. 3 and the code of its
    appendix, causal, one batch element: logits a = scale q k^T, gates sigmoid(a) on visible
    pairs (0 elsewhere), positions p_ij = sum_{t=j..i} g_it (a reversed cumulative sum),
    clamped to npos - 1, logits + q . e interpolated between floor(p) and ceil(p).
    q (T, Hq, D), k, v (S, Hkv, D), emb (npos, D). Returns out (T, Hq, D)."""
    q, k, v, emb = (np.asarray(a, dtype=np.float64) for a in (q, k, v, emb))
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    G = Hq // Hkv
    scale = 1 / math.sqrt(D) if scale is None else scale
    vis = np.arange(S)[None, :] <= (S - T + np.arange(T))[:, None]
    if mask is not None:
        vis &= mask
    npos = emb.shape[0]
    out = np.zeros((T, Hq, D))
    for h in range(Hq):
        a = scale * q[:, h] @ k[:, h // G].T  # (T, S)
        g = np.where(vis, sigmoid(a), 0.0)
        p = np.flip(np.cumsum(np.flip(g, -1), -1), -1)
        p = np.minimum(p, npos - 1)
        lo, hi = np.floor(p).astype(int), np.ceil(p).astype(int)
        w = p - lo
        z = q[:, h] @ emb.T  # (T, npos)
        zi = np.take_along_axis(z, lo, -1) * (1 - w) + np.take_along_axis(z, hi, -1) * w
        s = np.where(vis, a + zi, -np.inf)
        for i in range(T):
            if not vis[i].any():
                continue
            e = np.exp(s[i] - s[i].max())
            out[i, h] = (e / e.sum()) @ v[:, h // G]
    return out


def mrope_rotate(x, pos3, inv_freq, section, interleaved=False, layout="half", inverse=False):
    """M-RoPE (Wang et al. 2024, Qwen2-VL, sec. 2.1), as transformers applies it: angles of
    the three components pos3 (3, T) times inv_freq, then each pair takes the angle of its
    component: contiguous (apply_multimodal_rotary_pos_emb: the R/2 pairs split into sections
    t, h, w) or interleaved (Qwen3-VL's apply_interleaved_mrope: pair i is h when i % 3 == 1
    and i < 3 s_h, w when i % 3 == 2 and i < 3 s_w). x: (T, H, D)."""
    ang = np.asarray(pos3, dtype=np.float64)[:, :, None] * np.asarray(inv_freq)[None, None, :]
    if interleaved:
        a = ang[0].copy()
        for dim, offset in ((1, 1), (2, 2)):
            idx = slice(offset, section[dim] * 3, 3)
            a[:, idx] = ang[dim][:, idx]
    else:
        bounds = np.cumsum([0] + list(section))
        a = np.concatenate([ang[c][:, bounds[c] : bounds[c + 1]] for c in range(3)], axis=-1)
    x = np.asarray(x, dtype=np.float64)
    R = 2 * len(inv_freq)
    c, s = np.cos(a)[:, None, :], np.sin(a)[:, None, :]
    if inverse:
        s = -s
    y = x.copy()
    if layout == "half":
        u, w = x[..., : R // 2], x[..., R // 2 : R]
        y[..., : R // 2], y[..., R // 2 : R] = u * c - w * s, w * c + u * s
    else:
        u, w = x[..., 0:R:2], x[..., 1:R:2]
        y[..., 0:R:2], y[..., 1:R:2] = u * c - w * s, w * c + u * s
    return y


def mrope_position_ids(segments, start=0, rule="transformers_v5"):
    """transformers' Qwen2-VL get_rope_index for one sequence: segments of (text, t, h, w);
    text tokens count on from the next id, a vision segment's tokens get (t, h, w) grid
    indices offset by the next id; the next id then advances by max(h, w) (transformers 5,
    PR #43972) or becomes the largest id + 1, i.e. advances by max(t, h, w) (transformers 4).
    Returns (3, n)."""
    parts = []
    nxt = start
    for text, t, h, w in segments:
        if text:
            parts.append(np.tile(np.arange(text), (3, 1)) + nxt)
            nxt += text
        if t:
            ti = np.repeat(np.arange(t), h * w)
            hi = np.tile(np.repeat(np.arange(h), w), t)
            wi = np.tile(np.arange(w), t * h)
            ids = np.stack([ti, hi, wi]) + nxt
            parts.append(ids)
            nxt = int(ids.max()) + 1 if rule == "transformers_v4" else nxt + max(h, w)
    return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)


def inv_freq_proportional(theta, D, partial_rotary_factor, factor=1.0):
    """Gemma 4's proportional RoPE (transformers): exponents over the full head dim D, the
    first floor(partial_rotary_factor D / 2) pairs rotate, the rest get frequency 0."""
    n = int(partial_rotary_factor * D // 2)
    inv = 1.0 / (factor * np.power(float(theta), np.arange(0, D, 2, dtype=np.float64) / D))
    inv[n:] = 0.0
    return inv
