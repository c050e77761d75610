# Type stubs of the posenc package (PEP 561; python/posenc/py.typed marks the package typed).
# The runtime is python/posenc/__init__.py over the pybind11 module posenc._posenc
# (python/src/*.cpp); each string option is a Literal of the values the library's parser takes
# (aliases included), so a misspelt option is a type error before it is a ValueError.
# The keywords of the schemes reached by name come from the
# library's scheme declarations: each marker line "# posenc: the keywords of the schemes reached
# by name" below is replaced by them at build time (scripts/gen-stubs, run by
# python/CMakeLists.txt), and tests/python/test_typing.py checks the built stubs against them.
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .compare import CompareResult as CompareResult
from .compare import compare as compare

__all__ = [
    "RopeConfig",
    "rope_config",
    "rope_cos_sin",
    "apply_rope",
    "hf_layer_plan",
    "hf_dca",
    "schemes",
    "mrope_apply",
    "AxialRope",
    "axial_rope_2d",
    "axial_rope_nd",
    "axial_grid_ids",
    "axial_apply",
    "positions_mrope",
    "sinusoidal_table",
    "LearnedTable",
    "alibi_slopes",
    "alibi_bias",
    "t5_buckets",
    "t5_bias",
    "attention",
    "attention_backward",
    "KVCache",
    "compare",
    "CompareResult",
    "set_num_threads",
    "num_threads",
    "bf16_products_native",
]

# RoPE pair layout (rope_layout_from_name): NeoX / HF rotate_half, or GPT-J.
_Layout = Literal["half", "interleaved"]
# Angle pipeline (rope_angle_from_name); "compat_f32" is the former name of "f32".
_Angle = Literal["exact", "f32", "compat_f32", "hf_f32", "ggml_f32"]
# HF rope_type (rope_type_from_name); "su" is an old name of "longrope".
_RopeScaling = Literal[
    "default", "linear", "dynamic", "yarn", "longrope", "su", "llama3", "proportional"
]
# RopeConfig.scaling: the canonical names (rope_type_name).
_RopeScalingName = Literal[
    "default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"
]
_AlibiConvention = Literal["press", "mpt", "geometric"]
# M-RoPE position rule (mrope_rule_from_name).
_MropeRule = Literal["transformers_v5", "v5", "transformers_v4", "v4"]
_SinLayout = Literal["interleaved", "halves"]
_SinDenominator = Literal["width", "half-minus-one"]
# Half-precision K/V storage; None = keys and values in the float dtype.
_KVDtype = Literal["f16", "bf16"]
_Products = Literal["f32", "bf16"]
# A dtype argument that selects float32 or float64 output. NumPy's stubs make np.float32 a
# subtype of np.float64 (floating[_32Bit] <: floating[_64Bit]), so mypy sees the float32
# overload overlap the float64 one; it is listed first and its overlap note silenced.
_F32 = type[np.float32] | np.dtype[np.float32] | Literal["float32", "f4"]
_F64 = type[np.float64] | np.dtype[np.float64] | type[float] | Literal["float64", "f8"]
_FloatDType = _F32 | _F64
_Path = str | os.PathLike[str]
# apply_rope and mrope_apply return the dtype of x.
_Float = TypeVar("_Float", bound=np.floating[Any])

class _HasToDict(Protocol):
    def to_dict(self) -> Mapping[str, Any]: ...

# A config.json path, its dict, or a transformers PretrainedConfig (anything with to_dict()).
_HFConfig = _Path | Mapping[str, Any] | _HasToDict

class RopeConfig:
    def __init__(
        self,
        *,
        head_dim: int,
        rotary_dim: int | None = None,
        theta: float = 10000.0,
        scaling: _RopeScaling = "default",
        factor: float | None = None,
        max_position_embeddings: int | None = None,
        original_max_position_embeddings: int | None = None,
        beta_fast: float | None = None,
        beta_slow: float | None = None,
        truncate: bool | None = None,
        attention_factor: float | None = None,
        mscale: float | None = None,
        mscale_all_dim: float | None = None,
        short_factor: Sequence[float] | None = None,
        long_factor: Sequence[float] | None = None,
        low_freq_factor: float | None = None,
        high_freq_factor: float | None = None,
    ) -> None: ...
    @staticmethod
    def from_hf(path_or_dict: _HFConfig, layer_type: str | None = None) -> RopeConfig: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def rotary_dim(self) -> int: ...
    @property
    def theta(self) -> float: ...
    @property
    def scaling(self) -> _RopeScalingName: ...
    @property
    def factor(self) -> float: ...
    @property
    def max_position_embeddings(self) -> int: ...
    @property
    def original_max_position_embeddings(self) -> int: ...
    @property
    def alpha(self) -> float: ...
    @property
    def llama_4_scaling_beta(self) -> float: ...
    @property
    def llama_4_scaling_floor(self) -> int: ...
    @property
    def rotated_pairs(self) -> int: ...
    @property
    def mrope_section(self) -> list[int] | None: ...
    @property
    def mrope_interleaved(self) -> bool: ...
    @property
    def attention_factor(self) -> float: ...
    def frequencies(self, seq_len: int | None = None) -> tuple[NDArray[np.float64], float]: ...
    def hf_inv_freq(self, seq_len: int | None = None) -> NDArray[np.float32]: ...
    def inv_freq(self, seq_len: int | None = None) -> NDArray[np.float64]: ...

