#!/usr/bin/env python3
"""Reads llama.cpp's RoPE facts per architecture from its source and writes them as JSON.

    scripts/golden/llama_cpp_archs.py --llama-cpp PATH [--commit SHA]
                                      [--out tests/golden/llama_cpp/architectures.json]

Not run by CI (it needs a llama.cpp checkout; the file it writes is checked in). Nothing of
llama.cpp is imported or run: the C++ and Python sources are parsed as text (C++: comments and
string literals blanked, braces matched; Python: the ast module), and every fact carries the file
it was read from. What follows a pattern this script does not know is not guessed: it goes to
the "unparsed" list with the reason.

Per architecture (the LLM_ARCH_* enum of src/llama-arch.h, its general.architecture string from
LLM_ARCH_NAMES in src/llama-arch.cpp):

- rope_type: the return of llama_model_rope_type (src/llama-model.cpp) for it: NONE, NORM, NEOX,
  MROPE, IMROPE or VISION. Where the return depends on hparams.use_mrope() (rope sections 0 and 1
  both > 0, src/llama-hparams.cpp), rope_type is the type without sections and
  rope_type_with_mrope_sections the type with them.
- model_class: the llama_model_* class llama_model_mapping creates (null: the loader has none),
  and the file of its load_arch_hparams (following the class's bases in src/models/models.h).
- swa: the sliding-window layers load_arch_hparams sets (null when it sets none): swa_type
  (STANDARD, CHUNKED, SYMMETRIC), when (always, or only when {arch}.attention.sliding_window > 0,
  or another condition quoted), the pattern (period: set_swa_pattern(P) with the default P and
  whether {arch}.attention.sliding_window_pattern may override it; dense_first: layer i is
  sliding when i % P != 0, else when i % P < P - 1; per_layer_array: only the per-layer array
  key; all_sliding: set_swa_pattern(0); custom: the assignment quoted), the sliding layers' base
  (freq_base: the full layers' {arch}.rope.freq_base, or llama_hparams' default) and scale
  (freq_scale: the full layers', or the default 1), and whether {arch}.rope.freq_base_swa is
  read.
- no_rope_layer_step_set, rotary_dim_set: the loader's assignments of n_no_rope_layer_step
  (llama_hparams' default 4) and of the full / sliding layers' rotary width, with when.
- rope_layers: which layers the graph rotates, read from the if-conditions around its rotations
  of the queries (ggml_rope, ggml_rope_ext, ggml_rope_multi on q...; in the graph constructor and
  the graph's member functions): none (the graph rotates no query), all, sliding_only (the full
  layers get no RoPE), sliding_only_when_swa, sliding_or_dense_lead (and the leading dense
  layers), all_unless_rope_finetuned_false (Granite's switch), or nope_step (layer il has no
  RoPE when (il + offset) % step == 0, with the step's default); the condition is quoted.
- graph_rope_args: the base, scale, ext_factor and attn_factor arguments of those rotations, for
  the sliding layers, the full ones or all ("model.get_rope_freq_base (cparams, il)": the
  sliding layers' base on a sliding layer; a local's every value joined by " | "; a number: a
  literal); graph_per_layer_base: whether the graph asks model.get_rope_freq_base at all.
- converter: the classes of convert_hf_to_gguf.py's conversion package that write the
  architecture (gguf.MODEL_ARCH.X, statically or by a literal reassignment), each with its
  registered Hugging Face architectures, whether it reads Mistral's native format, and whether
  it permutes the q/k rows: a call of a q/k permute function (a function whose body reshapes the
  rows to (n_head, 2, R/2) and swaps the last two axes, or returns what one returns) in the
  methods modify_tensors reaches through the class's method resolution order (super() and
  Base.method(self, ...) calls), under `if self.undo_permute` resolved for the class, for an
  architecture that has attn_q / attn_k tensors (gguf-py MODEL_TENSORS); permutations on other
  paths only (LlamaModel._repack_nvfp4, NVFP4 checkpoints) are listed apart. permuted_from_hf:
  true / false when every class that converts a Hugging Face checkpoint itself agrees (not
  Mistral's native format, not a class that hands its tensors to another, not one whose
  __init__ raises), "mixed" when they differ, null when none.

Reads src/llama-arch.h, src/llama-arch.cpp, src/llama-model.cpp, src/llama-hparams.h,
src/llama-hparams.cpp, src/models/models.h, src/models/*.cpp, conversion/*.py and
gguf-py/gguf/constants.py.
"""
import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ROPE_TYPES = ("NONE", "NORM", "NEOX", "MROPE", "IMROPE", "VISION")


class Unparsed(Exception):
    """A source pattern this script does not read; the message says which."""


# ---- C++ text -----------------------------------------------------------------------------------

def blank_cpp(text):
    """Comments and the contents of string / char literals replaced by spaces (newlines kept),
    so offsets and line numbers stay those of the file."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def match_brace(s, i, open_="{", close="}"):
    """Index of the bracket closing the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_:
            depth += 1
        elif s[j] == close:
            depth -= 1
            if depth == 0:
                return j
    raise Unparsed(f"unbalanced {open_!r} at offset {i}")


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def norm_ws(s):
    return re.sub(r"\s+", " ", s).strip()


class CppFile:
    def __init__(self, root, rel):
        self.rel = rel
        self.raw = (root / rel).read_text()
        self.s = blank_cpp(self.raw)

    def where(self, offset):
        return f"{self.rel}:{line_of(self.s, offset)}"

    def function_body(self, signature_re):
        """(start, end) of the body of the first function whose header matches the regex."""
        m = re.search(signature_re, self.s)
        if not m:
            return None
        b = self.s.find("{", m.end())
        return b, match_brace(self.s, b)


def blocks(s, lo, hi):
    """The brace blocks inside s[lo:hi]: (open, close, header), header = the text between the
    previous ';', '{' or '}' and the opening brace (stripped)."""
    out, stack = [], []
    for j in range(lo, hi):
        if s[j] == "{":
            k = j - 1
            depth = 0
            while k >= lo:
                ch = s[k]
                if ch == ")":
                    depth += 1
                elif ch == "(":
                    depth -= 1
                elif depth == 0 and ch in ";{}":
                    break
                k -= 1
            stack.append((j, norm_ws(s[k + 1:j])))
        elif s[j] == "}":
            if stack:
                o, h = stack.pop()
                out.append((o, j, h))
    return out


