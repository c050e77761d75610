"""Placeholder modules for third-party packages that transformers imports at module level but
that the golden run never uses (hub downloads, HTTP, tokenizers, safetensors, progress bars).

Each listed module is served by an import hook; any name read from it is a `Placeholder`
class. A placeholder can be subclassed, used as a decorator (returns what it decorates),
called, or read for attributes; it never performs I/O. Calling one as a hub operation returns
another placeholder, so a code path that actually needed the hub would produce placeholders
instead of data: the golden script checks every value it records is a number or a string.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _PlaceholderMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        # Used as a bare decorator: @x -> the decorated object itself.
        if len(args) == 1 and not kwargs and (callable(args[0]) or isinstance(args[0], type)):
            return args[0]
        return _placeholder(f"{cls.__qualname__}()")

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


def _placeholder(name):
    # Error classes stay exceptions (transformers names them in except clauses); the others
    # are plain classes, so that a model class may list one beside nn.Module as a base.
    leaf = name.rsplit(".", 1)[-1]
    base = Exception if leaf.endswith(("Error", "Exception", "Warning")) else object
    return _PlaceholderMeta(name, (base,), {"__qualname__": name, "__module__": "_stubs"})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in sys.modules:
            return None
        if any(fullname == r or fullname.startswith(r + ".") for r in self.roots):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


_SUBMODULES = _StubFinder([])
sys.meta_path.append(_SUBMODULES)


def placeholder_module(name, **names):
    """A placeholder module registered as sys.modules[name], with `names` set for real."""
    mod = _StubModule(name)
    mod.__path__ = []
    for k, v in names.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    _SUBMODULES.roots.add(name)  # its submodules are placeholders too
    return mod


def install(roots):
    """Serve the top-level packages `roots` (and their submodules) as placeholder modules,
    after real modules (a real package found first on sys.path wins)."""
    missing = []
    for r in roots:
        try:
            __import__(r)
        except ImportError:
            missing.append(r)
    # huggingface_hub: the shim package holds only `dataclasses`; its other submodules
    # (utils, file_download, constants, ...) are placeholders.
    sys.meta_path.append(_StubFinder(missing + ["huggingface_hub"]))
    return missing
