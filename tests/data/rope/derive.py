#!/usr/bin/env python3
"""Independent derivation of the RoPE golden values pasted into tests/test_rope_config.cpp and
tests/test_rope.cpp. Standard library only (math, fractions, decimal, json): no numpy, no posenc.

Formulas, written from the papers and the Hugging Face transformers parameterisation:
  default   omega_i = 1 / theta^(2i/R)                                 (Su et al. 2021, eq. 34)
  linear    omega_i / s                                                (Chen et al. 2023)
  dynamic   theta' = theta (s L/M - (s-1))^(R/(R-2)), L = max(seq, M)  (HF dynamic NTK)
  yarn      ramp r_i = clamp((i - lo)/(hi - lo), 0, 1) between the correction dims
            d(b) = R ln(orig/(2 pi b)) / (2 ln theta), lo = floor(d(beta_fast)),
            hi = ceil(d(beta_slow)) (truncate); omega_i = r_i omega_i/s + (1-r_i) omega_i;
            a = 0.1 ln s + 1, or mscale(s, m)/mscale(s, m_all)        (Peng et al. 2023)
  longrope  omega_i = 1 / (lambda_i theta^(2i/R)), lambda = long if seq > orig else short;
            a = sqrt(1 + ln s / ln orig), s = max_pos / orig          (Ding et al. 2024)
  llama3    wavelen 2 pi/omega: < orig/high kept; > orig/low -> omega/s; else
            (1-g) omega/s + g omega, g = (orig/wavelen - low)/(high - low)   (Meta 2024)
Rotation (half layout pairs (i, i+R/2); interleaved (2i, 2i+1)):
  u' = a (u cos t - v sin t), v' = a (v cos t + u sin t), t = p omega_i.
The angle p * omega_i is formed exactly with fractions.Fraction and reduced mod 2 pi with a
60-digit pi (decimal, Machin's formula), so the cos/sin below are accurate to ~1 ulp.

Run: python3 tests/data/rope/derive.py > /tmp/golden.txt
"""
import json
import math
import os
from decimal import Decimal, getcontext
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
getcontext().prec = 70


def machin_pi():
    def atan_inv(x):
        x = Decimal(x)
        s, t, n, sign = Decimal(0), 1 / x, 1, 1
        while True:
            term = t / n
            if term < Decimal(10) ** -66:
                return s
            s += sign * term
            t /= x * x
            n += 2
            sign = -sign
    return 16 * atan_inv(5) - 4 * atan_inv(239)


TWO_PI = Fraction(2 * machin_pi())


def cos_sin(p, w):
    a = Fraction(p) * Fraction(w)          # exact product
    k = round(a / TWO_PI)
    r = float(a - k * TWO_PI)              # reduced, |r| <= pi, error ~1e-60
    return math.cos(r), math.sin(r)


def load(name):
    with open(os.path.join(HERE, name)) as f:
        return json.load(f)


def head_and_rotary(cfg):
    if cfg.get("qk_rope_head_dim"):
        d = cfg["qk_rope_head_dim"]
    elif cfg.get("head_dim"):
        d = cfg["head_dim"]
    else:
        d = cfg["hidden_size"] // cfg["num_attention_heads"]
    prf = cfg.get("partial_rotary_factor", cfg.get("rotary_pct", 1.0))
    return d, int(d * prf)