def split_if(header):
    """('if', cond) for 'if (cond)' / 'else if (cond)', ('else', None) for 'else', else None."""
    m = re.match(r"^(else\s+)?if\s*\((.*)\)$", header)
    if m:
        return ("if", norm_ws(m.group(2)))
    if header == "else":
        return ("else", None)
    return None


def guards(s, lo, hi, pos):
    """The if-conditions around offset pos inside the body s[lo:hi], outermost first: a list of
    (cond, negated). An else block yields the condition of the if block just before it, negated;
    a brace-less 'if (c) stmt;' holding pos yields c."""
    bl = blocks(s, lo, hi)
    out = []
    for o, c, h in sorted(bl):
        if not (o < pos < c):
            continue
        kind = split_if(h)
        if kind is None:
            continue
        if kind[0] == "if":
            out.append((kind[1], False))
        else:
            prev = [b for b in bl if b[1] < o and re.fullmatch(r"\s*else\s*", s[b[1] + 1:o])]
            if not prev:
                raise Unparsed(f"an else at offset {o} without the block of its if")
            pk = split_if(prev[-1][2])
            if not pk or pk[0] != "if":
                raise Unparsed(f"an else at offset {o} after a block that is not an if")
            out.append((pk[1], True))
    # A brace-less if: the statement holding pos starts with 'if (cond)'.
    k = pos - 1
    while k >= lo and s[k] not in ";{}":
        k -= 1
    m = re.match(r"\s*if\s*\(", s[k + 1:pos])
    if m:
        p0 = k + 1 + m.end() - 1
        out.append((norm_ws(s[p0 + 1:match_brace(s, p0, "(", ")")]), False))
    return out


# ---- llama-arch.h / llama-arch.cpp --------------------------------------------------------------

def read_arch_names(root):
    h = CppFile(root, "src/llama-arch.h")
    m = re.search(r"enum\s+llm_arch\s*\{", h.s)
    if not m:
        raise SystemExit("src/llama-arch.h: enum llm_arch not found")
    body = h.s[m.end():match_brace(h.s, m.end() - 1)]
    enums = [e for e in re.findall(r"\b(LLM_ARCH_\w+)\s*,?", body)]
    cpp = CppFile(root, "src/llama-arch.cpp")
    m = re.search(r"LLM_ARCH_NAMES\s*=\s*\{", cpp.s)
    if not m:
        raise SystemExit("src/llama-arch.cpp: LLM_ARCH_NAMES not found")
    end = match_brace(cpp.s, m.end() - 1)
    names = {}
    for mm in re.finditer(r'\{\s*(LLM_ARCH_\w+)\s*,\s*"([^"]*)"\s*\}', cpp.raw[m.end():end]):
        names[mm.group(1)] = mm.group(2)
    return enums, names


# ---- llama_model_rope_type ----------------------------------------------------------------------

def read_rope_types(root, unparsed):
    f = CppFile(root, "src/llama-model.cpp")
    span = f.function_body(r"llama_rope_type\s+llama_model_rope_type\s*\(")
    if not span:
        raise SystemExit("src/llama-model.cpp: llama_model_rope_type not found")
    lo, hi = span
    body = f.s[lo:hi]
    out, pending = {}, []
    for m in re.finditer(r"case\s+(LLM_ARCH_\w+)\s*:|return\s+([^;]*);|GGML_ABORT\s*\(", body):
        if m.group(1):
            pending.append((m.group(1), lo + m.start()))
            continue
        if not pending:
            continue  # the return after the switch
        ret = norm_ws(m.group(2) or "GGML_ABORT")
        where = f.where(lo + m.start())
        plain = re.fullmatch(r"LLAMA_ROPE_TYPE_(\w+)", ret)
        cond = re.fullmatch(
            r"model->hparams\.use_mrope\(\)\s*\?\s*LLAMA_ROPE_TYPE_(\w+)\s*:\s*"
            r"LLAMA_ROPE_TYPE_(\w+)",
            ret)
        for e, _ in pending:
            if plain and plain.group(1) in ROPE_TYPES:
                out[e] = {"rope_type": plain.group(1), "rope_type_source": where}
            elif cond and cond.group(1) in ROPE_TYPES and cond.group(2) in ROPE_TYPES:
                out[e] = {"rope_type": cond.group(2),
                          "rope_type_with_mrope_sections": cond.group(1),
                          "rope_type_source": where}
            elif ret == "GGML_ABORT":
                out[e] = {"rope_type": None, "rope_type_source": where, "aborts": True}
            else:
                unparsed.append({"what": f"llama_model_rope_type, {e}",
                                 "where": where, "reason": f"return '{ret}' is not a rope type "
                                 "nor model->hparams.use_mrope() ? A : B"})
        pending = []
    # After the switch: what an architecture missing from it gets.
    tail = re.search(r"\}\s*return\s+LLAMA_ROPE_TYPE_(\w+)\s*;\s*$", body)
    fallback = tail.group(1) if tail else None
    return out, fallback, f.where(lo)


def read_use_mrope(root):
    f = CppFile(root, "src/llama-hparams.cpp")
    span = f.function_body(r"bool\s+llama_hparams::use_mrope\s*\(\s*\)\s*const")
    if not span:
        return None
    m = re.search(r"return\s+([^;]*);", f.s[span[0]:span[1]])
    return {"condition": norm_ws(m.group(1)), "source": f.where(span[0])} if m else None


def read_hparams_defaults(root):
    f = CppFile(root, "src/llama-hparams.h")
    out = {}
    for key in ("rope_freq_base_train_swa", "rope_freq_scale_train_swa", "n_no_rope_layer_step"):
        m = re.search(r"\b(?:float|uint32_t)\s+" + key + r"\s*=\s*([0-9.]+)f?\s*;", f.s)
        if not m:
            raise SystemExit(f"src/llama-hparams.h: the default of {key} not found")
        out[key] = {"value": float(m.group(1)), "source": f.where(m.start())}
    return out


