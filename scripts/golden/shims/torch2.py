"""The PyTorch 2 names that transformers' rotary and attention classes use, on Debian's torch
1.13 (each only where torch lacks it; nothing else of torch is changed).

- nn.Buffer(tensor, persistent=...): a tensor that, assigned to a Module attribute, is
  registered as a buffer (torch >= 2.5). Here: a marker subclass that Module.__setattr__
  turns into register_buffer(name, tensor, persistent); the values are the tensor's own.
- torch.compiler.is_compiling() (torch >= 2.1): False, as nothing is compiled here.
- torch.utils._pytree.register_pytree_node (torch >= 2.2; 1.13 has _register_pytree_node,
  the same registration without the serialisation keywords), for transformers' ModelOutput.
- torch.is_autocast_enabled(device_type): the device argument is new in torch 2.4; 1.13's
  function takes none. With a device: CPU autocast state for "cpu", else the CUDA one.
- nn.LayerNorm(..., bias=...) (torch >= 2.1): with bias=False the module has no bias
  parameter (bias is None, the normalisation adds nothing); otherwise 1.13's LayerNorm.
- nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True) (torch >= 2.4):
  x / sqrt(mean(x^2 over the normalized dims) + eps) * weight, eps None meaning
  torch.finfo(x.dtype).eps, as torch 2's documentation gives it.
"""

import inspect

import torch
from torch import nn


def install():
    done = []
    if not hasattr(nn, "Buffer"):

        class Buffer(torch.Tensor):
            def __new__(cls, data=None, *, persistent=True):
                if data is None:
                    data = torch.empty(0)
                t = torch.Tensor._make_subclass(cls, data, False)
                t._posenc_persistent = persistent
                return t

        original = nn.Module.__setattr__

        def __setattr__(self, name, value):
            if isinstance(value, Buffer):
                plain = value.as_subclass(torch.Tensor)
                if name in self._buffers:
                    self._buffers[name] = plain
                else:
                    self.register_buffer(name, plain, persistent=value._posenc_persistent)
                return
            original(self, name, value)

        nn.Buffer = Buffer
        nn.Module.__setattr__ = __setattr__
        done.append("nn.Buffer")
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:
        plain = torch.is_autocast_enabled

        def is_autocast_enabled(device_type=None):
            if device_type is None or device_type == "cuda":
                return plain()
            if device_type == "cpu":
                return torch.is_autocast_cpu_enabled()
            return False

        torch.is_autocast_enabled = is_autocast_enabled
        done.append("torch.is_autocast_enabled(device_type)")
    import torch.utils._pytree as pytree

    if not hasattr(pytree, "register_pytree_node"):

        def register_pytree_node(cls, flatten_fn, unflatten_fn, **kwargs):
            pytree._register_pytree_node(cls, flatten_fn, unflatten_fn)

        pytree.register_pytree_node = register_pytree_node
        pytree._dict_flatten_with_keys = None  # read for the keyword it ignores
        done.append("torch.utils._pytree.register_pytree_node")
    if not hasattr(torch, "compiler"):
        import types

        compiler = types.ModuleType("torch.compiler")
        compiler.is_compiling = lambda: False
        torch.compiler = compiler
        done.append("torch.compiler.is_compiling")
    if "bias" not in inspect.signature(nn.LayerNorm.__init__).parameters:
        plain_ln = nn.LayerNorm

        class LayerNorm(plain_ln):
            def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                         device=None, dtype=None):
                super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine,
                                 device=device, dtype=dtype)
                if not bias and self.elementwise_affine:
                    self.bias = None  # a registered parameter name: set to None, no parameter

        LayerNorm.__name__ = LayerNorm.__qualname__ = "LayerNorm"
        LayerNorm.__module__ = plain_ln.__module__
        nn.LayerNorm = LayerNorm
        done.append("nn.LayerNorm(bias=...)")
    if not hasattr(nn, "RMSNorm"):
        import numbers

        class RMSNorm(nn.Module):
            def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                         dtype=None):
                super().__init__()
                if isinstance(normalized_shape, numbers.Integral):
                    normalized_shape = (normalized_shape,)
                self.normalized_shape = tuple(normalized_shape)
                self.eps = eps
                self.elementwise_affine = elementwise_affine
                if elementwise_affine:
                    self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
                else:
                    self.register_parameter("weight", None)

            def forward(self, x):
                eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
                dims = tuple(range(-len(self.normalized_shape), 0))
                y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
                return y * self.weight if self.weight is not None else y

        nn.RMSNorm = RMSNorm
        done.append("nn.RMSNorm")
    return done


def report_version(version="2.5.0"):
    """Make importlib.metadata report torch `version` (transformers disables its PyTorch code
    below 2.5; the names it needs beyond 1.13 are supplied by install())."""
    import importlib.metadata as md
    import sys

    real = md.distribution("torch")

    class _Dist(md.Distribution):
        def read_text(self, filename):
            text = real.read_text(filename)
            if filename in ("METADATA", "PKG-INFO") and text is not None:
                lines = [f"Version: {version}" if l.startswith("Version:") else l
                         for l in text.splitlines()]
                return "\n".join(lines) + "\n"
            return text

        def locate_file(self, path):
            return real.locate_file(path)

    class _Finder:
        @staticmethod
        def find_spec(*args, **kwargs):
            return None

        @staticmethod
        def find_distributions(context=md.DistributionFinder.Context()):
            if context.name in (None, "torch"):
                return iter([_Dist()])
            return iter(())

    sys.meta_path.insert(0, _Finder)
    return real.version