def rope_config(
    *,
    head_dim: int,
    rotary_dim: int | None = None,
    theta: float = 10000.0,
    scaling: _RopeScaling = "default",
    factor: float | None = None,
    max_position_embeddings: int | None = None,
    original_max_position_embeddings: int | None = None,
    beta_fast: float | None = None,
    beta_slow: float | None = None,
    truncate: bool | None = None,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    short_factor: Sequence[float] | None = None,
    long_factor: Sequence[float] | None = None,
    low_freq_factor: float | None = None,
    high_freq_factor: float | None = None,
) -> RopeConfig: ...
@overload
def rope_cos_sin(  # type: ignore[misc]
    cfg: RopeConfig,
    positions: ArrayLike,
    angle: _Angle = "exact",
    *,
    dtype: _F32,
    seq_len: int | None = None,
    hf_inv_freq: ArrayLike | None = None,
) -> tuple[NDArray[np.float32], NDArray[np.float32]]: ...
@overload
def rope_cos_sin(  # type: ignore[misc]
    cfg: RopeConfig,
    positions: ArrayLike,
    angle: _Angle,
    dtype: _F32,
    seq_len: int | None = None,
    hf_inv_freq: ArrayLike | None = None,
) -> tuple[NDArray[np.float32], NDArray[np.float32]]: ...
@overload
def rope_cos_sin(
    cfg: RopeConfig,
    positions: ArrayLike,
    angle: _Angle = "exact",
    dtype: _F64 = ...,
    seq_len: int | None = None,
    hf_inv_freq: ArrayLike | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...
@overload
def apply_rope(
    x: NDArray[_Float],
    positions: ArrayLike | None = None,
    *,
    cfg: RopeConfig,
    layout: _Layout = "half",
    angle: _Angle = "exact",
    seqlen_offsets: ArrayLike = 0,
    cu_seqlens: ArrayLike | None = None,
    inplace: bool = False,
    inverse: bool = False,
    seq_len: int | None = None,
    hf_inv_freq: ArrayLike | None = None,
) -> NDArray[_Float]: ...
@overload
def apply_rope(
    x: ArrayLike,
    positions: ArrayLike | None = None,
    *,
    cfg: RopeConfig,
    layout: _Layout = "half",
    angle: _Angle = "exact",
    seqlen_offsets: ArrayLike = 0,
    cu_seqlens: ArrayLike | None = None,
    inplace: bool = False,
    inverse: bool = False,
    seq_len: int | None = None,
    hf_inv_freq: ArrayLike | None = None,
) -> NDArray[Any]: ...
def hf_layer_plan(path_or_dict: _HFConfig) -> dict[str, Any]: ...
def hf_dca(path_or_dict: _HFConfig) -> dict[str, Any]: ...
def schemes() -> list[dict[str, Any]]: ...
@overload
def mrope_apply(
    x: NDArray[_Float],
    positions: ArrayLike,
    *,
    cfg: RopeConfig,
    layout: _Layout = "half",
    angle: _Angle = "exact",
    inplace: bool = False,
    inverse: bool = False,
    seq_len: int | None = None,
) -> NDArray[_Float]: ...
@overload
def mrope_apply(
    x: ArrayLike,
    positions: ArrayLike,
    *,
    cfg: RopeConfig,
    layout: _Layout = "half",
    angle: _Angle = "exact",
    inplace: bool = False,
    inverse: bool = False,
    seq_len: int | None = None,
) -> NDArray[Any]: ...
class AxialRope:
    @property
    def inv_freq(self) -> NDArray[np.float64]: ...
    @property
    def section(self) -> tuple[int, int, int]: ...
    @property
    def layout(self) -> str: ...
    @property
    def axes(self) -> int: ...
    @property
    def head_dim(self) -> int: ...

def axial_rope_2d(head_dim: int, *, theta: float = 10000.0, layout: _Layout = "half") -> AxialRope: ...
def axial_rope_nd(axes_dim: Sequence[int], *, theta: Sequence[float] = ...) -> AxialRope: ...
def axial_grid_ids(rows: int, cols: int, *, frame: int = 0) -> NDArray[np.int64]: ...
def axial_apply(
    x: ArrayLike, positions: ArrayLike, *, axial: AxialRope, inverse: bool = False
) -> NDArray[Any]: ...
def positions_mrope(
    segments: Sequence[Sequence[int]], start: int = 0, rule: _MropeRule = "transformers_v5"
) -> NDArray[np.int64]: ...
@overload
def sinusoidal_table(  # type: ignore[misc]
    positions: int | ArrayLike,
    *,
    width: int,
    base: float = 10000.0,
    layout: _SinLayout = "interleaved",
    denominator: _SinDenominator = "width",
    dtype: _F32,
) -> NDArray[np.float32]: ...
@overload
def sinusoidal_table(
    positions: int | ArrayLike,
    *,
    width: int,
    base: float = 10000.0,
    layout: _SinLayout = "interleaved",
    denominator: _SinDenominator = "width",
    dtype: _F64 = ...,
) -> NDArray[np.float64]: ...

class LearnedTable:
    weights: NDArray[np.float32]
    def __init__(self, weights: ArrayLike) -> None: ...
    @classmethod
    def load(cls, path: _Path) -> LearnedTable: ...
    def save(self, path: _Path) -> None: ...
    def lookup(self, positions: ArrayLike) -> NDArray[np.float32]: ...

def alibi_slopes(
    n_heads: int, *, max_bias: float = 8.0, convention: _AlibiConvention = "press"
) -> NDArray[np.float64]: ...
@overload
def alibi_bias(  # type: ignore[misc]
    slopes: ArrayLike,
    q_positions: int | ArrayLike,
    k_positions: int | ArrayLike,
    *,
    causal: bool = True,
    dtype: _F32 = ...,
) -> NDArray[np.float32]: ...
@overload
def alibi_bias(
    slopes: ArrayLike,
    q_positions: int | ArrayLike,
    k_positions: int | ArrayLike,
    *,
    causal: bool = True,
    dtype: _F64,
) -> NDArray[np.float64]: ...
def t5_buckets(
    offsets: ArrayLike,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> NDArray[np.int64]: ...
def t5_bias(
    table: ArrayLike,
    q_positions: int | ArrayLike,
    k_positions: int | ArrayLike,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
) -> NDArray[np.float32]: ...
@overload
def attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    causal: bool = False,
    scale: float | None = None,
    rope: RopeConfig | AxialRope | None = None,
    rope_layout: _Layout = "half",
    rope_angle: _Angle = "exact",
    rope_seq_len: int | None = None,
    keys_rotated: bool = False,
    q_positions: ArrayLike | None = None,
    k_positions: ArrayLike | None = None,
    key_padding: ArrayLike | None = None,
    cu_seqlens: ArrayLike | None = None,
    window: int | None = None,
    return_lse: Literal[False] = False,
    kv_dtype: _KVDtype | None = None,
    products: _Products = "f32",
    sinks: ArrayLike | None = None,
    # posenc: the keywords of the schemes reached by name
) -> NDArray[Any]: ...
@overload
def attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    causal: bool = False,
    scale: float | None = None,
    rope: RopeConfig | AxialRope | None = None,
    rope_layout: _Layout = "half",
    rope_angle: _Angle = "exact",
    rope_seq_len: int | None = None,
    keys_rotated: bool = False,
    q_positions: ArrayLike | None = None,
    k_positions: ArrayLike | None = None,
    key_padding: ArrayLike | None = None,
    cu_seqlens: ArrayLike | None = None,
    window: int | None = None,
    return_lse: Literal[True],
    kv_dtype: _KVDtype | None = None,
    products: _Products = "f32",
    sinks: ArrayLike | None = None,
    # posenc: the keywords of the schemes reached by name
) -> tuple[NDArray[Any], NDArray[Any]]: ...
@overload
def attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    causal: bool = False,
    scale: float | None = None,
    rope: RopeConfig | AxialRope | None = None,
    rope_layout: _Layout = "half",
    rope_angle: _Angle = "exact",
    rope_seq_len: int | None = None,
    keys_rotated: bool = False,
    q_positions: ArrayLike | None = None,
    k_positions: ArrayLike | None = None,
    key_padding: ArrayLike | None = None,
    cu_seqlens: ArrayLike | None = None,
    window: int | None = None,
    return_lse: bool = False,
    kv_dtype: _KVDtype | None = None,
    products: _Products = "f32",
    sinks: ArrayLike | None = None,
    # posenc: the keywords of the schemes reached by name
) -> NDArray[Any] | tuple[NDArray[Any], NDArray[Any]]: ...
def attention_backward(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    out: ArrayLike,
    lse: ArrayLike,
    dout: ArrayLike,
    *,
    causal: bool = False,
    scale: float | None = None,
    rope: RopeConfig | AxialRope | None = None,
    rope_layout: _Layout = "half",
    rope_angle: _Angle = "exact",
    rope_seq_len: int | None = None,
    keys_rotated: bool = False,
    q_positions: ArrayLike | None = None,
    k_positions: ArrayLike | None = None,
    key_padding: ArrayLike | None = None,
    cu_seqlens: ArrayLike | None = None,
    window: int | None = None,
    param_grads: bool = True,
    sinks: ArrayLike | None = None,
    # posenc: the keywords of the schemes reached by name
) -> dict[str, NDArray[Any]]: ...