# ---- model classes: llama_model_mapping, models.h, src/models/*.cpp -----------------------------

def read_model_classes(root):
    f = CppFile(root, "src/llama-model.cpp")
    span = f.function_body(r"static\s+llama_model\s*\*\s*llama_model_mapping\s*\(")
    if not span:
        raise SystemExit("src/llama-model.cpp: llama_model_mapping not found")
    body = f.s[span[0]:span[1]]
    cls, pending = {}, []
    for m in re.finditer(r"case\s+(LLM_ARCH_\w+)\s*:|return\s+new\s+(\w+)\s*\(|default\s*:", body):
        if m.group(1):
            pending.append(m.group(1))
        elif m.group(2):
            for e in pending:
                cls[e] = m.group(2)
            pending = []
        else:
            pending = []
    h = CppFile(root, "src/models/models.h")
    bases, graph_alias = {}, {}
    for m in re.finditer(r"struct\s+(llama_model_\w+)\s*:\s*public\s+(\w+)\s*\{", h.s):
        bases[m.group(1)] = m.group(2)
        body = h.s[m.end():match_brace(h.s, m.end() - 1)]
        a = re.search(r"using\s+graph\s*=\s*(\w+)::graph", body)
        if a:
            graph_alias[m.group(1)] = a.group(1)
    files = {}
    for p in sorted((root / "src/models").glob("*.cpp")):
        files[p.name] = CppFile(root, f"src/models/{p.name}")
    return cls, bases, graph_alias, files


def find_method(files, bases, cls, method):
    """(CppFile, body start, body end, class) of cls::method, following the bases."""
    c = cls
    while c and c.startswith("llama_model_"):
        for f in files.values():
            span = f.function_body(r"\b" + re.escape(c) + r"::" + method + r"\s*\(")
            if span:
                return f, span[0], span[1], c
        c = bases.get(c)
    return None


def find_graph(files, bases, graph_alias, cls):
    """(CppFile, class) holding cls's graph constructor(s)."""
    c = cls
    while c and c.startswith("llama_model_"):
        c = graph_alias.get(c, c)
        pat = re.compile(r"\b" + re.escape(c) + r"::graph(?:\s*<[^>]*>)?\s*::\s*graph\s*\(")
        for f in files.values():
            if pat.search(f.s):
                return f, c
        c = bases.get(c)
    return None, None


# ---- load_arch_hparams: sliding-window layers and NoPE step -------------------------------------

def swa_condition(conds):
    """When an assignment of the loader runs: 'always'; in terms of the key
    {arch}.attention.sliding_window ('sliding_window > 0', 'sliding_window absent or 0',
    'sliding_window == 0', 'sliding_window absent or > 0'), the key read into hparams.n_swa
    (default 0) and found_swa / is_swa saying whether it was present; else the condition(s)
    quoted."""
    if not conds:
        return "always"
    if len(conds) == 1:
        c, neg = conds[0]
        core = re.sub(r"^(?:const auto is_swa = ml\.get_key\([^;]*\); )?"
                      r"(?:found_swa|is_swa|ml\.get_key\(LLM_KV_ATTENTION_SLIDING_WINDOW, "
                      r"hparams\.n_swa, false\)) && ", "", c)
        present = core != c
        if core == "hparams.n_swa > 0":
            return "sliding_window absent or 0" if neg else "sliding_window > 0"
        if core == "hparams.n_swa == 0" and present:
            return "sliding_window absent or > 0" if neg else "sliding_window == 0"
    return " && ".join(("!(%s)" % c) if neg else c for c, neg in conds)


def read_swa(f, lo, hi, defaults):
    s = f.s
    body = s[lo:hi]
    sets = [m for m in re.finditer(r"hparams\.swa_type\s*=\s*LLAMA_SWA_TYPE_(\w+)\s*;", body)]
    on = [m for m in sets if m.group(1) != "NONE"]
    custom = list(re.finditer(r"hparams\.is_swa_impl\s*\[[^\]]*\]\s*=\s*([^;]*);", body))
    if not on and not custom:
        return None
    out = {"source": f.where(lo)}
    types = sorted({m.group(1) for m in on})
    if len(types) != 1:
        raise Unparsed(f"swa_type set to {types}")
    out["swa_type"] = types[0]
    cond = swa_condition(guards(s, lo, hi, lo + on[0].start()))
    out["when"] = cond

    period_default = re.search(r"uint32_t\s+swa_period\s*=\s*(\d+)\s*;", body)
    pattern_calls = list(re.finditer(r"set_swa_pattern\s*\(\s*(\w+)\s*(?:,\s*(true|false)\s*)?\)",
                                     body))
    key_scalar = re.search(
        r"get_key_or_arr\s*\(\s*LLM_KV_ATTENTION_SLIDING_WINDOW_PATTERN\s*,\s*swa_period\b", body)
    key_array = re.search(
        r"get_key_or_arr\s*\(\s*LLM_KV_ATTENTION_SLIDING_WINDOW_PATTERN\s*,\s*hparams\.is_swa_impl",
        body)
    pattern = {}
    if custom:
        pattern = {"kind": "custom",
                   "assignment": "is_swa_impl[il] = " + norm_ws(custom[0].group(1))}
    elif pattern_calls:
        if len({(m.group(1), m.group(2)) for m in pattern_calls}) != 1:
            raise Unparsed("set_swa_pattern called with different arguments")
        arg, dense_first = pattern_calls[0].group(1), pattern_calls[0].group(2) == "true"
        if arg == "swa_period":
            if not period_default:
                raise Unparsed("set_swa_pattern(swa_period) without 'uint32_t swa_period = N;'")
            p = int(period_default.group(1))
            pattern = {"kind": "dense_first" if dense_first else "period", "period": p,
                       "period_key": bool(key_scalar), "per_layer_array_key": bool(key_array)}
        elif arg.isdigit():
            p = int(arg)
            pattern = {"kind": "all_sliding" if p == 0 else ("dense_first" if dense_first
                                                               else "period"),
                       "period": p, "period_key": False, "per_layer_array_key": bool(key_array)}
        else:
            raise Unparsed(f"set_swa_pattern({arg})")
    elif key_array:
        pattern = {"kind": "per_layer_array"}
    else:
        raise Unparsed("swa_type set but no set_swa_pattern, pattern key or is_swa_impl assignment")
    if pattern.get("period_key") and pattern.get("per_layer_array_key"):
        pattern["kind"] += "_or_array"
    out["pattern"] = pattern

    base = re.search(r"hparams\.rope_freq_base_train_swa\s*=\s*([^;]*);", body)
    scale = re.search(r"hparams\.rope_freq_scale_train_swa\s*=\s*([^;]*);", body)
    if base:
        v = norm_ws(base.group(1))
        if v != "hparams.rope_freq_base_train":
            raise Unparsed(f"rope_freq_base_train_swa = {v}")
        out["base"] = "freq_base"
    else:
        out["base"] = defaults["rope_freq_base_train_swa"]["value"]
    if scale:
        v = norm_ws(scale.group(1))
        if v == "hparams.rope_freq_scale_train":
            out["scale"] = "freq_scale"
        elif re.fullmatch(r"[0-9.]+f?", v):
            out["scale"] = float(v.rstrip("f"))
        else:
            raise Unparsed(f"rope_freq_scale_train_swa = {v}")
    else:
        out["scale"] = defaults["rope_freq_scale_train_swa"]["value"]
    out["freq_base_swa_key"] = bool(re.search(r"LLM_KV_ROPE_FREQ_BASE_SWA", body))
    return out


