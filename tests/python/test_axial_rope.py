"""Axial RoPE for images through Python: posenc.axial_rope_2d (Pixtral's 2-D RoPE) and
posenc.axial_rope_nd (FLUX's axes_dim) against rotations written here from the peers' formulas
(transformers' PixtralRotaryEmbedding: the 1-D frequencies, even ones for the patch row and odd
ones for its column, rotate_half; diffusers' FluxPosEmbed / EmbedND: each axis its own block of
channels at theta^(-2i / dim), interleaved pairs), posenc.attention with an AxialRope against
attention of the rotated q and k, `posenc attend --axial-rope` against posenc.attention, and the
errors."""
import subprocess

import numpy as np
import pytest

import posenc


def _rotate(x, angles, layout):
    """x (T, H, D), angles (T, D/2) per pair. float64; error a few ulp of |x|."""
    c, s = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    y = x.copy()
    D = x.shape[-1]
    if layout == "half":
        u, v = x[..., : D // 2], x[..., D // 2:]
        y[..., : D // 2], y[..., D // 2:] = u * c - v * s, v * c + u * s
    else:
        u, v = x[..., 0::2], x[..., 1::2]
        y[..., 0::2], y[..., 1::2] = u * c - v * s, v * c + u * s
    return y


def _pixtral_angles(ids, D, theta):
    # transformers' PixtralRotaryEmbedding: freqs = 1 / theta^(arange(0, D, 2) / D);
    # freqs_h = outer(h, freqs[::2]), freqs_w = outer(w, freqs[1::2]); per patch cat(h, w).
    freqs = 1.0 / theta ** (np.arange(0, D, 2) / D)
    h, w = ids[1].astype(np.float64), ids[2].astype(np.float64)
    return np.concatenate([np.outer(h, freqs[::2]), np.outer(w, freqs[1::2])], axis=1)


def _flux_angles(ids, axes_dim, theta):
    # diffusers' FluxPosEmbed: per axis a, pos_a * theta^(-arange(0, dim, 2) / dim), in order.
    parts = []
    for a, dim in enumerate(axes_dim):
        omega = 1.0 / theta ** (np.arange(0, dim, 2) / dim)
        parts.append(np.outer(ids[a].astype(np.float64), omega))
    return np.concatenate(parts, axis=1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_pixtral_2d_matches_the_formula(layout):
    D, theta = 32, 10000.0
    ax = posenc.axial_rope_2d(D, theta=theta, layout=layout)
    assert ax.section == (0, D // 4, D // 4) and ax.layout == layout and ax.axes == 2
    ids = posenc.axial_grid_ids(5, 7)
    assert ids.shape == (3, 35)
    np.testing.assert_array_equal(ids[1], np.repeat(np.arange(5), 7))
    np.testing.assert_array_equal(ids[2], np.tile(np.arange(7), 5))
    x = np.random.default_rng(0).standard_normal((35, 3, D))
    got = posenc.axial_apply(x, ids, axial=ax)
    want = _rotate(x, _pixtral_angles(ids, D, theta), layout)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    back = posenc.axial_apply(got, ids, axial=ax, inverse=True)
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-13)


def test_flux_axes_dim_matches_the_formula():
    axes_dim, theta = [8, 12, 12], 10000.0
    ax = posenc.axial_rope_nd(axes_dim, theta=[theta])
    assert ax.section == (4, 6, 6) and ax.layout == "interleaved" and ax.axes == 3
    ids = posenc.axial_grid_ids(4, 6, frame=2)
    x = np.random.default_rng(1).standard_normal((24, 2, 32))
    got = posenc.axial_apply(x, ids, axial=ax)
    want = _rotate(x, _flux_angles(ids, axes_dim, theta), "interleaved")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("make", [lambda: posenc.axial_rope_2d(16),
                                  lambda: posenc.axial_rope_nd([4, 6, 6], theta=[10000.0, 100.0,
                                                                                 100.0])])
def test_attention_with_an_axial_rope_is_attention_of_the_rotated_q_and_k(make):
    ax = make()
    ids = posenc.axial_grid_ids(3, 4)
    r = np.random.default_rng(2)
    q, k, v = (r.standard_normal((12, 4, 16)), r.standard_normal((12, 2, 16)),
               r.standard_normal((12, 2, 16)))
    out = posenc.attention(q, k, v, rope=ax, q_positions=ids, k_positions=ids)
    want = posenc.attention(posenc.axial_apply(q, ids, axial=ax),
                            posenc.axial_apply(k, ids, axial=ax), v)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-14)
    dout = r.standard_normal(q.shape)
    o, lse = posenc.attention(q, k, v, rope=ax, q_positions=ids, k_positions=ids, return_lse=True)
    g = posenc.attention_backward(q, k, v, o, lse, dout, rope=ax, q_positions=ids,
                                  k_positions=ids)
    h = 1e-6
    qp, qm = q.copy(), q.copy()
    qp[5, 1, 3] += h
    qm[5, 1, 3] -= h
    fd = (np.sum(dout * posenc.attention(qp, k, v, rope=ax, q_positions=ids, k_positions=ids))
          - np.sum(dout * posenc.attention(qm, k, v, rope=ax, q_positions=ids,
                                           k_positions=ids))) / (2 * h)
    assert abs(fd - g["dq"][5, 1, 3]) < 1e-7


def test_errors():
    ax = posenc.axial_rope_2d(16)
    q = np.zeros((4, 2, 16))
    with pytest.raises(ValueError, match=r"needs q_positions of shape \(3, n\)"):
        posenc.attention(q, q, q, rope=ax)
    with pytest.raises(ValueError, match="head dim D = 8"):
        posenc.attention(np.zeros((4, 2, 8)), np.zeros((4, 2, 8)), np.zeros((4, 2, 8)), rope=ax,
                         q_positions=posenc.axial_grid_ids(2, 2),
                         k_positions=posenc.axial_grid_ids(2, 2))
    with pytest.raises(ValueError, match="disagrees with the AxialRope's layout"):
        posenc.attention(q, q, q, rope=ax, rope_layout="interleaved",
                         q_positions=posenc.axial_grid_ids(2, 2),
                         k_positions=posenc.axial_grid_ids(2, 2))
    with pytest.raises(ValueError, match="multiple of 4"):
        posenc.axial_rope_2d(18)
    with pytest.raises(TypeError, match="rope must be a posenc.RopeConfig, a posenc.AxialRope"):
        posenc.attention(q, q, q, rope="pixtral")


# --- posenc attend --axial-rope: the CLI's call is posenc.attention's, bit for bit ------------

@pytest.mark.parametrize("argv,make", [
    (["--axial-rope", "2d", "--theta", "100"],
     lambda D: posenc.axial_rope_2d(D, theta=100.0)),
    (["--axial-rope", "2d", "--rope-layout", "interleaved"],
     lambda D: posenc.axial_rope_2d(D, layout="interleaved")),
    (["--axial-rope", "nd", "--axes-dim", "4,6,6", "--theta", "1000"],
     lambda D: posenc.axial_rope_nd([4, 6, 6], theta=[1000.0])),
])
def test_cli_axial_rope_equals_python(cli, tmp_path, rng, argv, make):
    D = 16
    ids = posenc.axial_grid_ids(3, 4, frame=1)
    n = ids.shape[1]
    q = rng.standard_normal((n, 4, D)).astype(np.float32)
    k = rng.standard_normal((n, 2, D)).astype(np.float32)
    v = rng.standard_normal((n, 2, D)).astype(np.float32)
    for name, x in (("q", q), ("k", k), ("v", v), ("ids", ids)):
        np.save(tmp_path / f"{name}.npy", x)
    r = subprocess.run([str(cli), "attend", "--q", str(tmp_path / "q.npy"), "--k",
                        str(tmp_path / "k.npy"), "--v", str(tmp_path / "v.npy"), "--q-positions",
                        str(tmp_path / "ids.npy"), "--k-positions", str(tmp_path / "ids.npy"),
                        "--out", str(tmp_path / "o.npy")] + argv, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = posenc.attention(q, k, v, rope=make(D), q_positions=ids, k_positions=ids)
    assert np.array_equal(np.load(tmp_path / "o.npy"), want)


@pytest.mark.parametrize("argv,message", [
    (["--axial-rope", "3d"], "--axial-rope must be 2d or nd, got '3d'"),
    (["--axial-rope", "nd"], "--axial-rope nd needs --axes-dim"),
    (["--axial-rope", "nd", "--axes-dim", "4,4"], "--axes-dim must sum to the head dim D = 16"),
    (["--axial-rope", "2d", "--rope"], "--axial-rope and --rope exclude each other"),
    (["--axes-dim", "8,8"], "--axes-dim needs --axial-rope nd"),
    (["--axial-rope", "2d", "--angle", "hf_f32"], "--angle must be exact or f32"),
])
def test_cli_axial_rope_errors(cli, tmp_path, argv, message):
    ids = posenc.axial_grid_ids(2, 2)
    x = np.zeros((4, 2, 16), np.float32)
    for name, a in (("x", x), ("ids", ids)):
        np.save(tmp_path / f"{name}.npy", a)
    x_path, ids_path = str(tmp_path / "x.npy"), str(tmp_path / "ids.npy")
    r = subprocess.run([str(cli), "attend", "--q", x_path, "--k", x_path, "--v", x_path,
                        "--q-positions", ids_path, "--k-positions", ids_path,
                        "--out", str(tmp_path / "o.npy")] + argv, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "o.npy").exists()
