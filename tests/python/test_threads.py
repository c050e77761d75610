"""Many Python threads calling posenc at once (the GIL is released inside the kernels) give
bitwise the results of one thread."""

import threading
import time

import numpy as np

import posenc


def work(seed):
    rng = np.random.default_rng(seed)
    cfg = posenc.RopeConfig(head_dim=32, scaling="llama3", factor=8.0,
                            original_max_position_embeddings=64, theta=500000.0,
                            low_freq_factor=1.0, high_freq_factor=4.0)
    x = rng.standard_normal((2, 64, 4, 32)).astype(np.float32)
    q = rng.standard_normal((48, 4, 32)).astype(np.float32)
    k = rng.standard_normal((48, 2, 32)).astype(np.float32)
    v = rng.standard_normal((48, 2, 32)).astype(np.float32)
    out, lse = posenc.attention(q, k, v, causal=True, rope=cfg, alibi=True, return_lse=True)
    g = posenc.attention_backward(q, k, v, out, lse, np.ones_like(out), causal=True, rope=cfg,
                                  alibi=True)
    return [
        posenc.apply_rope(x, cfg=cfg, seqlen_offsets=np.array([0, 7])),
        posenc.sinusoidal_table(100, width=64),
        out, g["dq"], g["dk"], g["dv"], g["dalibi"],
    ]


def test_threads_agree_with_one_thread():
    seeds = list(range(8))
    want = [work(s) for s in seeds]
    got = [None] * len(seeds) * 3
    errors = []

    def run(i):
        try:
            got[i] = work(seeds[i % len(seeds)])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(got))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, res in enumerate(got):
        for a, b in zip(res, want[i % len(seeds)]):
            assert np.array_equal(a, b)


def test_gil_is_released():
    # while one thread runs a long attention call, another Python thread makes progress
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2048, 8, 64)).astype(np.float32)
    posenc.set_num_threads(1)  # each call >= 4 GFLOP on one core: tens of milliseconds
    done = threading.Event()
    ticks = []

    def ticker():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    t0 = time.perf_counter()
    for _ in range(3):
        posenc.attention(q, q, q, causal=True)
    elapsed = time.perf_counter() - t0
    done.set()
    t.join()
    posenc.set_num_threads(0)
    # With the GIL held through each call the ticker could run only between the calls (at most
    # one tick per gap, 4 in all); released, it ticks about once a millisecond throughout.
    assert elapsed > 0.02
    assert len(ticks) > 10