def read_rot_changes(f, lo, hi):
    """The loader's assignments of the full / sliding layers' rotary width (n_rot_full,
    n_rot_swa; llama_model_base::load_hparams reads {arch}.rope.dimension_count and
    {arch}.rope.dimension_count_swa before it)."""
    return [{"assignment": f"hparams.n_rot_{m.group(1)} = {norm_ws(m.group(2))}",
             "source": f.where(lo + m.start())}
            for m in re.finditer(r"hparams\.n_rot_(full|swa)\s*=\s*([^;]*);", f.s[lo:hi])]


def read_nope_step(f, lo, hi):
    """The loader's assignments of n_no_rope_layer_step: (value, when) each."""
    out = []
    for m in re.finditer(r"hparams\.n_no_rope_layer_step\s*=\s*([^;]*);", f.s[lo:hi]):
        v = norm_ws(m.group(1))
        when = swa_condition(guards(f.s, lo, hi, lo + m.start()))
        out.append({"value": int(v) if v.isdigit() else v, "when": when,
                    "source": f.where(lo + m.start())})
    return out


def read_query_scale(f, lo, hi):
    """The loader's query scale by position (llama_graph's build_inp_attn_scale: q *=
    log(floor((pos + offset) / floor_scale) + 1) * scale + 1): where each of its three
    hparams comes from, a GGUF key ("key:<suffix>") or an assignment (the expression), or None
    when the loader sets no scale."""
    body = f.s[lo:hi]
    keys = {"LLM_KV_ATTENTION_TEMPERATURE_SCALE": "attention.temperature_scale",
            "LLM_KV_ATTENTION_TEMPERATURE_LENGTH": "attention.temperature_length"}
    out = {}
    for field, name in (("f_attn_temp_scale", "scale"), ("n_attn_temp_floor_scale", "floor"),
                        ("f_attn_temp_offset", "offset")):
        for m in re.finditer(r"ml\.get_key\(\s*(LLM_KV_\w+)\s*,\s*hparams\." + field + r"\b",
                             body):
            if m.group(1) not in keys:
                raise Unparsed(f"{f.where(lo + m.start())}: {field} read from {m.group(1)}")
            out[name] = "key:" + keys[m.group(1)]
        for m in re.finditer(r"hparams\." + field + r"\s*=\s*([^;]*);", body):
            out.setdefault(name, norm_ws(m.group(1)))
    if "scale" not in out:
        return None
    out["source"] = f.where(lo + body.find("attn_temp"))
    return out


# ---- the graph: which layers get RoPE -----------------------------------------------------------

# The rotation of the queries: Q... / q... = ggml_rope / ggml_rope_ext / ggml_rope_multi(ctx0, q...
Q_ROPE = re.compile(r"\b(\w+)\s*=\s*ggml_rope(?:_ext|_multi)?\s*\(\s*ctx0\s*,\s*(\w+)\s*,")
# Guards that only say the layer has attention at all (DeciLM's attention-free layers).
ATTENTION_PRESENT = re.compile(r"^\(?\s*n_head(?:_kv)?\s*(?:>|!=)\s*0\s*\)?$")
ARCH_GUARD = re.compile(r"^\(?\s*model\.arch\s*==\s*LLM_ARCH_\w+(?:\s*\|\|\s*model\.arch\s*==\s*"
                        r"LLM_ARCH_\w+)*\s*\)?$")


def resolve(cond, defs):
    """cond with each bool local it names replaced by its definition."""
    for _ in range(4):
        for name, expr in defs.items():
            cond = re.sub(r"(?<![\w.])" + name + r"(?!\w)", "(" + expr + ")", cond)
    return norm_ws(cond)


def classify_rope_layers(conds):
    """Which layers get RoPE, from the (resolved) conditions around one rotation of the queries."""
    if not conds:
        return {"kind": "all"}
    if len(conds) != 1 or conds[0][1]:
        raise Unparsed("rotation under " + "; ".join(("not " if n else "") + c for c, n in conds))
    c = conds[0][0]
    flat = norm_ws(re.sub(r"[()]", " ", c))
    if flat == "hparams.is_swa il":
        return {"kind": "sliding_only", "condition": c}
    if re.fullmatch(r"hparams\.is_swa il \|\| static_cast<uint32_t> il < "
                    r"hparams\.n_layer_dense_lead",
                    flat):
        return {"kind": "sliding_or_dense_lead", "condition": c}
    if re.fullmatch(r"hparams\.is_swa il \|\| hparams\.swa_type == LLAMA_SWA_TYPE_NONE", flat):
        return {"kind": "sliding_only_when_swa", "condition": c}
    if flat == "hparams.rope_finetuned":
        return {"kind": "all_unless_rope_finetuned_false", "condition": c}
    m = re.fullmatch(r"(?:hparams\.n_no_rope_layer_step > 0 && )?il \+ (\d+) % "
                     r"hparams\.n_no_rope_layer_step != 0", flat)
    if m:
        return {"kind": "nope_step", "offset": int(m.group(1)), "condition": c}
    if re.fullmatch(r"hparams\.n_no_rope_layer_step == n_layer \|\| il % "
                    r"hparams\.n_no_rope_layer_step != 0", flat):
        return {"kind": "nope_step", "offset": 0,
                "unless": "n_no_rope_layer_step == n_layer (then every layer rotates)",
                "condition": c}
    raise Unparsed(f"rotation under '{c}'")


