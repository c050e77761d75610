#!/usr/bin/env bash
# `pip install .` in a fresh virtual environment (ctest: pip_install).
#   pip_install_test.sh SOURCE_DIR [CMAKE_BUILD_DIR]
# Makes a venv with --system-site-packages (Debian's NumPy and PyTorch), runs
# `pip install --no-build-isolation --no-index SOURCE_DIR` offline with setuptools' staging in a
# temporary folder (POSENC_PIP_BUILD_DIR: nothing is written into the source tree). The module
# is compiled by CMake in a fresh temporary build folder, as a user's `pip install .` does
# (3-4 minutes on 2 cores); with CMAKE_BUILD_DIR (ctest passes its own release build folder) and
# POSENC_PIP_TEST_FRESH unset, setup.py builds the module target in that folder instead
# (POSENC_PIP_CMAKE_DIR), where it is already up to date, so that `make test` does not compile
# the library a third time. Then, from another directory, it imports posenc and posenc.torch,
# checks that they come from the venv's site-packages, and checks RoPE and causal attention
# (forward and dv) on tiny float64 inputs against NumPy formulas written here. Any failure of
# pip, the import or a check fails the test. Compile jobs: CMAKE_BUILD_PARALLEL_LEVEL (2 here).
set -euo pipefail
src=$(cd "$1" && pwd)
python=${POSENC_PYTHON:-/usr/bin/python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
# Offline and Debian's packages only: no pip configuration (find-links, extra indexes) applies.
unset "${!PIP_@}"
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1

"$python" -m venv --system-site-packages "$dir/venv" || fail "python -m venv"
start=$(date +%s)
if [[ -n "${2:-}" && -z "${POSENC_PIP_TEST_FRESH:-}" ]]; then
  export POSENC_PIP_CMAKE_DIR=$2
  echo "pip install: the module target built in $2 (POSENC_PIP_TEST_FRESH=1: a fresh build)"
fi
POSENC_PIP_BUILD_DIR="$dir/build" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$dir/venv/bin/pip" install --no-build-isolation --no-index --no-input "$src" ||
  fail "pip install --no-build-isolation --no-index $src"
echo "pip install: $(($(date +%s) - start)) s"

mkdir "$dir/elsewhere"
cd "$dir/elsewhere"
"$dir/venv/bin/python" - "$dir/venv" <<'PY' || fail "import or computation in the venv"
import os
import sys
import sysconfig

import numpy as np

import posenc
import posenc.torch
import torch

venv = os.path.realpath(sys.argv[1])
site = os.path.realpath(sysconfig.get_paths()["platlib"])
assert site.startswith(venv + os.sep), f"platlib {site} is not in the venv {venv}"
for mod in (posenc, posenc._posenc, posenc.torch):
    path = os.path.realpath(mod.__file__)
    assert path.startswith(site + os.sep), f"{mod.__name__} from {path}, not from {site}"

# RoPE, half layout (x_i paired with x_{i+D/2}), exact angles p * theta^(-2i/D).
# Tolerance: each output is x_i c - x_j s (or x_j c + x_i s) of |x| <= 1 with c, s correctly
# rounded or within an ulp: a few 2^-53; 1e-15 allows ~9 of them.
T, H, D, theta = 5, 2, 8, 10000.0
rng = np.random.default_rng(29)
x = rng.uniform(-1.0, 1.0, (T, H, D))
inv_freq = theta ** (-np.arange(0, D, 2) / D)  # (D/2,)
ang = np.arange(T)[:, None] * inv_freq[None, :]  # (T, D/2)
c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
a, b = x[..., : D // 2], x[..., D // 2 :]
want = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
cfg = posenc.rope_config(head_dim=D, theta=theta)
got = posenc.apply_rope(x, cfg=cfg)
err = np.abs(got - want).max()
assert err <= 1e-15, f"apply_rope differs from the NumPy formula by {err}"

# Causal attention through posenc.torch (autograd Function, backward in C++): out = P v with
# P = softmax(q k^T / sqrt(D)) over keys j <= i, per head; dv = P^T g for out.backward(g).
# Tolerance 2e-14: |q.k| / sqrt(D) <= sqrt(8) with an error of ~D ulps of it (2.5e-15), which
# the softmax carries as a relative error of twice that into P; out and dv are P-weighted sums
# of |v|, |g| <= 1: ~5e-15, with a factor 4 of margin.
q, k, v, g = (rng.uniform(-1.0, 1.0, (T, H, D)) for _ in range(4))
scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(D)
scores[:, np.triu(np.ones((T, T), bool), 1)] = -np.inf
p = np.exp(scores - scores.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)  # (H, T, S)
want_out = np.einsum("hts,shd->thd", p, v)
want_dv = np.einsum("hts,thd->shd", p, g)
tq, tk, tv = (torch.tensor(t, requires_grad=True) for t in (q, k, v))
out = posenc.torch.attention(tq, tk, tv, causal=True)
out.backward(torch.tensor(g))
err_out = np.abs(out.detach().numpy() - want_out).max()
err_dv = np.abs(tv.grad.numpy() - want_dv).max()
assert err_out <= 2e-14, f"posenc.torch.attention differs from the NumPy formula by {err_out}"
assert err_dv <= 2e-14, f"its dv differs from P^T g by {err_dv}"
print(f"posenc {posenc.__file__}: apply_rope err {err:.1e}, attention err {err_out:.1e}, "
      f"dv err {err_dv:.1e}")
PY
echo "pip_install: ok"