class KVCache:
    rope: RopeConfig | None
    def __init__(
        self,
        n_kv_heads: int,
        head_dim: int,
        *,
        capacity: int = 4096,
        dtype: _FloatDType = ...,
        kv_dtype: _KVDtype | None = None,
        rope: RopeConfig | None = None,
        rope_layout: _Layout = "half",
        rope_angle: _Angle = "exact",
        rope_seq_len: int | None = None,
        start_position: int = 0,
        shift_mode: Literal["rerotate", "exact"] = "rerotate",
        # posenc: the keywords of the q/k transforms reached by name
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def dtype(self) -> np.dtype[np.float32] | np.dtype[np.float64]: ...
    @property
    def kv_dtype(self) -> Literal["f32", "f16", "bf16"]: ...
    @property
    def keys_blocked(self) -> bool: ...
    @property
    def head_capacity(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def next_position(self) -> int: ...
    @property
    def keys(self) -> NDArray[Any]: ...
    @property
    def values(self) -> NDArray[Any]: ...
    @property
    def positions(self) -> NDArray[np.int64]: ...
    @property
    def positions3(self) -> NDArray[np.int64] | None: ...
    def stored_keys(self) -> NDArray[Any]: ...
    def stored_values(self) -> NDArray[Any]: ...
    def key_index(self, j: int, hk: int, e: int) -> int: ...
    def append(
        self, k: ArrayLike, v: ArrayLike, positions: ArrayLike | None = None
    ) -> NDArray[np.int64]: ...
    def clear(self) -> None: ...
    @property
    def shift_mode(self) -> Literal["rerotate", "exact"]: ...
    def remove(self, p0: int, p1: int | None = None) -> int: ...
    def shift(self, p0: int, p1: int | None, delta: int) -> int: ...
    def divide(self, p0: int, p1: int | None, d: int) -> None: ...
    def evict_streaming(self, sink_tokens: int, window: int) -> int: ...
    @overload
    def attend(
        self,
        q: ArrayLike,
        *,
        q_positions: ArrayLike | None = None,
        causal: bool = True,
        scale: float | None = None,
        key_padding: ArrayLike | None = None,
        cu_seqlens: ArrayLike | None = None,
        window: int | None = None,
        return_lse: Literal[False] = False,
    sinks: ArrayLike | None = None,
        # posenc: the keywords of the schemes reached by name
    ) -> NDArray[Any]: ...
    @overload
    def attend(
        self,
        q: ArrayLike,
        *,
        q_positions: ArrayLike | None = None,
        causal: bool = True,
        scale: float | None = None,
        key_padding: ArrayLike | None = None,
        cu_seqlens: ArrayLike | None = None,
        window: int | None = None,
        return_lse: Literal[True],
    sinks: ArrayLike | None = None,
        # posenc: the keywords of the schemes reached by name
    ) -> tuple[NDArray[Any], NDArray[Any]]: ...
    @overload
    def attend(
        self,
        q: ArrayLike,
        *,
        q_positions: ArrayLike | None = None,
        causal: bool = True,
        scale: float | None = None,
        key_padding: ArrayLike | None = None,
        cu_seqlens: ArrayLike | None = None,
        window: int | None = None,
        return_lse: bool = False,
    sinks: ArrayLike | None = None,
        # posenc: the keywords of the schemes reached by name
    ) -> NDArray[Any] | tuple[NDArray[Any], NDArray[Any]]: ...

def bf16_products_native() -> bool:
    """True when this CPU runs attention(products="bf16") with vdpbf16ps (AVX512_BF16) on the
    dispatched AVX-512 target; False: those calls run float32 products (the same bound)."""
    ...

def set_num_threads(n: int) -> None: ...
def num_threads() -> int: ...