def graph_functions(f, cls):
    """(start, end) of the bodies of cls's graph constructor(s) and graph member functions."""
    pat = re.compile(r"\b" + re.escape(cls) + r"::graph(?:\s*<[^>]*>)?\s*::\s*~?\w+\s*\(")
    out = []
    for m in pat.finditer(f.s):
        close = match_brace(f.s, m.end() - 1, "(", ")")
        b = f.s.find("{", close)
        if b < 0 or ";" in f.s[close:b]:
            continue
        out.append((b, match_brace(f.s, b)))
    return out


def split_args(s, open_paren):
    """The top-level arguments of the call whose '(' is at open_paren, whitespace-normalised."""
    close = match_brace(s, open_paren, "(", ")")
    out, depth, start = [], 0, open_paren + 1
    for j in range(open_paren + 1, close):
        ch = s[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(norm_ws(s[start:j]))
            start = j + 1
    out.append(norm_ws(s[start:close]))
    return out


# Argument positions of the base, scale, YaRN ramp switch and magnitude (ggml.h).
ROPE_ARGS = {"ggml_rope_ext": 7, "ggml_rope_multi": 8}
IS_SWA = re.compile(r"^\(?\s*\(?\s*hparams\.is_swa\(il\)\s*\)?\s*\)?$")


def arg_value(expr, body):
    """A rotation argument: a member of the graph context (freq_base, ...), a number, or a local
    of the function with every value it is given ('a | b')."""
    if re.fullmatch(r"-?[0-9.]+f?", expr):
        return float(expr.rstrip("f"))
    vals = [norm_ws(m.group(1)) for m in re.finditer(
        r"(?<![\w.])" + re.escape(expr) + r"\s*=(?!=)\s*([^;]*);", body)]
    vals = [v for v in vals if v not in ("0.0f", "0.0", "0")] or vals
    return " | ".join(vals) if vals else expr


def read_rope_layers(f, cls, enum):
    """Which layers the graph of cls rotates for the architecture `enum`, and with which base and
    scale. Each rotation of the queries is looked at with the if-conditions around it (bool locals
    resolved): conditions that only say the layer has attention are dropped, a model.arch test is
    evaluated for this architecture, and a condition under which one branch rotates and its else
    rotates too (M-RoPE or not, different scales) is dropped from the kind. The base and scale
    arguments are kept per branch of hparams.is_swa(il) ('sliding', 'full') or for 'all'."""
    rotations, per_layer = [], False
    for b, e in graph_functions(f, cls):
        body = f.s[b:e]
        per_layer = per_layer or bool(re.search(r"model\.get_rope_freq_base\s*\(", body))
        defs = {mm.group(1): norm_ws(mm.group(2)) for mm in
                re.finditer(r"(?:const\s+)?bool\s+(\w+)\s*=\s*([^;]*);", body)}
        for mm in Q_ROPE.finditer(body):
            if not re.match(r"(?i)^q", mm.group(2)):
                continue
            conds, reached = [], True
            for c, n in guards(f.s, b, e, b + mm.start()):
                c = resolve(c, defs)
                if ATTENTION_PRESENT.match(c):
                    continue
                if ARCH_GUARD.match(c):
                    hit = enum in re.findall(r"LLM_ARCH_\w+", c)
                    if hit == n:
                        reached = False
                    continue
                conds.append((c, n))
            if not reached:
                continue
            fn_name = re.match(r"\w+", f.s[b + mm.end(1):].lstrip(" =")).group(0)
            args = split_args(f.s, f.s.index("(", b + mm.start()))
            if fn_name in ROPE_ARGS:
                i = ROPE_ARGS[fn_name]
                vals = {k: arg_value(args[i + j], body) for j, k in
                        enumerate(("freq_base", "freq_scale", "ext_factor", "attn_factor"))}
            else:
                vals = {"call": f"{fn_name}({', '.join(args)})",
                        "note": "no base or scale argument (ggml_rope: base 10000, scale 1)"}
            branch = "all"
            for c, n in conds:
                if IS_SWA.match(c):
                    branch = "full" if n else "sliding"
            rotations.append((conds, f.where(b + mm.start()), branch, vals))
    if not rotations:
        return {"kind": "none", "note": "the graph rotates no query (" + f.rel + ")"}, per_layer, {}
    plain = {c for g, _, _, _ in rotations for c, n in g if not n}
    negated = {c for g, _, _, _ in rotations for c, n in g if n}
    both = plain & negated
    kinds = []
    for g, where, _, _ in rotations:
        k = classify_rope_layers([(c, n) for c, n in g if c not in both])
        kinds.append((json.dumps(k, sort_keys=True), k, where))
    if len({k for k, _, _ in kinds}) != 1:
        raise Unparsed("different conditions around the query rotations: " +
                       "; ".join(sorted({k for k, _, _ in kinds})))
    out = dict(kinds[0][1])
    if both:
        out["note"] = "rotated in both branches of " + ", ".join(f"'{c}'" for c in sorted(both))
    out["source"] = kinds[0][2]
    args = {}
    for _, where, branch, vals in rotations:
        prev = args.setdefault(branch, dict(vals, source=where))
        if {k: v for k, v in prev.items() if k != "source"} != vals:
            prev.setdefault("also", []).append(dict(vals, source=where))
    return out, per_layer, args


# ---- the converter (conversion/*.py, gguf-py constants) -----------------------------------------

def read_model_arch_names(root):
    p = root / "gguf-py/gguf/constants.py"
    tree = ast.parse(p.read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MODEL_ARCH_NAMES":
            out = {}
            for k, v in zip(node.value.keys, node.value.values):
                out[k.attr] = v.value
            return out
    raise SystemExit("gguf-py/gguf/constants.py: MODEL_ARCH_NAMES not found")


def dotted(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        d = dotted(node.value)
        return f"{d}.{node.attr}" if d else None
    return None


class PyClass:
    def __init__(self, node, rel, outer=None):
        self.node, self.rel = node, rel
        self.name = node.name
        self.qualname = f"{outer}.{node.name}" if outer else node.name
        self.bases = [dotted(b).split(".")[-1] for b in node.bases if dotted(b)]
        self.registered = []
        for d in node.decorator_list:
            if isinstance(d, ast.Call) and dotted(d.func) == "ModelBase.register":
                self.registered += [a.value for a in d.args if isinstance(a, ast.Constant)]
        self.attrs, self.methods = {}, {}
        for st in node.body:
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                for t in targets:
                    if isinstance(t, ast.Name) and st.value is not None:
                        self.attrs[t.id] = st.value
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.methods[st.name] = st

    def where(self, node=None):
        return f"{self.rel}:{(node or self.node).lineno}"


def read_py_classes(root):
    classes = {}
    files = sorted((root / "conversion").glob("*.py")) + [root / "convert_hf_to_gguf.py"]
    for p in files:
        rel = str(p.relative_to(root))
        tree = ast.parse(p.read_text())

        def walk(body, outer=None):
            for node in body:
                if isinstance(node, ast.ClassDef):
                    c = PyClass(node, rel, outer)
                    classes.setdefault(c.name, []).append(c)
                    walk(node.body, c.qualname)
        walk(tree.body)
    return classes


def mro(name, classes, seen=()):
    """C3 linearisation over the parsed classes (bases outside them end the chain)."""
    if name in seen:
        raise Unparsed(f"class cycle at {name}")
    cs = classes.get(name)
    if not cs:
        return [name]
    c = cs[0]
    seqs = [mro(b, classes, seen + (name,)) for b in c.bases] + [list(c.bases)]
    out = [name]
    seqs = [list(s) for s in seqs if s]
    while seqs:
        for s in seqs:
            head = s[0]
            if not any(head in t[1:] for t in seqs):
                break
        else:
            raise Unparsed(f"no C3 linearisation for {name}")
        out.append(head)
        seqs = [[x for x in s if x != head] for s in seqs]
        seqs = [s for s in seqs if s]
    return out


# The q/k row permutation of LlamaModel.permute and its copies: per head, the rows
# (2, R/2) -> (R/2, 2), i.e. Hugging Face's half layout to ggml NORM's adjacent pairs.
QK_PERMUTE_BODY = re.compile(r"reshape\(n_head, 2, weights\.shape\[0\] // n_head // 2")


def read_model_tensors(root):
    """gguf-py's MODEL_TENSORS: MODEL_ARCH member -> the MODEL_TENSOR members it writes."""
    tree = ast.parse((root / "gguf-py/gguf/constants.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MODEL_TENSORS":
            return {k.attr: {dotted(e).split(".")[-1] for e in v.elts if dotted(e)}
                    for k, v in zip(node.value.keys, node.value.values)}
    raise SystemExit("gguf-py/gguf/constants.py: MODEL_TENSORS not found")


def arch_literals(expr, fn, depth=0):
    """The gguf.MODEL_ARCH members an expression can take: a member, a conditional expression
    of them, or a local of the method assigned one; [] for anything else."""
    d = dotted(expr)
    if d and d.startswith("gguf.MODEL_ARCH."):
        return [d.split(".")[-1]]
    if isinstance(expr, ast.IfExp):
        a, b = arch_literals(expr.body, fn, depth), arch_literals(expr.orelse, fn, depth)
        return a + b if a and b else []
    if isinstance(expr, ast.Name) and depth < 4:
        out = []
        for n in ast.walk(fn):
            if (isinstance(n, ast.Assign) and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name) and n.targets[0].id == expr.id):
                lits = arch_literals(n.value, fn, depth + 1)
                if not lits:
                    return []
                out += lits
        return out
    return []


def converter_facts(root, arch_names, model_tensors):
    classes = read_py_classes(root)
    first = {n: cs[0] for n, cs in classes.items()}

    def lookup_attr(cname, attr):
        for c in mro(cname, classes):
            if c in first and attr in first[c].attrs:
                return first[c].attrs[attr], first[c]
        return None, None

    def const(cname, attr):
        v, _ = lookup_attr(cname, attr)
        return v.value if isinstance(v, ast.Constant) else None

    def resolve_fn(cname, fname):
        """The class whose definition of fname cname's instances use."""
        for c in mro(cname, classes):
            if c in first and fname in first[c].methods:
                return c
        return None

    def calls(fn):
        """(receiver, attr, node) of each method-like call in fn."""
        for n in ast.walk(fn):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                yield dotted(n.func.value), n.func.attr, n

    # Permute functions: the body permutes (2, R/2) -> (R/2, 2); then, to a fixed point, the
    # functions that return what one returns (Baichuan's _reverse_hf_permute_part).
    providers = {(c.name, f) for c in first.values() for f, fn in c.methods.items()
                 if QK_PERMUTE_BODY.search(ast.unparse(fn)) and "swapaxes(1, 2)" in ast.unparse(fn)}

    def target_of(cname, recv, attr):
        if recv in ("self", "cls"):
            owner = resolve_fn(cname, attr)
        elif recv in first:
            owner = resolve_fn(recv, attr)
        else:
            return None
        return (owner, attr) if owner and (owner, attr) in providers else None

    changed = True
    while changed:
        changed = False
        for c in first.values():
            for f, fn in c.methods.items():
                if (c.name, f) in providers:
                    continue
                returned = [st.value for st in fn.body if isinstance(st, ast.Return)
                            and isinstance(st.value, ast.Call)
                            and isinstance(st.value.func, ast.Attribute)]
                if any(target_of(c.name, dotted(v.func.value), v.func.attr) for v in returned):
                    providers.add((c.name, f))
                    changed = True

    def active_defs(cname):
        """name -> [(class, def)] that run for cname: the first definition in the MRO, then the
        ones each reached one calls, through super().name(...) or Base.name(self, ...)."""
        order = [c for c in mro(cname, classes) if c in first]
        names = {m for c in order for m in first[c].methods}
        out = {}
        for mname in names:
            defs = [(i, c) for i, c in enumerate(order) if mname in first[c].methods]
            if not defs:
                continue
            todo, seen = [defs[0]], set()
            while todo:
                i, c = todo.pop()
                if (i, c) in seen:
                    continue
                seen.add((i, c))
                fn = first[c].methods[mname]
                for recv, attr, node in calls(fn):
                    if attr != mname:
                        continue
                    start = None
                    if (isinstance(node.func.value, ast.Call)
                            and dotted(node.func.value.func) == "super"):
                        start = i + 1
                    elif recv in order and node.args and dotted(node.args[0]) == "self":
                        start = order.index(recv)
                    if start is None:
                        continue
                    nxt = [(j, d) for j, d in defs if j >= start]
                    if nxt:
                        todo.append(nxt[0])
            out[mname] = [(first[c], first[c].methods[mname]) for _, c in sorted(seen)]
        return out

    def permute_sites(cname):
        sites, delegates = [], []
        act = active_defs(cname)
        for mname, chain in sorted(act.items()):
            for owner, fn in chain:
                if (owner.name, mname) in providers:
                    continue
                parents = {}
                for n in ast.walk(fn):
                    for ch in ast.iter_child_nodes(n):
                        parents[ch] = n
                for recv, attr, n in calls(fn):
                    if (mname == "modify_tensors" and attr == "modify_tensors" and recv
                            and recv.startswith("self.")):
                        delegates.append(f"{owner.where(n)}: {recv}.modify_tensors")
                    t = target_of(cname, recv, attr)
                    if t is None:
                        continue
                    gate, tensors, p = None, [], parents.get(n)
                    while p is not None and p is not fn:
                        if isinstance(p, ast.If):
                            test = ast.unparse(p.test)
                            if "undo_permute" in test:
                                gate = test
                            elif "name" in test:
                                tensors.append(test)
                        p = parents.get(p)
                    active = True
                    if gate is not None:
                        val = const(cname, "undo_permute")
                        if gate == "self.undo_permute":
                            active = bool(val)
                        elif gate == "not self.undo_permute":
                            active = not val
                        else:
                            raise Unparsed(f"{owner.where(n)}: permute under '{gate}'")
                    sites.append({"call": f"{recv}.{attr}", "function": f"{t[0]}.{t[1]}",
                                  "method": f"{owner.name}.{mname}", "where": owner.where(n),
                                  "gate": gate, "tensor_condition": " / ".join(tensors) or None,
                                  "active": active})
        return sites, delegates

    def refuses(c):
        """The class's own __init__ raises NotImplementedError unconditionally."""
        fn = c.methods.get("__init__")
        return fn is not None and any(
            isinstance(st, ast.Raise) and st.exc is not None
            and dotted(st.exc.func if isinstance(st.exc, ast.Call) else st.exc) ==
            "NotImplementedError" for st in fn.body)

    per_arch, unparsed = {}, []
    for name, cs in sorted(classes.items()):
        if len(cs) > 1:
            unparsed.append({"what": f"converter class {name}",
                             "where": ", ".join(c.where() for c in cs),
                             "reason": "defined more than once; the first definition was read"})
        c = cs[0]
        try:
            v, _ = lookup_attr(name, "model_arch")
            archs = []
            if v is not None and dotted(v) and dotted(v).startswith("gguf.MODEL_ARCH."):
                archs.append(dotted(v).split(".")[-1])
            dynamic = []
            for fn in c.methods.values():
                for n in ast.walk(fn):
                    if (isinstance(n, ast.Assign) and len(n.targets) == 1
                            and dotted(n.targets[0]) == "self.model_arch"):
                        lits = arch_literals(n.value, fn)
                        if lits:
                            archs += lits
                        else:
                            dynamic.append((ast.unparse(n.value), c.where(n)))
            archs = [a for a in dict.fromkeys(archs) if a != "MMPROJ"]
            if not archs:
                continue
            # A class neither registered nor nested in a registered one, nor chosen by the
            # converter's main (Mistral's native format), is a base others extend.
            mistral = const(name, "is_mistral_format") is True
            if not (c.registered or "." in c.qualname or mistral):
                continue
            sites, delegates = permute_sites(name)
            for expr, where in dynamic:
                unparsed.append({"what": f"converter class {c.qualname}", "where": where,
                                 "reason": f"self.model_arch = {expr}: not a literal "
                                 "gguf.MODEL_ARCH member; the architectures it may pick are not "
                                 "read"})
            for a in archs:
                if a not in arch_names:
                    unparsed.append({"what": f"converter class {c.qualname}", "where": c.where(),
                                     "reason": f"gguf.MODEL_ARCH.{a} has no MODEL_ARCH_NAMES "
                                               "entry"})
                    continue
                qk = {"ATTN_Q", "ATTN_K"} & model_tensors.get(a, set())
                # The tensor path every checkpoint takes is modify_tensors; other methods with a
                # permutation (LlamaModel._repack_nvfp4: NVFP4 checkpoints only) are listed apart.
                main = any(s["active"] for s in sites if s["method"].endswith(".modify_tensors"))
                other = sorted({s["method"] for s in sites
                                if s["active"] and not s["method"].endswith(".modify_tensors")})
                entry = {"class": c.qualname, "where": c.where(),
                         "hf_architectures": c.registered, "mistral_native_format": mistral,
                         "undo_permute": const(name, "undo_permute"),
                         "permutes_qk": main and bool(qk),
                         "permute_sites": sites}
                if other and qk and not main:
                    entry["permutes_qk_only_in"] = other
                if any(s["active"] for s in sites) and not qk:
                    entry["note"] = (f"gguf.MODEL_ARCH.{a} writes no attn_q / attn_k tensor "
                                     "(gguf-py MODEL_TENSORS): the q / k permutation finds no "
                                     "tensor of this architecture")
                if delegates:
                    entry["delegates_to"] = delegates
                if refuses(c):
                    entry["refuses"] = (f"{c.where(c.methods['__init__'])}: __init__ raises "
                                        "NotImplementedError")
                per_arch.setdefault(arch_names[a], []).append(entry)
        except Unparsed as e:
            unparsed.append({"what": f"converter class {name}", "where": c.where(),
                             "reason": str(e)})
    return per_arch, unparsed


def converter_summary(entries):
    """permuted_from_hf over the classes that convert a Hugging Face checkpoint themselves (not
    Mistral's native format, not a class that delegates its tensors or refuses to run)."""
    hf = [e for e in entries
          if not e["mistral_native_format"] and "delegates_to" not in e and "refuses" not in e]
    vals = {e["permutes_qk"] for e in hf}
    if not hf:
        permuted = None
    elif len(vals) == 1:
        permuted = vals.pop()
    else:
        permuted = "mixed"
    return {"permuted_from_hf": permuted, "classes": entries}


# ---- main ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp checkout (read only)")
    ap.add_argument("--commit", help="its commit (required when the checkout is not a git work "
                    "tree)")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "tests/golden/llama_cpp/architectures.json")
    a = ap.parse_args()
    root = a.llama_cpp.resolve()
    if not (root / "src/llama-model.cpp").is_file():
        ap.error(f"--llama-cpp must be a llama.cpp checkout (src/llama-model.cpp), got {root}")
    commit = a.commit
    if not commit:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            ap.error(f"--commit is required: {root} is not a git work tree")
        commit = r.stdout.strip()
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        ap.error(f"--commit must be 40 hex digits, got '{commit}'")

    unparsed = []
    enums, names = read_arch_names(root)
    rope, fallback, rope_src = read_rope_types(root, unparsed)
    use_mrope = read_use_mrope(root)
    defaults = read_hparams_defaults(root)
    model_cls, bases, graph_alias, files = read_model_classes(root)
    conv, conv_unparsed = converter_facts(root, read_model_arch_names(root),
                                          read_model_tensors(root))
    unparsed += conv_unparsed

    archs = {}
    for e in enums:
        if e == "LLM_ARCH_UNKNOWN":
            continue
        if e not in names:
            unparsed.append({"what": e, "where": "src/llama-arch.cpp",
                             "reason": "no LLM_ARCH_NAMES entry"})
            continue
        name = names[e]
        entry = {"enum": e}
        if e in rope:
            entry.update(rope[e])
        else:
            entry["rope_type"] = fallback
            entry["rope_type_source"] = (f"{rope_src}: not listed in llama_model_rope_type's "
                                         f"switch; the return after it")
        cls = model_cls.get(e)
        entry["model_class"] = cls
        if cls:
            try:
                m = find_method(files, bases, cls, "load_arch_hparams")
                if m:
                    f, lo, hi, owner = m
                    entry["load_arch_hparams"] = f"{f.where(lo)} ({owner})"
                    swa = read_swa(f, lo, hi, defaults)
                    if swa:
                        entry["swa"] = swa
                    steps = read_nope_step(f, lo, hi)
                    if steps:
                        entry["no_rope_layer_step_set"] = steps
                    rot = read_rot_changes(f, lo, hi)
                    if rot:
                        entry["rotary_dim_set"] = rot
                    qs = read_query_scale(f, lo, hi)
                    if qs:
                        entry["query_scale"] = qs
            except Unparsed as ex:
                unparsed.append({"what": f"{name}: sliding-window layers",
                                 "where": entry.get("load_arch_hparams", cls),
                                 "reason": str(ex)})
            gf, gcls = find_graph(files, bases, graph_alias, cls)
            if gf is None:
                unparsed.append({"what": f"{name}: graph", "where": cls,
                                 "reason": "no graph constructor found for the class or its bases"})
            elif entry.get("rope_type") != "NONE":
                try:
                    rl, per_layer, rargs = read_rope_layers(gf, gcls, e)
                    if rl["kind"] == "nope_step":
                        rl["step_default"] = int(defaults["n_no_rope_layer_step"]["value"])
                        rl["step_default_source"] = defaults["n_no_rope_layer_step"]["source"]
                    entry["rope_layers"] = rl
                    entry["graph_per_layer_base"] = per_layer
                    entry["graph_rope_args"] = rargs
                    entry["graph"] = f"{gf.rel} ({gcls})"
                except Unparsed as ex:
                    unparsed.append({"what": f"{name}: rotated layers",
                                     "where": f"{gf.rel} ({gcls})", "reason": str(ex)})
        entry["converter"] = converter_summary(conv.get(name, []))
        archs[name] = entry

    counts = {t: sum(1 for v in archs.values() if v["rope_type"] == t) for t in ROPE_TYPES}
    counts["with_mrope_sections_variant"] = sum(
        1 for v in archs.values() if "rope_type_with_mrope_sections" in v)
    out = {
        "llama_cpp": {
            "repository": "https://github.com/EricNie-Git/llama.cpp-tq3-release (upstream-"
                          "identical converter, gguf-py and loader)",
            "commit": commit,
            "read": "src/llama-arch.h, src/llama-arch.cpp, src/llama-model.cpp "
                    "(llama_model_rope_type, llama_model_mapping), src/llama-hparams.h, "
                    "src/llama-hparams.cpp, src/models/models.h, src/models/*.cpp "
                    "(load_arch_hparams, graph), conversion/*.py, gguf-py/gguf/constants.py",
            "generator": "scripts/golden/llama_cpp_archs.py",
        },
        "use_mrope": use_mrope,
        "hparams_defaults": defaults,
        "counts": dict(total=len(archs), **counts),
        "architectures": archs,
        "unparsed": unparsed,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    counted = ", ".join(f"{k} {v}" for k, v in out["counts"].items())
    print(f"{a.out}: {len(archs)} architectures ({counted}); {len(unparsed)} unparsed",
          file=sys.stderr)


if __name__ == "__main__":
    main()
