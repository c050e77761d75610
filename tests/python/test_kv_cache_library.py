"""posenc.KVCache is the library's cache (posenc/attention/kv_cache.hpp): keys in 8-key blocks,
float16 / bfloat16 storage and split decode, seen through Python, and bit for bit the
`posenc attend` call on the stored words."""

import json
import subprocess

import numpy as np
import pytest

import posenc


def test_keys_in_eight_key_blocks_and_rows(rng):
    # D a multiple of 8: keys in 8-key blocks (docs/decisions.md "Keys in 8-key blocks"), the
    # layout written out here from its definition; else rows. Values are rows either way.
    for D, blocked in ((16, True), (12, False)):
        Hkv, n, cap = 3, 13, 13
        k = rng.standard_normal((n, Hkv, D)).astype(np.float32)
        v = rng.standard_normal((n, Hkv, D)).astype(np.float32)
        cache = posenc.KVCache(Hkv, D, capacity=cap)
        cache.append(k, v)
        assert cache.keys_blocked is blocked
        assert cache.head_capacity == (16 if blocked else 13)  # whole blocks when blocked
        sk, sv = cache.stored_keys(), cache.stored_values()
        assert sk.shape == sv.shape == (Hkv, cache.head_capacity * D)
        assert not sk.flags.writeable
        for j in range(n):
            for hk in range(Hkv):
                assert np.array_equal(sv[hk, j * D:(j + 1) * D], v[j, hk])
                for e in range(D):
                    idx = ((j // 8) * 8 * D + (e // 8) * 64 + (j % 8) * 8 + e % 8 if blocked
                           else j * D + e)
                    assert cache.key_index(j, hk, e) == idx
                    assert sk[hk, idx] == k[j, hk, e]
        assert np.array_equal(cache.keys, k)  # no transform: the keys as given
        assert cache.nbytes == 2 * Hkv * cache.head_capacity * D * 4


def cfg_dict(D):
    return {"head_dim": D, "rope_theta": 10000.0, "max_position_embeddings": 4096,
            "hidden_size": 4 * D, "num_attention_heads": 4}


@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
def test_half_storage_stores_the_rounded_rotated_keys(rng, kv_dtype):
    # Each key rotated in float32 at its position, then rounded to nearest even (NumPy's
    # float16, torch's bfloat16: independent of posenc's half.hpp); values rounded. Half the
    # bytes of the float32 cache.
    torch = pytest.importorskip("torch")
    Hkv, D, n = 2, 32, 40
    cfg = posenc.RopeConfig.from_hf(cfg_dict(D))
    k = rng.standard_normal((n, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((n, Hkv, D)).astype(np.float32)
    cache = posenc.KVCache(Hkv, D, capacity=n, rope=cfg, kv_dtype=kv_dtype)
    full = posenc.KVCache(Hkv, D, capacity=n, rope=cfg)
    for s, e in ((0, 17), (17, 18), (18, 40)):
        cache.append(k[s:e], v[s:e])
        full.append(k[s:e], v[s:e])
    assert cache.kv_dtype == kv_dtype and cache.keys_blocked
    assert cache.nbytes * 2 == full.nbytes
    kr = posenc.apply_rope(k, np.arange(n), cfg=cfg)
    assert np.array_equal(full.keys, kr)
    if kv_dtype == "f16":
        want_k, want_v = kr.astype(np.float16), v.astype(np.float16)
        assert cache.keys.dtype == np.float16
        assert np.array_equal(cache.keys.view(np.uint16), want_k.view(np.uint16))
        assert np.array_equal(cache.values.view(np.uint16), want_v.view(np.uint16))
    else:
        def bits(a):
            return torch.from_numpy(a).bfloat16().view(torch.int16).numpy().view(np.uint16)
        assert cache.keys.dtype == np.uint16
        assert np.array_equal(cache.keys, bits(kr))
        assert np.array_equal(cache.values, bits(v))


@pytest.mark.parametrize("kv_dtype", [None, "f16", "bf16"])
def test_decode_equals_posenc_attend_on_the_stored_words(cli, tmp_path, rng, kv_dtype):
    # 300 cached keys: a decode step (T = 1) and a 4-token step take the engine's split path
    # (chunks of keys merged in order, chosen by shape). The cache's output is the bits of
    # `posenc attend` on the stored keys (token-major, --keys-rotated) and values.
    Hq, Hkv, D, n = 8, 2, 32, 300
    cfgd = cfg_dict(D)
    (tmp_path / "config.json").write_text(json.dumps(cfgd))
    cfg = posenc.RopeConfig.from_hf(cfgd)
    q = rng.standard_normal((n, Hq, D)).astype(np.float32)
    k = rng.standard_normal((n, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((n, Hkv, D)).astype(np.float32)
    cache = posenc.KVCache(Hkv, D, capacity=n, rope=cfg, kv_dtype=kv_dtype)
    cache.append(k[:295], v[:295])
    for T in (4, 1):
        s = len(cache) + T
        cache.append(k[s - T:s], v[s - T:s])
        got = cache.attend(q[s - T:s], alibi=True)
        files = dict(q=q[s - T:s], k=cache.keys, v=cache.values,
                     qp=np.arange(s - T, s), kp=np.arange(s))
        for name, a in files.items():
            np.save(tmp_path / f"{name}.npy", a)
        args = [str(cli), "attend", "--q", str(tmp_path / "q.npy"),
                "--k", str(tmp_path / "k.npy"), "--v", str(tmp_path / "v.npy"), "--causal",
                "--alibi", "--rope", "--hf-config", str(tmp_path / "config.json"),
                "--rope-layout", "half", "--keys-rotated", "--rope-seq-len", str(n),
                "--q-positions", str(tmp_path / "qp.npy"),
                "--k-positions", str(tmp_path / "kp.npy"), "--out", str(tmp_path / "o.npy")]
        if kv_dtype == "bf16":
            args += ["--kv-dtype", "bf16"]
        subprocess.run(args, check=True, capture_output=True)
        want = np.load(tmp_path / "o.npy")
        assert got.dtype == np.float32 and got.shape == (T, Hq, D)
        assert np.array_equal(got, want), (kv_dtype, T)


def test_mrope_cache_through_the_engine_hook_in_half_precision(rng):
    # An M-RoPE cache rotates keys with the engine's M-RoPE hook (mrope_apply's arithmetic) in
    # float32 and stores them as float16; attend equals posenc.attention on the stored words.
    cfg = posenc.RopeConfig.from_hf({
        "head_dim": 16, "rope_theta": 10000.0, "hidden_size": 64, "num_attention_heads": 4,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}})
    pos = posenc.positions_mrope([(2, 1, 2, 3), (3,)])  # text, a 2 x 3 image, text
    n = pos.shape[1]
    q = rng.standard_normal((n, 4, 16)).astype(np.float32)
    k = rng.standard_normal((n, 2, 16)).astype(np.float32)
    v = rng.standard_normal((n, 2, 16)).astype(np.float32)
    cache = posenc.KVCache(2, 16, capacity=n, rope=cfg, kv_dtype="f16")
    used = cache.append(k[:8], v[:8], pos[:, :8])
    assert np.array_equal(used, pos[:, :8])
    cache.append(k[8:], v[8:])  # text after the image: one past the largest id of any row
    assert np.array_equal(cache.positions3, pos)
    kr = posenc.mrope_apply(k, pos, cfg=cfg)
    assert np.array_equal(cache.keys.view(np.uint16), kr.astype(np.float16).view(np.uint16))
    got = cache.attend(q[8:])
    want = posenc.attention(q[8:], cache.keys, cache.values, causal=True, rope=cfg,
                            keys_rotated=True, q_positions=pos[:, 8:], k_positions=pos)
    assert np.array_equal(got, want)
    # explicit (3, T) query ids equal the default (the last T tokens' ids)
    assert np.array_equal(cache.attend(q[8:], q_positions=pos[:, 8:]), got)


def test_attend_uses_the_query_positions_given(rng):
    # KVCache.attend(q, q_positions=...) rotates the queries at the ids given, not at the
    # default (the last T tokens' ids): queries placed 5 positions before the end give what
    # posenc.attention gives with those ids, and differ from the default.
    Hkv, D, n, T = 2, 16, 12, 3
    cfg = posenc.RopeConfig.from_hf(cfg_dict(D))
    q = rng.standard_normal((T, 4, D)).astype(np.float32)
    k = rng.standard_normal((n, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((n, Hkv, D)).astype(np.float32)
    cache = posenc.KVCache(Hkv, D, capacity=n, rope=cfg)
    cache.append(k, v)
    qpos = np.arange(n - T - 5, n - 5, dtype=np.int64)
    got = cache.attend(q, q_positions=qpos)
    want = posenc.attention(q, cache.keys, cache.values, causal=True, rope=cfg,
                            keys_rotated=True, q_positions=qpos,
                            k_positions=np.arange(n, dtype=np.int64))
    assert np.array_equal(got, want)
    assert not np.array_equal(got, cache.attend(q))
