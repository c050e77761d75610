"""Placeholders for the parts of transformers a modeling file imports but the golden run
never executes: model base classes and loading (modeling_utils, generation), caches, mask
builders, hub kernels, output capture, processors, vision helpers, weight init.

With these, `models/<family>/modeling_<family>.py` is imported unchanged and its rotary
embedding class, apply_rotary_pos_emb, repeat_kv, eager_attention_forward, attention classes
and get_rope_index run as written. Classes that derive from a placeholder (PreTrainedModel,
GenerationMixin, GradientCheckpointingLayer) can be defined but not used; the golden script
builds attention masks itself and calls the attention modules with them.
"""

import _stubs

SCAFFOLD = [
    "modeling_utils", "generation", "cache_utils", "masking_utils", "integrations",
    "modeling_layers", "processing_utils", "utils.output_capturing",
    "vision_utils", "initialization", "modeling_flash_attention_utils",
]


def _identity_decorator_factory(*args, **kwargs):
    return lambda obj: obj


def _identity_class_decorator(experts_class=None, **kwargs):
    """use_experts_implementation: used bare (@use_experts_implementation, the class itself
    back) or with keywords (a decorator that gives the class back)."""
    if experts_class is not None:
        return experts_class
    return lambda obj: obj


class _AttentionFunctions:
    """ALL_ATTENTION_FUNCTIONS: the eager path only (config._attn_implementation "eager")."""

    def get_interface(self, name, default):
        if name not in (None, "eager"):
            raise NotImplementedError(f"attention implementation {name!r}: only eager is available")
        return default

    def __getitem__(self, name):
        # transformers' registry holds the kernels (sdpa, flash, flex), not eager: a lookup is a
        # code path that needs one of them
        raise NotImplementedError(f"ALL_ATTENTION_FUNCTIONS[{name!r}]: the registry of attention "
                                  f"kernels (sdpa, flash, flex; no eager entry in transformers "
                                  f"either) is empty here, only eager is available")

    def __contains__(self, name):
        return False


def _unused_base(name, base=object):
    """A base class for model classes that are defined but never built here."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"{name} is a placeholder in the golden run")

    return type(name, (base,), {"__init__": __init__})


def install(package="transformers"):
    from torch import nn

    for name in SCAFFOLD:
        _stubs.placeholder_module(f"{package}.{name}")
    _stubs.placeholder_module(
        f"{package}.integrations",
        use_kernel_forward_from_hub=_identity_decorator_factory,
        use_kernelized_func=_identity_decorator_factory,
        use_experts_implementation=_identity_class_decorator,
    )
    _stubs.placeholder_module(f"{package}.modeling_utils", ALL_ATTENTION_FUNCTIONS=_AttentionFunctions(),
                              PreTrainedModel=_unused_base("PreTrainedModel", nn.Module))
    _stubs.placeholder_module(f"{package}.generation", GenerationMixin=_unused_base("GenerationMixin"))
    _stubs.placeholder_module(f"{package}.modeling_layers",
                              GradientCheckpointingLayer=_unused_base("GradientCheckpointingLayer", nn.Module))
    return [f"{package}.{n}" for n in SCAFFOLD]
