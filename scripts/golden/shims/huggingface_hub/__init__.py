"""Shim of huggingface_hub for running transformers' config and RoPE code offline.

Only `huggingface_hub.dataclasses` (strict, as_validated_field) is implemented, because
transformers' config classes are built with it; every other name (downloads, HfApi, model
cards, errors) is a placeholder from `_stubs` and performs no I/O.
"""

import _stubs

from . import constants, dataclasses  # noqa: F401  (the two real submodules)


def __getattr__(name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    value = _stubs._placeholder(f"huggingface_hub.{name}")
    globals()[name] = value
    return value
