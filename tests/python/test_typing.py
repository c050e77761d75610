"""The typed Python API: the stubs (python/posenc/*.pyi, py.typed) against the runtime and the
scheme declarations, docstrings on every public name, and mypy --strict on the documentation's
Python examples and on a wrong call, which it must refuse."""

import ast
import inspect
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import posenc
import posenc.torch as pt

PKG = pathlib.Path(posenc.__file__).absolute().parent
ROOT = pathlib.Path(__file__).resolve().parents[2]
# The documents whose ```python blocks must pass mypy --strict.
DOCS = ["README.md", "docs/python.md"]


def _stub(name):
    path = PKG / name
    assert path.is_file(), f"{path} is missing (python/CMakeLists.txt copies the stubs)"
    return ast.parse(path.read_text(), filename=str(path))


def _defs(tree, cls=None):
    """{name: [FunctionDef, ...]} (overloads in order) of the module or of class `cls`."""
    body = tree.body
    if cls is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    out = {}
    for n in body:
        if isinstance(n, ast.FunctionDef):
            out.setdefault(n.name, []).append(n)
    return out


def _stub_all(tree):
    for n in tree.body:
        if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["__all__"]:
            return ast.literal_eval(n.value)
    raise AssertionError("the stub has no __all__")


def _names(tree):
    """Every name a stub defines or re-exports at module level."""
    out = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.ImportFrom):
            out.update(a.asname for a in n.names if a.asname == a.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def _params(fn):
    """[(name, kind, default AST or None)] of a stub FunctionDef; kind as inspect's."""
    a = fn.args
    pos = a.posonlyargs + a.args
    pos_defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = [(p.arg, "POSITIONAL_OR_KEYWORD", d) for p, d in zip(pos, pos_defaults)]
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL", None))
    out += [(p.arg, "KEYWORD_ONLY", d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, "VAR_KEYWORD", None))
    return out


INIT, TORCH, COMPARE = _stub("__init__.pyi"), _stub("torch.pyi"), _stub("compare.pyi")


def test_the_package_is_marked_typed():
    assert (PKG / "py.typed").is_file()


@pytest.mark.parametrize("mod,tree", [(posenc, INIT), (pt, TORCH)], ids=["posenc", "torch"])
def test_stubs_declare_every_public_name(mod, tree):
    assert _stub_all(tree) == mod.__all__
    missing = sorted(set(mod.__all__) - _names(tree))
    assert not missing, f"{mod.__name__}: no stub for {missing}"


# The cache's own keywords: KVCache.attend refuses them (the cache was built with them).
CACHE_OWNED = ["rope", "rope_layout", "rope_angle", "rope_seq_len", "keys_rotated", "k_positions",
               "kv_dtype"]
# A scheme whose switch is a RoPE config (RoPE, M-RoPE) is reached through the config's keywords
# (CACHE_OWNED's first five, checked in tests/python/test_schemes.py).
DECLARED = [(d["name"], p) for d in posenc.schemes() if d["attention_level"]
            and d["params"][0]["dtype"] != "RopeConfig" for p in d["params"]]
ATTENTION_STUBS = [
    ("posenc.attention", _defs(INIT)["attention"], ()),
    ("posenc.attention_backward", _defs(INIT)["attention_backward"], ()),
    ("posenc.torch.attention", _defs(TORCH)["attention"], ()),
    ("posenc.KVCache.attend", _defs(INIT, "KVCache")["attend"], CACHE_OWNED),
]


def _declared_default(p):
    """The declared default as a Python value, or (False, None) when it is computed from the call
    ("S", "not causal") or not given."""
    if p["dtype"] == "str":
        return True, p["default"]
    try:
        return True, ast.literal_eval(p["default"])
    except (ValueError, SyntaxError):
        return False, None


@pytest.mark.parametrize("name,overloads,owned", ATTENTION_STUBS,
                         ids=[s[0] for s in ATTENTION_STUBS])
def test_stub_keywords_follow_the_scheme_declarations(name, overloads, owned):
    # Every declared parameter of every attention-level scheme (the schemes reached by name
    # included: their keywords exist at run time only through the declarations) is a keyword
    # of each overload, with the declared default where that is a literal.
    assert DECLARED and any(d["named"] for d in posenc.schemes())
    for i, fn in enumerate(overloads):
        params = {n: (kind, d) for n, kind, d in _params(fn)}
        for scheme, p in DECLARED:
            if p["name"] in owned:
                assert p["name"] not in params, f"{name}: {p['name']} belongs to the cache"
                continue
            where = f"{name} (overload {i + 1}): {scheme}.{p['name']}"
            assert p["name"] in params, f"{where} is missing"
            kind, default = params[p["name"]]
            assert kind == "KEYWORD_ONLY", f"{where} is not keyword-only"
            assert default is not None, f"{where} has no default"
            literal, want = _declared_default(p)
            if literal:
                got = ast.literal_eval(default)
                assert got == want and isinstance(got, bool) == isinstance(want, bool), \
                    f"{where}: default {got!r}, declared {p['default']!r}"
            else:
                assert ast.literal_eval(default) is None, f"{where}: computed default not None"


def test_attend_refuses_the_keywords_its_stub_leaves_out():
    cache = posenc.KVCache(1, 8, capacity=4)
    cache.append(np.zeros((2, 1, 8), np.float32), np.zeros((2, 1, 8), np.float32))
    q = np.zeros((1, 1, 8), np.float32)
    for key in CACHE_OWNED:
        with pytest.raises(TypeError, match=f"{key} is the cache's"):
            cache.attend(q, **{key: None})


def _runtime_params(obj):
    """[(name, kind, default)] of a runtime callable: inspect.signature for Python functions,
    the signature line pybind11 writes first in a compiled function's docstring otherwise."""
    try:
        sig = inspect.signature(obj)
        return [(p.name, p.kind.name, p.default) for p in sig.parameters.values()]
    except ValueError:
        line = obj.__doc__.splitlines()[0]
        fn = ast.parse(f"def {line}: ...").body[0]
        return [(n, k, None if d is None else d) for n, k, d in _params(fn)]


PY_FUNCTIONS = ["rope_config", "apply_rope", "hf_layer_plan", "schemes", "attention",
                "attention_backward", "compare"]
COMPILED = ["rope_cos_sin", "mrope_apply", "positions_mrope", "sinusoidal_table", "alibi_slopes",
            "alibi_bias", "t5_buckets", "t5_bias", "set_num_threads", "num_threads"]


@pytest.mark.parametrize("name", PY_FUNCTIONS + COMPILED)
def test_stub_parameters_are_the_runtime_ones(name):
    defs = _defs(COMPARE if name == "compare" else INIT)[name]
    runtime = _runtime_params(getattr(posenc, name))
    if name in COMPILED:
        runtime = [(n, k, inspect.Parameter.empty) for n, k, _ in runtime]  # defaults: text
    exact = 0
    for fn in defs:
        stub = _params(fn)
        assert [s[0] for s in stub] == [r[0] for r in runtime], \
            f"{name}: stub {[s[0] for s in stub]} != runtime {[r[0] for r in runtime]}"
        # An overload may take a parameter by keyword only (rope_cos_sin's dtype=np.float32);
        # one of them has the runtime's kinds.
        kinds = [(s[1], r[1]) for s, r in zip(stub, runtime)]
        assert all(s == r or (s, r) == ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD")
                   for s, r in kinds), f"{name}: parameter kinds {kinds}"
        exact += all(s == r for s, r in kinds)
        for (n, _, sd), (_, _, rd) in zip(stub, runtime):
            if rd is inspect.Parameter.empty or sd is None:
                continue
            if isinstance(sd, ast.Constant) and sd.value is Ellipsis:
                continue
            assert ast.literal_eval(sd) == rd, f"{name}: default of {n}"
    assert exact, f"{name}: no overload has the runtime's parameter kinds"


@pytest.mark.parametrize("name", ["apply_rope", "attention"])
def test_torch_stub_parameters_are_the_runtime_ones(name):
    runtime = _runtime_params(getattr(pt, name))
    for fn in _defs(TORCH)[name]:
        assert [(n, k) for n, k, _ in _params(fn)] == [(n, k) for n, k, _ in runtime], name


def test_class_stubs_are_the_runtime_classes():
    checks = [
        (INIT, "KVCache", posenc.KVCache, "__init__"),
        (INIT, "LearnedTable", posenc.LearnedTable, "__init__"),
        (TORCH, "RotaryEmbedding", pt.RotaryEmbedding, "__init__"),
        (TORCH, "RotaryEmbedding", pt.RotaryEmbedding, "forward"),
    ]
    for tree, cls, obj, meth in checks:
        (fn,) = _defs(tree, cls)[meth]
        runtime = _runtime_params(getattr(obj, meth))
        assert [(n, k) for n, k, _ in _params(fn)] == [(n, k) for n, k, _ in runtime], \
            f"{cls}.{meth}"
    # RopeConfig(...) forwards its keywords to rope_config: the stub lists rope_config's.
    (init,) = _defs(INIT, "RopeConfig")["__init__"]
    (fn,) = _defs(INIT)["rope_config"]
    assert _params(init)[1:] == _params(fn) or \
        [p[:2] for p in _params(init)[1:]] == [p[:2] for p in _params(fn)]
    # Every public attribute of a class has a stub, and no stub names a missing one.
    for tree, cls, obj in [(INIT, "RopeConfig", posenc.RopeConfig),
                           (INIT, "KVCache", posenc.KVCache),
                           (INIT, "LearnedTable", posenc.LearnedTable),
                           (COMPARE, "CompareResult", posenc.CompareResult)]:
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        stub = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        stub |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        runtime = {a for a in dir(obj) if not a.startswith("_")}
        if cls == "KVCache":
            runtime.add("rope")  # set in __init__
        if cls == "LearnedTable":
            runtime.add("weights")
        if cls == "CompareResult":
            runtime |= set(obj.__dataclass_fields__)
        stub_public = {a for a in stub if not a.startswith("_")}
        assert stub_public == runtime, f"{cls}: stub-only {stub_public - runtime}, " \
                                       f"runtime-only {runtime - stub_public}"


def _doc(obj):
    """The docstring without pybind11's signature line."""
    doc = inspect.getdoc(obj) or ""
    name = getattr(obj, "__name__", "")
    if name and doc.startswith(f"{name}("):
        doc = doc.split("\n", 1)[1] if "\n" in doc else ""
    return doc.strip()


def _public(mod):
    for name in mod.__all__:
        obj = getattr(mod, name)
        yield f"{mod.__name__}.{name}", obj
        if inspect.isclass(obj):
            for attr, val in vars(obj).items():
                if attr.startswith("_") or not (callable(val) or isinstance(
                        val, (property, staticmethod, classmethod))):
                    continue
                if obj.__module__.startswith("torch") or attr in ("training", "dump_patches"):
                    continue
                yield f"{mod.__name__}.{name}.{attr}", val if isinstance(val, property) \
                    else getattr(obj, attr)


def test_every_public_name_has_a_docstring():
    missing = [n for mod in (posenc, pt) for n, obj in _public(mod) if not _doc(obj)]
    assert not missing, f"no docstring: {missing}"


# --- mypy --strict ---------------------------------------------------------------------------

# Each line marked `# E: <message part>` must get that error and no other line any error.
BAD = '''\
import numpy as np
from numpy.typing import NDArray
import posenc

cfg = posenc.RopeConfig(head_dim=8)
x = np.zeros((1, 2, 8), np.float32)
posenc.alibi_slopes("8")  # E: Argument 1 to "alibi_slopes" has incompatible type "str"
posenc.apply_rope(x, cfg=cfg, layout="halff")  # E: No overload variant of "apply_rope"
posenc.attention(x, x, x, rope_angle="f64")  # E: No overload variant of "attention"
posenc.attention(x, x, x, alibi_convention="bloom")  # E: No overload variant of "attention"
posenc.attention(x, x, x, sandwich_dim="128")  # E: No overload variant of "attention"
posenc.sinusoidal_table(8, width=4, layout="half")  # E: No overload variant of "sinusoidal_table"
posenc.KVCache(1, 8, kv_dtype="f8")  # E: Argument "kv_dtype" to "KVCache"
out, lse = posenc.attention(x, x, x, return_lse=True)
n: int = posenc.attention(x, x, x).shape[0]
posenc.attention(x, x, x, return_lse=True).shape  # E: has no attribute "shape"
f32: NDArray[np.float32] = posenc.rope_cos_sin(cfg, np.arange(3), dtype=np.float32)[0]
f64: NDArray[np.float64] = posenc.apply_rope(np.zeros((1, 2, 8)), cfg=cfg)
g: NDArray[np.float32] = posenc.rope_cos_sin(cfg, np.arange(3))[0]  # E: Incompatible types
posenc.positions_mrope([(2, 1, 2, 2)], rule="v6")  # E: Argument "rule" to "positions_mrope"
'''


def _python_blocks(doc):
    text = (ROOT / doc).read_text()
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def test_mypy_strict_on_the_examples_and_a_wrong_call(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (scripts/install-deps: "
                              "python3-mypy)")
    files = []
    for doc in DOCS:
        for i, block in enumerate(_python_blocks(doc)):
            f = tmp_path / f"{pathlib.Path(doc).stem}_{i}.py"
            f.write_text(block)
            files.append(f)
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    env = dict(os.environ, MYPYPATH=str(PKG.parent))
    # A separate process: MYPYPATH is read from the environment; the cache lives in tmp_path.
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                        "--cache-dir", str(tmp_path / "cache"), *map(str, files), str(bad)],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    del api
    errors = [line for line in r.stdout.splitlines() if ": error: " in line]
    assert r.returncode == 1, r.stdout + r.stderr
    wanted = {i + 1: m.group(1) for i, line in enumerate(BAD.splitlines())
              if (m := re.search(r"# E: (.*)$", line))}
    assert len(wanted) == 10
    got = {}
    for line in errors:
        m = re.match(r"(.*?):(\d+): error: (.*)$", line)
        assert m and pathlib.Path(m.group(1)).name == "bad.py", f"unexpected error: {line}"
        got.setdefault(int(m.group(2)), []).append(m.group(3))
    assert set(got) == set(wanted), f"errors on lines {sorted(got)}, wanted {sorted(wanted)}:\n" \
                                    + r.stdout
    for lineno, part in wanted.items():
        assert any(part in msg for msg in got[lineno]), f"bad.py:{lineno}: {got[lineno]}"
