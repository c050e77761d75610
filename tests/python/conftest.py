"""pytest set-up: posenc is imported from PYTHONPATH (build/release/python in `make test`)."""

import os
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py

import posenc  # noqa: E402


def _cli():
    env = os.environ.get("POSENC_BIN")
    if env:
        return pathlib.Path(env)
    # build/<preset>/python/posenc/__init__.py -> build/<preset>/posenc
    return pathlib.Path(posenc.__file__).resolve().parents[2] / "posenc"


@pytest.fixture
def cli():
    path = _cli()
    if not path.exists():
        pytest.fail(f"the posenc CLI is not built at {path} (set POSENC_BIN)")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)
