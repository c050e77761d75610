#!/usr/bin/env python3
"""Writes tiny_llama3.gguf, the hand-checked GGUF fixture of tests/test_gguf.cpp, byte by byte
from the format specification (ggml docs/gguf.md), with the standard library only.

The model is a Llama 3.1-style RoPE at a toy size: head_dim 64 (embedding 256, 4 heads), theta
500000, rope_freqs.weight holding the divisors llama.cpp's converter writes for factor 8,
low_freq_factor 1, high_freq_factor 4, original context 8192 (its formula, evaluated in double
and stored as float32), a 3-token string array (skipped by the reader) and one F16 weight.

Byte map (offsets in decimal), checked by GgufFixture.* in tests/test_gguf.cpp:
      0  magic 'GGUF'
      4  u32 version = 3
      8  u64 tensor_count = 2
     16  u64 kv_count = 8
     24  kv[0] general.architecture (string) = 'llama'
     ...  kv[1..7] as listed in KVS below
         tensor infos: rope_freqs.weight F32 [32] offset 0; token_embd.weight F16 [4, 2]
         offset 128
         padding to 32, data section: 128 bytes of rope_freqs, 16 bytes of F16 zeros
"""
import math
import os
import struct


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, payload):
    return string(key) + struct.pack("<I", typ) + payload


U32, F32, STRING, ARRAY = 4, 6, 8, 9
KVS = [
    kv("general.architecture", STRING, string("llama")),
    kv("general.alignment", U32, struct.pack("<I", 32)),
    kv("llama.context_length", U32, struct.pack("<I", 131072)),
    kv("llama.embedding_length", U32, struct.pack("<I", 256)),
    kv("llama.attention.head_count", U32, struct.pack("<I", 4)),
    kv("llama.rope.freq_base", F32, struct.pack("<f", 500000.0)),
    kv("llama.rope.dimension_count", U32, struct.pack("<I", 64)),
    kv("tokenizer.ggml.tokens", ARRAY,
       struct.pack("<IQ", STRING, 3) + string("<s>") + string("a") + string("b")),
]

# Llama 3.1 divisors (llama.cpp convert_hf_to_gguf.py, LlamaModel: its formula, not its code).
dim, base, factor, lo, hi, old = 64, 500000.0, 8.0, 1.0, 4.0, 8192
factors = []
for i in range(dim // 2):
    freq = 1.0 / base ** (2 * i / dim)
    wavelen = 2 * math.pi / freq
    if wavelen < old / hi:
        factors.append(1.0)
    elif wavelen > old / lo:
        factors.append(factor)
    else:
        smooth = (old / wavelen - lo) / (hi - lo)
        factors.append(1 / ((1 - smooth) / factor + smooth))

infos = (string("rope_freqs.weight") + struct.pack("<I", 1) + struct.pack("<Q", 32) +
         struct.pack("<IQ", 0, 0) +
         string("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 2) +
         struct.pack("<IQ", 1, 128))
out = b"GGUF" + struct.pack("<IQQ", 3, 2, len(KVS)) + b"".join(KVS) + infos
out += b"\0" * (-len(out) % 32)
out += b"".join(struct.pack("<f", f32(x)) for x in factors)  # 128 bytes
out += b"\0" * 16  # token_embd.weight: 8 F16 zeros
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_llama3.gguf")
with open(path, "wb") as f:
    f.write(out)
print(path, len(out), "bytes; data section at", len(out) - 144)
print("factors", [f32(x) for x in factors])
