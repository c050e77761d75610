# Type stubs of posenc.compare (runtime: python/posenc/compare.py).
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import RopeConfig, _Angle, _Layout

# The angle pipelines a result can name (rope_angle_name: canonical names).
_Pipeline = Literal["exact", "f32", "hf_f32", "ggml_f32"]

@dataclass
class CompareResult:
    ok: bool
    max_error: float
    max_ratio: float
    tolerance: float
    rtol: float
    atol: float
    worst_index: tuple[int, ...]
    worst_position: int | None = None
    worst_pair: int | None = None
    ratio_by_position: NDArray[np.float64] | None = None
    ratio_by_pair: NDArray[np.float64] | None = None
    hint: str | None = None
    angle_rtol: float = 0.0
    verdict: str = ""
    pipeline: _Pipeline | None = None
    pipeline_max_error: float | None = None
    pipeline_max_ratio: float | None = None
    pipeline_identical: float | None = None
    pipelines: dict[str, float] = ...
    hints: list[str] = ...
    text: str = ""
    def __bool__(self) -> bool: ...

# actual, expected, x: NumPy arrays or CPU torch tensors (a tensor is array-like: __array__).
def compare(
    actual: ArrayLike,
    expected: ArrayLike | None = None,
    *,
    rtol: float | None = None,
    atol: float = 0.0,
    x: ArrayLike | None = None,
    positions: ArrayLike | None = None,
    cfg: RopeConfig | None = None,
    layout: _Layout = "half",
    angle: _Angle = "exact",
    seq_len: int | None = None,
) -> CompareResult: ...
