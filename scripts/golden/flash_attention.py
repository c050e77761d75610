#!/usr/bin/python3
"""Golden values from FlashAttention's rotary reference, for tests/python/test_flash_attention.py.

    /usr/bin/python3 scripts/golden/flash_attention.py --flash-attention /path/to/flash-attention \
        --commit 0251105a2fb19d2957484b7f023cd8c115286ced

runs `apply_rotary_emb_torch` from the checkout's flash_attn/layers/rotary.py, unchanged, on
small inputs drawn here, and writes inputs, outputs and the gradient autograd takes through
it (x, cos, sin, out, grad_out, grad_x as .npy) with manifest.json into
tests/golden/flash_attention/ (or --out). Not run by CI: it needs a FlashAttention checkout.

Only the pure-PyTorch reference runs. The checkout's flash_attn/__init__.py (which loads the
CUDA extension) and ops/triton/rotary.py (Triton) are not imported: the package and the
module rotary.py imports apply_rotary from are registered as empty modules, and einops (not
packaged for Debian) comes from scripts/golden/shims/einops. Nothing from posenc is imported.

The reference is applied as FlashAttention's tests/test_rotary.py applies it: token t of
sequence b takes row seqlen_offsets[b] + t of the cos/sin tables (rows gathered here, shared
(T, R/2) for an int offset, (B, T, R/2) per sequence otherwise); a cu_seqlens case runs it on
each sequence of the packed tokens.
"""

import argparse
import hashlib
import importlib
import json
import os
import pathlib
import subprocess
import sys
import types

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
UPSTREAM = "https://github.com/Dao-AILab/flash-attention"
THETA = 10000.0
SEED = 20260703

# name, (B, T) or cu_seqlens, H, D, rotary_dim, interleaved, seqlen_offsets (int or per sequence)
CASES = [
    ("half_full_off0", (2, 5), 3, 16, 16, False, 0),
    ("interleaved_frac05_off3", (2, 5), 3, 16, 8, True, 3),
    ("half_frac05_offb", (2, 5), 3, 20, 10, False, [0, 4]),
    ("interleaved_full_offb", (2, 5), 3, 16, 16, True, [2, 0]),
    ("half_d128_off7", (1, 4), 2, 128, 128, False, 7),
    ("varlen_half_full_offb", [0, 3, 7, 12], 2, 16, 16, False, [0, 1, 5]),
    ("varlen_interleaved_frac05_off2", [0, 4, 5, 11], 2, 16, 8, True, 2),
]


def load_reference(checkout):
    """flash_attn.layers.rotary from the checkout, without the CUDA and Triton modules."""
    pkg = pathlib.Path(checkout).resolve() / "flash_attn"
    source = pkg / "layers" / "rotary.py"
    if not source.is_file():
        sys.exit(f"--flash-attention must be a FlashAttention checkout: {source} not found")
    sys.path.insert(0, str(HERE / "shims"))  # einops

    def apply_rotary(*args, **kwargs):
        raise RuntimeError("the golden run uses apply_rotary_emb_torch only (no Triton kernel)")

    packages = (("flash_attn", pkg), ("flash_attn.ops", None), ("flash_attn.ops.triton", None))
    for name, path in packages:
        module = types.ModuleType(name)
        module.__path__ = [str(path)] if path else []
        sys.modules[name] = module
    triton_rotary = types.ModuleType("flash_attn.ops.triton.rotary")
    triton_rotary.apply_rotary = apply_rotary
    sys.modules["flash_attn.ops.triton.rotary"] = triton_rotary
    rotary = importlib.import_module("flash_attn.layers.rotary")
    if pathlib.Path(rotary.__file__).resolve() != source:
        sys.exit(f"imported {rotary.__file__}, expected {source}")
    return rotary, source