def default_freqs(theta, R):
    return [1.0 / theta ** (2 * i / R) for i in range(R // 2)]


def yarn(theta, R, s, orig, beta_fast=32, beta_slow=1, mscale=None, mscale_all_dim=None):
    def corr(b):
        return R * math.log(orig / (b * 2 * math.pi)) / (2 * math.log(theta))
    lo, hi = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), R - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for i in range(R // 2):
        pf = theta ** (2 * i / R)
        r = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        ef = 1 - r
        out.append((1.0 / (s * pf)) * (1 - ef) + (1.0 / pf) * ef)

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    if mscale and mscale_all_dim:
        a = get_mscale(s, mscale) / get_mscale(s, mscale_all_dim)
    else:
        a = get_mscale(s)
    return out, a, (lo, hi)


def llama3(theta, R, s, orig, low, high):
    out = []
    for w in default_freqs(theta, R):
        wl = 2 * math.pi / w
        if wl < orig / high:
            out.append(w)
        elif wl > orig / low:
            out.append(w / s)
        else:
            g = (orig / wl - low) / (high - low)
            out.append((1 - g) * w / s + g * w)
    return out


def longrope(theta, R, ext):
    return [1.0 / (ext[i] * theta ** (2 * i / R)) for i in range(R // 2)]


def rotate(freqs, a, layout, p, x, R):
    y = list(x)
    n = R // 2
    for i in range(n):
        iu, iv = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = cos_sin(p, freqs[i])
        u, v = x[iu], x[iv]
        y[iu] = a * (u * c - v * s)
        y[iv] = a * (v * c + u * s)
    return y


def arr(name, vals):
    body = ",\n    ".join(", ".join(repr(v) for v in vals[k:k + 4]) for k in range(0, len(vals), 4))
    return f"const std::vector<double> {name} = {{\n    {body}}};"


def main():
    print("// ---- frequencies of the real configs ----")
    c = load("llama2_7b.json")
    d, R = head_and_rotary(c)
    print(f"// llama2_7b: D={d} R={R} theta={c['rope_theta']}")
    print(arr("kLlama2", default_freqs(c["rope_theta"], R)))

    c = load("codellama_7b.json")
    d, R = head_and_rotary(c)
    print(f"// codellama_7b: D={d} R={R} theta={c['rope_theta']}")
    print(arr("kCodeLlama", default_freqs(float(c["rope_theta"]), R)))

    for name, tag in (("llama3_1_8b.json", "kLlama31"), ("llama3_2_1b.json", "kLlama32")):
        c = load(name)
        d, R = head_and_rotary(c)
        rs = c["rope_scaling"]
        print(f"// {name}: D={d} R={R} llama3 s={rs['factor']}")
        print(arr(tag, llama3(c["rope_theta"], R, rs["factor"],
                              rs["original_max_position_embeddings"], rs["low_freq_factor"],
                              rs["high_freq_factor"])))

    c = load("qwen2_5_7b_yarn.json")
    d, R = head_and_rotary(c)
    rs = c["rope_scaling"]
    f, a, lohi = yarn(c["rope_theta"], R, rs["factor"], rs["original_max_position_embeddings"])
    print(f"// qwen2_5_7b_yarn: D={d} R={R} yarn s={rs['factor']} (explicit factor wins) "
          f"lo,hi={lohi} a={a!r}")
    print(arr("kQwenYarn", f))
    print(f"const double kQwenYarnA = {a!r};")

    c = load("deepseek_v2.json")
    d, R = head_and_rotary(c)
    rs = c["rope_scaling"]
    f, a, lohi = yarn(c["rope_theta"], R, rs["factor"], rs["original_max_position_embeddings"],
                      rs["beta_fast"], rs["beta_slow"], rs["mscale"], rs["mscale_all_dim"])
    print(f"// deepseek_v2: D={d} R={R} yarn s={rs['factor']} lo,hi={lohi} a={a!r}")
    print(arr("kDeepSeekYarn", f))
    print(f"const double kDeepSeekYarnA = {a!r};")
    # The mscale ratio with unequal values (synthetic, same head): m = 1.0, m_all = 0.707.
    _, a2, _ = yarn(c["rope_theta"], R, rs["factor"], 4096, mscale=1.0, mscale_all_dim=0.707)
    print(f"const double kYarnRatioA = {a2!r};  // s=40, mscale 1.0 / mscale_all_dim 0.707")

    c = load("phi3_vision_128k_longrope.json")
    d, R = head_and_rotary(c)
    rs = c["rope_scaling"]
    s = c["max_position_embeddings"] / c["original_max_position_embeddings"]
    a = math.sqrt(1 + math.log(s) / math.log(c["original_max_position_embeddings"]))
    print(f"// phi3 longrope: D={d} R={R} s={s} a={a!r}")
    print(arr("kPhi3Short", longrope(c["rope_theta"], R, rs["short_factor"])))
    print(arr("kPhi3Long", longrope(c["rope_theta"], R, rs["long_factor"])))
    print(f"const double kPhi3A = {a!r};")

    c = load("pythia_70m.json")
    d, R = head_and_rotary(c)
    print(f"// pythia_70m: D={d} R={R}")
    print(arr("kPythia", default_freqs(float(c["rotary_emb_base"]), R)))

    # Dynamic NTK: Llama 2 7B with factor 2 at seq_len 8192 (M = 4096), R = 128.
    M, s, L, R = 4096, 2.0, 8192, 128
    base = 10000.0 * (s * L / M - (s - 1)) ** (R / (R - 2))
    print(f"// dynamic: theta' = {base!r}")
    print(arr("kDynamic", default_freqs(base, R)))

    print("// ---- rotated vectors; x[d] = ((7 d) mod 11 - 5) / 4 for each head ----")
    def xvec(D):
        return [((7 * k) % 11 - 5) / 4.0 for k in range(D)]
    c = load("pythia_70m.json")
    d, R = head_and_rotary(c)
    fr = default_freqs(10000.0, R)
    for p in (0, 1, 1000, 123456):
        print(arr(f"kPythiaHalfP{p}", rotate(fr, 1.0, "half", p, xvec(d), R)[:R]))
    c = load("qwen2_5_7b_yarn.json")
    f, a, _ = yarn(1000000.0, 128, 4.0, 32768)
    print(arr("kQwenHalfP77777", rotate(f, a, "half", 77777, xvec(128), 128)))
    c = load("deepseek_v2.json")
    f, a, _ = yarn(10000.0, 64, 40.0, 4096, 32, 1, 0.707, 0.707)
    print(arr("kDeepSeekInterleavedP100000", rotate(f, a, "interleaved", 100000, xvec(64), 64)))
    f = llama3(500000.0, 128, 8.0, 8192, 1.0, 4.0)
    print(arr("kLlama31HalfP10000000", rotate(f, 1.0, "half", 10000000, xvec(128), 128)))


if __name__ == "__main__":
    main()