def tables(rows, rotary_dim, dtype):
    """cos, sin (rows, R/2): angle p * THETA^(-2i/R) in float64, then rounded to dtype."""
    inv_freq = THETA ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    angle = np.arange(rows, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def run_case(torch, reference, case, dtype, rng):
    name, shape, H, D, R, interleaved, offsets = case
    varlen = isinstance(shape, list)
    if varlen:
        cu = shape
        lengths = [e - s for s, e in zip(cu[:-1], cu[1:])]
        x_shape = (cu[-1], H, D)
    else:
        B, T = shape
        lengths = [T] * B
        x_shape = (B, T, H, D)
    per_seq = offsets if isinstance(offsets, list) else [offsets] * len(lengths)
    if len(per_seq) != len(lengths):
        raise ValueError(f"{name}: seqlen_offsets must have one entry per sequence")
    rows = max(o + n for o, n in zip(per_seq, lengths)) + 2
    cos, sin = tables(rows, R, dtype)
    x = rng.standard_normal(x_shape).astype(dtype)
    grad_out = rng.standard_normal(x_shape).astype(dtype)

    xt = torch.from_numpy(x.copy()).requires_grad_()
    ct, st = torch.from_numpy(cos), torch.from_numpy(sin)
    f = reference.apply_rotary_emb_torch
    if varlen:
        pieces = []
        for b, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
            o = per_seq[b]
            pieces.append(f(xt[s:e][None], ct[o : o + e - s], st[o : o + e - s], interleaved)[0])
        out = torch.cat(pieces, dim=0)
    elif isinstance(offsets, list):
        idx = torch.tensor(offsets)[:, None] + torch.arange(T)[None, :]  # (B, T) rows
        out = f(xt, ct[idx], st[idx], interleaved)
    else:
        out = f(xt, ct[offsets : offsets + T], st[offsets : offsets + T], interleaved)
    out.backward(torch.from_numpy(grad_out.copy()))
    arrays = {
        "x": x,
        "cos": cos,
        "sin": sin,
        "out": out.detach().numpy(),
        "grad_out": grad_out,
        "grad_x": xt.grad.numpy(),
    }
    for key, a in arrays.items():
        if a.dtype != dtype:
            raise TypeError(f"{name} {key}: reference returned {a.dtype}, expected {dtype}")
    entry = {
        "name": f"{name}_{np.dtype(dtype).name}",
        "dtype": np.dtype(dtype).name,
        "interleaved": interleaved,
        "rotary_dim": R,
        "head_dim": D,
        "seqlen_offsets": offsets,
        "cu_seqlens": cu if varlen else None,
    }
    return entry, arrays


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flash-attention", required=True, help="path to a FlashAttention checkout")
    ap.add_argument("--commit", help="the checkout's commit (default: git rev-parse HEAD there)")
    ap.add_argument("--out", default=str(ROOT / "tests" / "golden" / "flash_attention"))
    args = ap.parse_args()

    import torch

    commit = args.commit
    if commit is None:
        try:
            commit = subprocess.run(
                ["git", "-C", args.flash_attention, "rev-parse", "HEAD"],
                check=True, capture_output=True, text=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            sys.exit("--commit is required when --flash-attention is not a git checkout")
    reference, source = load_reference(args.flash_attention)
    torch.set_num_threads(1)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    cases = []
    for case in CASES:
        for dtype in (np.float32, np.float64):
            entry, arrays = run_case(torch, reference, case, dtype, rng)
            entry["files"] = {}
            for key, a in arrays.items():
                fname = f"{entry['name']}.{key}.npy"
                np.save(out_dir / fname, np.ascontiguousarray(a))
                entry["files"][key] = fname
            cases.append(entry)
    manifest = {
        "upstream": {
            "repository": UPSTREAM,
            "commit": commit,
            "file": "flash_attn/layers/rotary.py",
            "file_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
            "function": "apply_rotary_emb_torch(x, cos, sin, interleaved)",
        },
        "torch": torch.__version__,
        "numpy": np.__version__,
        "command": (
            "/usr/bin/python3 scripts/golden/flash_attention.py --flash-attention "
            f"<checkout> --commit {commit}"
        ),
        "inputs": (
            f"x, grad_out: numpy default_rng({SEED}) standard normal, drawn case by case in "
            "this order; cos, sin: (rows, R/2) tables of angle p * 10000^(-2i/R) (p = 0, 1, ...) "
            "in float64, rounded to the case's dtype"
        ),
        "files": {
            "x": "input, (B, T, H, D), or (total, H, D) with cu_seqlens",
            "cos": "(rows, rotary_dim / 2) table; token t of sequence b takes row "
                   "seqlen_offsets[b] + t",
            "sin": "as cos",
            "out": "apply_rotary_emb_torch(x, cos rows, sin rows, interleaved), the case's dtype",
            "grad_out": "the gradient passed to out.backward",
            "grad_x": "x.grad after out.backward(grad_out), autograd through the reference",
        },
        "cases": cases,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(f.stat().st_size for f in out_dir.iterdir())
    print(f"wrote {len(cases)} cases, {total} bytes, to {os.path.relpath(out_dir, ROOT)}")


if __name__ == "__main__":
    main()
