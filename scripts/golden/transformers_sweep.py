#!/usr/bin/python3
"""Every rotary model type of a transformers checkout, swept: its class defaults, its rotary
module and, per layer, whether its own attention layer applies RoPE, measured by running it.

    scripts/golden/transformers_sweep.py --transformers /path/to/transformers [--out tests/golden]

Writes tests/golden/transformers/sweep.json and sweep_cos_sin.npz. Not run by CI; the tests
(tests/python/test_golden_sweep.py) only read what it wrote.

What is swept: every model_type of CONFIG_MAPPING whose modeling files define a
`*RotaryEmbedding` class, `apply_rotary_pos_emb` or `rotate_half` (found in the code, not from
a list). For each:

1. The config class built with nothing (its defaults, after its own processing); the config as
   `save_pretrained` would write it (`to_dict()`) is kept: that is the config.json posenc reads.
2. The decoder's rotary module built from it: per layer type, rope_type, rotary_dim, attention
   factor, float32 inv_freq buffer, the same init function in float64, and the float32 cos / sin
   of POSITIONS, with the pair layout measured from the cos it returns (as transformers.py).
3. Every decoder layer, as the model builds it (the layer list that the model class of the
   config builds in its __init__, read by running that __init__ with recorders: the layer class
   and arguments per layer, so hybrids get each layer's own class), with a small hidden size
   and HEADS heads but the real head_dim, key / value head layout and RoPE keys, in eval mode
   and float64; its attention module run twice on the same hidden states, with the rotary
   module's output (as the model passes it) at positions 0, 1, .., T-1 and at 0, 3, 6, ..:
   the layer applies position (RoPE or a RoPE-driven term) exactly when the two outputs
   differ. A shift of every position would not tell (RoPE's scores depend only on
   differences); a stretch does. The two runs differ only in the positions; what a run needs
   beyond the class defaults is in the entry's "layer_run_variant".

A model type that cannot be run is listed with the reason (the exception, or why it is out of
scope, e.g. a vision encoder's 2-D patch RoPE).
"""

import argparse
import copy
import inspect
import os
import re
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_helpers():
    """scripts/golden/transformers.py (the shared helpers), under a name that is not the
    transformers package's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("golden_transformers",
                                                  os.path.join(HERE, "transformers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


golden = _load_helpers()

ROTARY_CODE = re.compile(r"class \w*RotaryEmbedding\b|def apply_rotary_pos_emb\b|def rotate_half\b")
SEQ = 6  # tokens per layer run
HEADS = 4


def modeling_sources(checkout, cfg_cls):
    """The text of the modeling files beside the config class's module (one family folder)."""
    mod = cfg_cls.__module__  # transformers.models.<family>.configuration_<family>
    folder = os.path.join(checkout, "src", *mod.split(".")[:-1])
    out = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("modeling_") and name.endswith(".py") and not re.match(r"modeling_(tf|flax)_", name):
            with open(os.path.join(folder, name)) as f:
                out.append(f.read())
    return "\n".join(out)


NOT_A_DECODER_PART = re.compile(r"Attention|MLP|Mlp|Expert|Router|Vision|Audio|Encoder|Norm|Embedding|Conv|Mamba")
LAYER_NAME = re.compile(r"(Layer|Block)$")


def decoder_layer_class(modeling):
    """The decoder's layer class: a module class of this file built as (config, layer_idx) whose
    name ends in Layer or Block; a Decoder or Text one where there are several. (The fallback
    of layer_builds, where no model class of the config builds its layers readably.)"""
    import torch

    names = []
    for n in dir(modeling):
        c = getattr(modeling, n)
        if (n.startswith("_") or not isinstance(c, type) or not issubclass(c, torch.nn.Module)
                or c.__module__ != modeling.__name__ or NOT_A_DECODER_PART.search(n)
                or not LAYER_NAME.search(n)):
            continue
        if "layer_idx" in inspect.signature(c.__init__).parameters:
            names.append(n)
    for prefer in ("Decoder", "Text"):
        if len(names) > 1:
            names = [n for n in names if prefer in n] or names
    if len(names) != 1:
        raise RuntimeError(f"decoder layer classes {names}: several kinds of layer and no model "
                           f"class of the config that builds them, not run layer by layer" if names
                           else "no model class of the config builds its layers readably and no "
                           "decoder layer class is built as (config, layer_idx)")
    return getattr(modeling, names[0])


class LayerCall:
    """A layer as a model class builds it: the class and the arguments of its call (the
    config is the sweep's own config object). args may hold nested LayerCalls (a hybrid layer
    built around an attention layer, e.g. Zamba 2)."""

    def __init__(self, cls, args, kwargs, sub=None):
        self.cls, self.args, self.kwargs, self.sub = cls, args, kwargs, sub

    def nested(self):
        return [a for a in list(self.args) + list(self.kwargs.values()) if isinstance(a, LayerCall)]

    def describe(self):
        return self.cls.__name__


def _owners(modeling, cfg):
    """Module classes of the modeling file built from this config class (their __init__'s
    config annotated with it, or config_class, in file order; then the model classes named
    after the config class)."""
    import torch

    name = type(cfg).__name__
    out = []
    for n, c in vars(modeling).items():
        if (not isinstance(c, type) or not issubclass(c, torch.nn.Module)
                or c.__module__ != modeling.__name__ or "__init__" not in c.__dict__):
            continue
        try:
            p = inspect.signature(c.__init__).parameters.get("config")
        except (TypeError, ValueError):
            continue
        ann = getattr(p, "annotation", inspect.Parameter.empty)
        ann_s = ann if isinstance(ann, str) else getattr(ann, "__name__", None) or str(ann)
        if (p is not None and (ann is type(cfg) or re.search(rf"\b{re.escape(name)}\b", ann_s or ""))) \
                or c.__dict__.get("config_class") is type(cfg):
            out.append(c)
    # a model class with an unannotated config, named after the config class
    base = re.sub(r"Config$", "", name)
    for suffix in ("", "Model", "TextModel", "Decoder", "Encoder"):
        c = getattr(modeling, base + suffix, None)
        if (isinstance(c, type) and issubclass(c, torch.nn.Module) and c not in out
                and c.__module__ == modeling.__name__ and "__init__" in c.__dict__):
            out.append(c)
    return out


def _recorded_layers(owner, modeling, cfg):
    """The layers owner.__init__ builds, as LayerCalls: its statements (all but super().__init__)
    run on a stand-in self, with every module class of the modeling file replaced, the layer
    classes (names ending in Layer or Block) by a recorder and the others (embeddings, norms,
    rotary modules, sub-models) by a placeholder that builds nothing; torch.nn's
    ModuleList / ModuleDict are a list / dict. A statement that fails is skipped. The layers are
    the list attribute of self with one entry per layer (num_hidden_layers)."""
    import ast
    import textwrap
    import types

    import torch

    try:
        source = textwrap.dedent(inspect.getsource(owner.__init__))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    if "ModuleList" not in source and "get_layers" not in source:
        return None  # builds no list of layers (an attention, a layer itself, a wrapper)
    fn = tree.body[0]
    # the statements run on a copy of the config (an __init__ may write to its config); the
    # recorded arguments get the config itself back
    real, cfg = cfg, copy.deepcopy(cfg)

    def is_super_call(st):
        return (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
                and isinstance(st.value.func, ast.Attribute)
                and isinstance(st.value.func.value, ast.Call)
                and isinstance(st.value.func.value.func, ast.Name)
                and st.value.func.value.func.id == "super")

    def nothing(*a, **k):
        return None

    class Built:  # a module class's call, not run (which rotary class the owner builds)
        def __init__(self, cls):
            self.cls = cls

    class NN:
        ModuleList = staticmethod(lambda x=(): list(x))
        ModuleDict = staticmethod(lambda x=None: dict(x or {}))

        def __getattr__(self, name):
            return nothing

    env = dict(vars(modeling))
    for n, c in vars(modeling).items():
        if isinstance(c, type) and issubclass(c, torch.nn.Module):
            if LAYER_NAME.search(n):
                env[n] = (lambda cls: lambda *a, **k: LayerCall(cls, a, k))(c)
            else:
                env[n] = (lambda cls: lambda *a, **k: Built(cls))(c)
        elif isinstance(c, type) and hasattr(c, "from_config"):
            env[n] = nothing
    env["nn"] = NN()

    class StandIn:
        def __getattr__(self, name):
            v = getattr(owner, name)
            return types.MethodType(v, self) if inspect.isfunction(v) else v

    # the methods the statements call run on the stand-in too, with the replaced names
    def rebind(f):
        return types.FunctionType(f.__code__, env, f.__name__, f.__defaults__, f.__closure__)

    class Owner(StandIn):
        pass

    for k, v in vars(owner).items():
        if inspect.isfunction(v) and k != "__init__":
            setattr(Owner, k, rebind(v))
    this = Owner()
    this.config = cfg
    sig = inspect.signature(owner.__init__)
    env.update({k: (p.default if p.default is not inspect.Parameter.empty else None)
                for k, p in sig.parameters.items() if k not in ("self", "config")})
    env.update({"self": this, "config": cfg})
    for st in fn.body:
        if is_super_call(st):
            continue
        try:
            exec(compile(ast.Module(body=[st], type_ignores=[]), "<owner>", "exec"), env)
        except Exception:  # noqa: BLE001  (a statement that needs what is not built here)
            pass
    n = real.num_hidden_layers
    # one entry per layer; or per k layers where each holds k attention sublayers (LongCat Flash:
    # num_hidden_layers = 2 * num_layers, an attention pair per decoder layer)
    found = [(k, v) for k, v in vars(this).items()
             if isinstance(v, list) and v and n % len(v) == 0 and all(isinstance(x, LayerCall) for x in v)]
    if len(found) > 1:
        found = [f for f in found if len(f[1]) == n]
    if len(found) != 1:
        return None

    twins = {id(cfg): real}
    for k, v in vars(cfg).items():
        if hasattr(v, "to_dict") and hasattr(v, "model_type") and hasattr(real, k):
            twins[id(v)] = getattr(real, k)

    def back(v):
        if id(v) in twins:
            return twins[id(v)]
        if isinstance(v, LayerCall):
            return LayerCall(v.cls, tuple(back(a) for a in v.args), {k: back(a) for k, a in v.kwargs.items()})
        return v

    rotary = sorted({v.cls.__name__ for v in vars(this).values()
                     if isinstance(v, Built) and v.cls.__name__.endswith("RotaryEmbedding")})
    return found[0][0], [back(c) for c in found[0][1]], rotary


def layer_builds(modeling, cfg):
    """Per layer, the layer the model builds (a LayerCall), how that was found, and the rotary
    classes the model class that builds them builds beside them."""
    got = []
    for owner in _owners(modeling, cfg):
        r = _recorded_layers(owner, modeling, cfg)
        if r is not None:
            got.append((owner.__name__, r[0], r[1], r[2]))
    if len(got) > 1:  # e.g. an encoder and a decoder on one config class: the decoder's
        got = [g for g in got if "Decoder" in g[0]] or [g for g in got if "Encoder" not in g[0]] or got
    if got:
        owner, attr, calls, rotary = got[0]
        kinds = sorted({c.describe() for c in calls})
        how = f"{owner}.__init__ builds self.{attr}: {', '.join(kinds)}"
        per = cfg.num_hidden_layers // len(calls)
        if per > 1:  # layer k: attention sublayer k % per of decoder layer k // per
            calls = [LayerCall(c.cls, c.args, c.kwargs, sub) for c in calls for sub in range(per)]
            how += (f" ({len(calls) // per} layers of {per} attention sublayers each: layer k is "
                    f"sublayer k % {per} of layer k // {per})")
        if len(got) > 1:
            how += f" (also built by {', '.join(g[0] for g in got[1:])})"
        return calls, how, rotary
    cls = decoder_layer_class(modeling)
    calls = [LayerCall(cls, (cfg, i), {}) for i in range(cfg.num_hidden_layers)]
    how = f"{cls.__name__}(config, layer_idx) (no model class of the config builds its layers readably)"
    return calls, how, []


NOT_DECODER_ROTARY = re.compile(r"Vision|Audio|DiT|ViT|3D|SaProt|Patch")


def rotary_class(modeling, text):
    """The decoder's rotary class: the one the text model builds (`self.rotary_emb = X(`), else
    the single non-vision rotary class of the file."""
    src = inspect.getsource(modeling)
    used = sorted(set(re.findall(r"self\.rotary_emb\s*=\s*(\w+RotaryEmbedding)\(", src)))
    used = [n for n in used if not NOT_DECODER_ROTARY.search(n) and hasattr(modeling, n)]
    if len(used) > 1:
        used = [n for n in used if "Text" in n] or used
    if len(used) == 1:
        return getattr(modeling, used[0])
    return golden.rotary_class(modeling, text)


# MLP / expert counts the class may leave None (a checkpoint gives them); the attention run does
# not read them, but the layer cannot be built without them: filled, and recorded.
MLP_ONLY_FILLS = {"n_routed_experts": 2, "num_experts": 2, "num_local_experts": 2,
                  "num_experts_per_tok": 1, "n_shared_experts": 1, "intermediate_size": 8,
                  "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8}


def _set(cfg, k, v):
    k = cfg.attribute_map.get(k, k) if isinstance(getattr(cfg, "attribute_map", None), dict) else k
    object.__setattr__(cfg, k, v)


def tiny(text_cfg, variant):
    """The same config with a small hidden size and HEADS heads, head_dim and RoPE keys kept, few
    experts; set on the instance after the class's processing, so layer_types and the RoPE block
    stay the ones the class derived. Returns {key: class value} of what it changed; what it
    filled where the class leaves None goes to variant."""
    try:
        head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
    except Exception:  # noqa: BLE001  (a per-layer head_dim, Gemma 4: each layer keeps its own)
        head_dim = text_cfg.per_layer_config[0].head_dim
    # key / value heads as the class has them: as many as the query heads (MHA, also MLA, whose
    # kv_b_proj makes one key per query head), one (MQA), else HEADS // 2 (GQA, groups of 2)
    heads, kv = getattr(text_cfg, "num_attention_heads", None), getattr(text_cfg, "num_key_value_heads", None)
    kv_small = HEADS if kv is None or kv == heads else 1 if kv == 1 else HEADS // 2
    small = {"hidden_size": HEADS * head_dim, "num_attention_heads": HEADS, "num_key_value_heads": kv_small,
             "intermediate_size": 8, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8,
             "num_experts": 2, "num_local_experts": 2, "n_routed_experts": 2, "num_experts_per_tok": 1,
             "n_shared_experts": 1, "first_k_dense_replace": 0, "vocab_size": 16,
             # the sparse-attention indexer's heads (DeepSeek V3.2 / V4, GLM DSA): it picks the
             # top index_topk keys, all of the SEQ here whatever its size
             "index_n_heads": HEADS}
    changed = {}
    for k, v in small.items():
        if not hasattr(text_cfg, k):
            continue
        old = getattr(text_cfg, k)
        if old is None:
            if k in MLP_ONLY_FILLS:
                variant[k] = {"class_value": None, "run": v, "why": "an MLP / expert size the "
                              "class leaves None; only the MLP reads it, the attention run does not"}
                _set(text_cfg, k, v)
            elif k == "num_key_value_heads" and heads is not None:
                variant[k] = {"class_value": None, "run": v, "why": "None in the class defaults (its "
                              "__post_init__ gives no fallback) and the attention divides by it: one "
                              "key / value head per query head (MHA)"}
                _set(text_cfg, k, v)
            continue
        changed[k] = old
        # a per-layer list (Gemma 3n's intermediate_size, Ernie 4.5 VL's per-modality sizes)
        _set(text_cfg, k, [v] * len(old) if isinstance(old, (list, tuple)) and k.endswith("_size") else v)
    if hasattr(text_cfg, "mlp_layer_types") and text_cfg.mlp_layer_types is None:
        n = text_cfg.num_hidden_layers
        variant["mlp_layer_types"] = {"class_value": None, "run": ["dense"] * n, "why": "the MLP "
                                      "kind of each layer (sparse or dense), None in the class "
                                      "defaults; the attention run does not read it"}
        _set(text_cfg, "mlp_layer_types", ["dense"] * n)
    try:
        if getattr(text_cfg, "head_dim", None) is None:
            object.__setattr__(text_cfg, "head_dim", head_dim)
    except Exception:  # noqa: BLE001  (per-layer head_dim)
        pass
    text_cfg._attn_implementation = "eager"
    return changed


def attention_of(layer, sub=None):
    """The attention submodule of a decoder layer: the one whose forward takes
    position_embeddings (entry sub of a list of them, LongCat Flash); else one that takes
    position_ids and holds its own rotary module (Moshi, Kyutai: the attention computes cos /
    sin from position_ids itself)."""
    import torch

    for _, m in layer.named_children():
        if (sub is not None and isinstance(m, torch.nn.ModuleList) and len(m) > sub
                and "position_embeddings" in inspect.signature(m[sub].forward).parameters):
            return m[sub]
        if isinstance(m, torch.nn.ModuleList):
            continue
        if "position_embeddings" in inspect.signature(m.forward).parameters:
            return m
    for _, m in layer.named_children():
        if ("position_ids" in inspect.signature(m.forward).parameters
                and any(type(x).__name__.endswith("RotaryEmbedding") for x in m.modules())):
            return m
    return None


def _build(call, seed):
    """(layer, its attention submodule or None, the LayerCall built) of a LayerCall; for a hybrid
    layer built around other layers (Zamba 2: a shared attention layer, a linear, a Mamba
    layer), the nested layer that has the attention. The layer is in eval mode (no dropout: a
    module is built in training mode, and attention dropout would make the two runs differ by
    chance); its attention is float64 (the rest is not run: left as built, its expert weights
    need not be copied)."""
    import torch

    parts = call.nested() or [call]
    layer = None
    for part in parts:
        torch.manual_seed(seed)
        layer = part.cls(*part.args, **part.kwargs).eval()
        attn = attention_of(layer, call.sub)
        if attn is not None:
            return layer, attn.to(torch.float64), part
    return layer, None, parts[-1]


CONTEXT = 2  # tokens of context_hidden_states (MuseGlimmer assistant: keys / values before the block)


def _required(params, name):
    """Whether a forward's signature has parameter name without a default."""
    return name in params and params[name].default is inspect.Parameter.empty


def _no_mask(attn, n_q, n_kv):
    """The mask that lets every query see every key: None, or an all-zero additive (1, 1, n_q,
    n_kv) float64 mask where the eager path adds the mask without checking for None (the
    module's eager_attention_forward: ModernBERT decoder; the attention's own forward: Falcon)."""
    import sys

    import torch

    eager = getattr(sys.modules.get(type(attn).__module__), "eager_attention_forward", None)
    for f in (eager, type(attn).forward):
        try:
            src = inspect.getsource(f) if f is not None else ""
        except (OSError, TypeError):
            continue
        if re.search(r"\+ attention_mask\b", src) and "attention_mask is not None" not in src:
            return torch.zeros(1, 1, n_q, n_kv, dtype=torch.float64)
    return None


def _attention_kwargs(attn, cfg, h, pos, rot, per_type, layer_type, ctx, opts, i):
    """The arguments of the attention's forward for positions pos, as the decoder layer passes
    them: position_embeddings as the rotary module returns them (cos, sin; a complex freqs_cis; a
    {rope layer type: (cos, sin)} dict where the attention picks one), position_ids where it
    takes them, alibi None (Falcon: RoPE or ALiBi, the RoPE configuration here), no mask
    (_no_mask) where the attention takes one, context_hidden_states (queries on the last SEQ
    positions), encoder_hidden_states for a merged self- and cross-attention, the layer index
    where the forward needs it, cu_seqlens of one sequence."""
    import torch

    params = inspect.signature(attn.forward).parameters
    n_kv = h.shape[1] + (ctx.shape[1] if ctx is not None and "context_hidden_states" in params else 0)
    if n_kv != h.shape[1]:
        pos = torch.arange(n_kv)[None] * int(pos[0, 1] - pos[0, 0])
    rot_pos = torch.arange(cfg.num_attention_heads)[None] if opts.get("head_positions") else pos
    kwargs = {"hidden_states": h, "attention_mask": _no_mask(attn, h.shape[1], n_kv)}
    if "position_embeddings" in params:
        ann = str(params["position_embeddings"].annotation)
        with golden.float64_rope_init():
            if getattr(rot, "_posenc_mrope", False):
                pe = rot(h, rot_pos.expand(3, 1, -1))
            elif per_type and "dict[" in ann:
                pe = {lt: rot(h, rot_pos, lt) for lt in sorted(rot.rope_type)}
            else:
                pe = rot(h, rot_pos, layer_type) if per_type else rot(h, rot_pos)
        kwargs["position_embeddings"] = pe
    if "attention_mask" not in params:  # not the attention's (GLM-ASR passes its own None)
        del kwargs["attention_mask"]
    if "position_ids" in params:
        kwargs["position_ids"] = pos
    if "alibi" in params:
        kwargs["alibi"] = None
    if "context_hidden_states" in params:
        kwargs["context_hidden_states"] = ctx
    if _required(params, "encoder_hidden_states"):
        # merged self- and cross-attention (T5Gemma 2's decoder): the encoder's tokens, the same in
        # both runs, after the decoder's own keys; the mask covers both
        kwargs["encoder_hidden_states"] = ctx
        if "merged_attention_mask" in params:
            kwargs["merged_attention_mask"] = _no_mask(attn, h.shape[1], h.shape[1] + ctx.shape[1])
    if _required(params, "layer_idx"):
        kwargs["layer_idx"] = i  # a shared attention told which layer it runs as (Zamba 2)
    if _required(params, "cu_seqlens"):
        kwargs["cu_seqlens"] = torch.tensor([0, h.shape[1]], dtype=torch.int32)  # one sequence
    return kwargs


def _randomise(attn, seed):
    """Random attention weights (float32 draws, float64 values): a matrix (or higher) with
    standard deviation 1 / sqrt(fan in), so that the attention logits stay of order one (a
    saturated softmax, one-hot whatever the positions, would hide the positions: Dia's layer 3
    measured 0 with N(0, 0.25) weights on 2048 inputs); a vector (norm weight, bias)
    0.5 N(0, 1)."""
    import math

    import torch

    torch.manual_seed(seed)
    for p in attn.parameters():
        scale = 1.0 / math.sqrt(math.prod(p.shape[1:])) if p.dim() >= 2 else 0.5
        with torch.no_grad():
            # drawn in float32 (twice as fast as float64 here), used as float64
            p.copy_(torch.randn(p.shape, dtype=torch.float32).to(torch.float64) * scale)


def layer_applies_position(calls, cfg, i, rot, per_type, layer_type, rot_type_of, opts):
    """Layer i run twice, at positions 0, 1, .., SEQ-1 and 0, 3, 6, ..: its attention applies
    position exactly when the outputs differ. rot_type_of(layer index) is the rotary layer type
    of a layer (for a KV-sharing layer's source)."""
    import torch

    layer, attn, part = _build(calls[i], i)
    out = {}
    if part is not calls[i]:
        out["attention_layer"] = part.describe()
    if attn is None:
        return {**out, "attention": None, "note": "no submodule takes position_embeddings (no "
                                                  "attention of this kind, e.g. a linear / recurrent layer)"}
    _randomise(attn, 1000 + i)
    params = inspect.signature(attn.forward).parameters
    # KV sharing (Gemma 4): a shared layer attends to the keys / values that an earlier layer of
    # its type stored in shared_kv_states; that layer's attention is run first on the same
    # hidden states and positions
    source = None
    if "shared_kv_states" in params and getattr(attn, "is_kv_shared_layer", False):
        for j in range(i - 1, -1, -1):
            _, aj, _ = _build(calls[j], j)
            if (aj is not None and getattr(aj, "store_full_length_kv", False)
                    and getattr(aj, "layer_type", None) == getattr(attn, "layer_type", None)):
                _randomise(aj, 1000 + j)
                source = (j, aj)
                break
        if source is None:
            raise RuntimeError("a KV-sharing layer with no earlier layer that stores its keys / values")
        out["kv_from_layer"] = source[0]
    gen = torch.Generator().manual_seed(7)
    # the attention's input width: hidden_size, or Zamba's attention_hidden_size (the hidden
    # states concatenated with the embeddings)
    width = getattr(attn, "attention_hidden_size", None) or cfg.hidden_size
    h = torch.randn(1, SEQ, width, generator=gen, dtype=torch.float64)
    ctx = torch.randn(1, CONTEXT, width, generator=gen, dtype=torch.float64)
    if "context_hidden_states" in params:
        out["context_tokens"] = CONTEXT
    if _required(params, "encoder_hidden_states"):
        out["encoder_tokens"] = CONTEXT
    if "position_embeddings" not in params:
        out["positions_via"] = "position_ids (the attention's own rotary module)"
    outs = []
    for stride in (1, 3):
        pos = torch.arange(SEQ)[None] * stride
        kwargs = _attention_kwargs(attn, cfg, h, pos, rot, per_type, layer_type, ctx, opts, i)
        if "shared_kv_states" in params:
            kwargs["shared_kv_states"] = {}
            if source is not None:
                kw = _attention_kwargs(source[1], cfg, h, pos, rot, per_type, rot_type_of(source[0]), ctx,
                                       opts, source[0])
                with torch.no_grad():
                    source[1](**kw, shared_kv_states=kwargs["shared_kv_states"])
        with torch.no_grad():
            o = attn(**kwargs)
        outs.append(o[0] if isinstance(o, tuple) else o)
    diff = float((outs[0] - outs[1]).abs().max())
    return {**out, "attention": type(attn).__name__, "applies_position": diff > 0.0, "max_change": diff}


def _where(e):
    """The innermost frame of transformers' code in an exception's traceback: file:line and text."""
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if os.sep + "transformers" + os.sep in fr.filename and "configuration_utils" not in fr.filename:
            return f" (at {os.path.basename(fr.filename)}:{fr.lineno}: {(fr.line or '').strip()[:120]})"
    return ""


MROPE_LITERAL = re.compile(r"[\"']mrope_section[\"']\s*:\s*\[([\d,\s]+)\]")


def _mrope_section(checkout, text, half):
    """An mrope_section for a config whose class gives none, from the model's own tests (its
    family's tests/models/<family>/test_modeling_*.py), else from the project's published golden
    configs of the model type (tests/golden/configs), else from another family's tests; the
    first that splits the rotary half (sums to half). Text positions make the three rows equal,
    so the split does not change cos / sin; the attention only needs one."""
    import glob
    import json

    family = type(text).__module__.split(".")[-2]
    tests = os.path.join(checkout, "tests", "models")

    def literals(path):
        try:
            with open(path) as f:
                return [[int(x) for x in m.split(",") if x.strip()] for m in MROPE_LITERAL.findall(f.read())]
        except OSError:
            return []

    for path in sorted(glob.glob(os.path.join(tests, family, "test_modeling_*.py"))):
        for v in literals(path):
            if sum(v) == half:
                return v, os.path.relpath(path, checkout) + " (transformers)"
    gold = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "golden", "configs"))
    for path in sorted(glob.glob(os.path.join(gold, "*.json"))):
        try:
            with open(path) as f:
                c = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(c, dict) or c.get("model_type") not in (text.model_type,
                                                                    text.model_type.replace("_text", "")):
            continue
        for sub in (c, c.get("text_config") or {}):
            for key in ("rope_scaling", "rope_parameters"):
                v = (sub.get(key) or {}).get("mrope_section")
                if v and sum(v) == half:
                    return v, f"tests/golden/configs/{os.path.basename(path)} (published config)"
    for path in sorted(glob.glob(os.path.join(tests, "*", "test_modeling_*.py"))):
        for v in literals(path):
            if sum(v) == half:
                return v, os.path.relpath(path, checkout) + " (transformers; another family's test)"
    return None, None


def _test_literal(checkout, text, key):
    """(value, file) of `key=<number>` in the family's tests (a tester's default)."""
    import glob

    family = type(text).__module__.split(".")[-2]
    for path in sorted(glob.glob(os.path.join(checkout, "tests", "models", family, "test_modeling_*.py"))):
        with open(path) as f:
            m = re.search(rf"\b{key}\s*=\s*([0-9.]+)\b", f.read())
        if m:
            v = float(m.group(1))
            return (int(v) if v.is_integer() else v), os.path.relpath(path, checkout) + " (transformers)"
    return None


def _config_objects(cfg):
    """cfg and its sub-configs (attributes that are configs), by object."""
    out = [cfg]
    for k, v in vars(cfg).items():
        if hasattr(v, "to_dict") and v is not cfg and hasattr(v, "model_type"):
            out.append(v)
    return out


def _parent_value(text, attr):
    """(value, where) for a config attribute a sub-config class lacks but a parent config of
    its family sets on it (T5Gemma: `self.decoder.cross_attention_hidden_size =
    self.encoder.hidden_size`): the value on that sub-config of the parent built with its
    defaults."""
    import importlib

    mod = importlib.import_module(type(text).__module__)
    for n, c in vars(mod).items():
        if (not isinstance(c, type) or c.__module__ != mod.__name__ or c is type(text)
                or not hasattr(c, "to_dict") or "__post_init__" not in c.__dict__):
            continue
        try:
            parent = c()
        except Exception:  # noqa: BLE001
            continue
        subs = [(k, v) for k, v in vars(parent).items() if hasattr(v, "to_dict")]
        subs += [(f"{k}.{k2}", v2) for k, v in subs for k2, v2 in vars(v).items() if hasattr(v2, "to_dict")]
        for k, v in subs:
            if type(v) is type(text) and attr in vars(v):
                return vars(v)[attr], f"{n}() sets it on its {k} ({type(text).__name__})"
    return None, None


def run_variant(mt, checkout, cfg, text, modeling, rot, calls, variant, opts):
    """What a layer run needs beyond the class defaults, each recorded in variant:
    - mrope_section where the attention reads it and the class gives none;
    - rotary positions that are not the token positions (Xcodec 2: the head indices);
    - DBRX's clip_qkv (None in the class, refused by the attention's clamp): its tests' value;
    - a config attribute the layer reads that the class lacks: the value a parent config sets
      on it (T5Gemma's dropout_rate, cross_attention_hidden_size), an MLP size (the attention
      run does not read it), num_key_value_heads (MHA), or the RoPE theta an attention stores
      and does not use (DBRX: attn_config.rope_theta, the model's rope_theta)."""
    src = inspect.getsource(modeling)
    rp = getattr(text, "rope_parameters", None)
    if (isinstance(rp, dict) and "mrope_section" not in rp and "rope_parameters[\"mrope_section\"]" in src
            and getattr(rot, "_posenc_mrope", False)
            and not isinstance(getattr(rot, "rope_type", None), dict)):
        half = rot.inv_freq.numel()
        v, where = _mrope_section(checkout, text, half)
        if v is not None:
            rp["mrope_section"] = v
            variant["rope_parameters.mrope_section"] = {
                "class_value": None, "run": v, "from": where,
                "why": "the attention reads rope_parameters['mrope_section'], which the class "
                       "defaults lack; with text positions the three rows are equal, so the split "
                       "does not change cos / sin"}
    if re.search(r"position_ids\s*=\s*torch\.arange\(self\.num_attention_heads", src):
        opts["head_positions"] = True
        variant["rotary_positions"] = {
            "run": "the head indices 0 .. num_attention_heads - 1, in both runs",
            "why": "the model computes position_ids = arange(num_attention_heads) (one angle per "
                   "head, the same for every token), not from the token positions; the layer is "
                   "run as the model runs it, so the stretched token positions do not reach it"}
    # DBRX: the attention clamps q, k, v to +-clip_qkv with no check for None, which torch
    # refuses (clamp with neither bound); the class default is None: its tests' value
    sub = getattr(text, "attn_config", None)
    if (sub is not None and getattr(sub, "clip_qkv", 0) is None
            and "clamp(min=min_val, max=self.clip_qkv)" in src):
        v = _test_literal(checkout, text, "clip_qkv")
        if v is not None:
            object.__setattr__(sub, "clip_qkv", v[0])
            variant[f"{type(sub).__name__}.clip_qkv"] = {
                "class_value": None, "run": v[0], "from": v[1],
                "why": "the attention calls clamp(min=-clip_qkv, max=clip_qkv), which torch refuses "
                       "with both bounds None; clipping q, k, v does not decide whether RoPE is applied"}
    # attributes the layer reads that the class defaults lack
    seen = set()
    for _ in range(8):
        missing = None
        for c in calls:
            if c.describe() in seen:
                continue
            try:
                _build(c, 0)
                seen.add(c.describe())
            except AttributeError as e:
                obj, name = getattr(e, "obj", None), getattr(e, "name", None)
                if name and any(obj is o for o in _config_objects(text)):
                    missing = (obj, name)
                break
            except Exception:  # noqa: BLE001  (recorded by the layer run)
                seen.add(c.describe())
        if missing is None:
            return
        obj, name = missing
        value, where = _parent_value(text, name)
        if where is None and name in MLP_ONLY_FILLS:
            value, where = MLP_ONLY_FILLS[name], ("an MLP / expert size the class lacks but its MLP "
                                                  "reads; the attention run does not")
        if where is None and name == "num_key_value_heads" and obj is text:
            value, where = text.num_attention_heads, ("the class has no num_key_value_heads but the "
                                                      "decoder layer reads it: one key / value head "
                                                      "per query head (MHA)")
        if where is None and name == "rope_theta" and isinstance(rp, dict) and "rope_theta" in rp:
            value, where = rp["rope_theta"], ("the model's rope_parameters['rope_theta'] (as DBRX's tests "
                                              "pass it in attn_config); the attention stores it, unused")
        if where is None:
            return
        object.__setattr__(obj, name, value)
        key = name if obj is text else f"{type(obj).__name__}.{name}"
        variant[key] = {"class_value": "absent", "run": value, "from": where}


def _mark_mrope(rot_cls, text):
    """M-RoPE: the rotary module takes (3, batch, T) position ids (text positions: three equal rows)."""
    fwd = inspect.getsource(rot_cls.forward)
    rot_cls._posenc_mrope = ("mrope_section" in (getattr(text, "rope_parameters", None) or {})
                             or "expand(3" in fwd or "mrope" in fwd)



APPLY_FUNCTIONS = ["apply_rotary_pos_emb", "apply_multimodal_rotary_pos_emb", "_apply_rotary_emb",
                   "apply_rotary_pos_emb_interleave"]


def pair_layout(modeling, text, rope, D=8):
    """Which dims the model rotates together, measured by calling the modeling file's own apply
    function on the basis vectors of a head of D dims (cos, sin of one angle): input dims i and j
    are a pair when some output dim takes both (a permutation of the output, as DeepSeek V3's
    de-interleave, changes nothing). "half": (i, i + D/2); "interleaved": (2i, 2i + 1). A model
    whose rotary module returns complex freqs_cis (Llama 4, DeepSeek V2) multiplies adjacent dims
    as complex numbers: interleaved, from the cos layout of its goldens."""
    import torch

    names = list(APPLY_FUNCTIONS)
    if getattr(text, "rope_interleave", False):
        names.insert(0, "apply_rotary_pos_emb_interleave")
    fn = next((getattr(modeling, n) for n in names if hasattr(modeling, n)), None)
    if fn is None:
        layouts = {g["cos_sin_layout"] for g in rope.values()}
        if layouts == {"interleaved"}:
            return {"layout": "interleaved", "how": "complex freqs_cis (no (q, k, cos, sin) apply "
                                                   "function): adjacent dims as complex numbers"}
        return {"layout": None, "how": f"no apply function among {names}"}
    sig = list(inspect.signature(fn).parameters)
    e = torch.eye(D, dtype=torch.float64)[None, :, None, :]  # (1, H = D, T = 1, D)
    err = None
    for width in (D, D // 2):  # gpt-oss's cos has one value per pair
        a = torch.full((1, 1, width), 0.5, dtype=torch.float64)
        cos, sin = a.cos(), a.sin()
        try:
            if "mrope_section" in sig:
                out = fn(e, e.clone(), cos.expand(3, 1, 1, width), sin.expand(3, 1, 1, width),
                         [D // 2, 0, 0])[0]
            elif sig[1] == "cos":  # Gemma 3n / 4: apply_rotary_pos_emb(x, cos, sin)
                out = fn(e, cos, sin)
            else:
                out = fn(e, e.clone(), cos, sin)[0]
            break
        except Exception as ex:  # noqa: BLE001
            err = f"{type(ex).__name__}: {ex}"[:160]
    else:
        return {"layout": None, "how": f"{fn.__name__}: {err}"}
    m = out[0, :, 0, :].abs() > 1e-12  # m[i, r]: input e_i reaches output r
    partners = [[j for j in range(D) if j != i and bool((m[i] & m[j]).any())] for i in range(D)]
    if all(p == [i ^ 1] for i, p in enumerate(partners)):
        return {"layout": "interleaved", "how": fn.__name__}
    if all(p == [(i + D // 2) % D] for i, p in enumerate(partners)):
        return {"layout": "half", "how": fn.__name__}
    return {"layout": None, "how": f"{fn.__name__}: pairs {partners}"}

def sweep_one(mt, cfg_cls, checkout, arrays):
    import torch

    cfg = cfg_cls()
    text = golden.text_config_of(cfg)
    if not any(hasattr(text, k) for k in ("max_position_embeddings", "rope_parameters")):
        raise OutOfScope(f"{type(text).__name__} has neither max_position_embeddings nor "
                         f"rope_parameters: a vision, audio or codec part, not a text decoder")
    saved = cfg.to_dict()
    entry = {"config_class": cfg_cls.__name__, "text_config_class": type(text).__name__,
             "config": golden.jsonable(_plain(saved)), "processed": golden.rope_view(text)}
    modeling = golden.modeling_module(text)
    rot_cls = rotary_class(modeling, text)
    _mark_mrope(rot_cls, text)
    # the layers (and the rotary module) that the model class of this config builds
    try:
        calls, layer_classes, owner_rotary = layer_builds(modeling, text)
        not_built = None
    except Exception as e:  # noqa: BLE001  (raised after the RoPE goldens: they do not need it)
        calls, layer_classes, owner_rotary, not_built = None, None, [], e
    run_rot_cls = rot_cls
    if len(owner_rotary) == 1 and owner_rotary[0] != rot_cls.__name__:
        run_rot_cls = getattr(modeling, owner_rotary[0])
        if re.search(r"position_ids\[:, *[01]\]", inspect.getsource(run_rot_cls.forward)):
            raise OutOfScope(f"{layer_classes.split('.')[0]} builds {run_rot_cls.__name__}, a 2-D RoPE "
                             f"over (w, h) patch positions: a vision part, not a text decoder")
        _mark_mrope(run_rot_cls, text)
    entry["rotary_class"] = rot_cls.__name__
    entry["rope"] = golden.rope_goldens(rot_cls, text, arrays, f"{mt}/")
    entry["layer_plan"] = golden.layer_plan(text)
    entry["pair_layout"] = pair_layout(modeling, text, entry["rope"])
    if not_built is not None:
        raise not_built
    # per layer, run the layer the model builds, with a small hidden size
    entry["layer_classes"] = layer_classes
    if run_rot_cls is not rot_cls:
        entry["layer_run_rotary_class"] = run_rot_cls.__name__
    with golden.float64_rope_init():
        rot = run_rot_cls(text)
    per_type = isinstance(getattr(rot, "rope_type", None), dict) and bool(rot.rope_type)
    variant = {}
    entry["tiny"] = {k: golden.jsonable(v) for k, v in tiny(text, variant).items()}
    opts = {}
    run_variant(mt, checkout, cfg, text, modeling, rot, calls, variant, opts)
    if variant:
        entry["layer_run_variant"] = golden.jsonable(variant)
    types_ = getattr(text, "layer_types", None)

    def rot_type_of(j):
        lt = types_[j] if types_ else None
        return lt if per_type and lt in rot.rope_type else (sorted(rot.rope_type)[0] if per_type else None)

    layers = []
    for i in range(text.num_hidden_layers):
        lt = types_[i] if types_ else None
        try:
            r = layer_applies_position(calls, text, i, rot, per_type, rot_type_of(i), rot_type_of, opts)
        except Exception as e:  # noqa: BLE001  (recorded per layer)
            r = {"attention": None, "error": f"{type(e).__name__}: {e}"[:300] + _where(e)}
        r["layer_type"] = lt
        layers.append(r)
    entry["layers"] = layers
    del torch
    return entry


def _plain(d):
    """to_dict() without the keys that are no config.json content (dtype objects, private)."""
    return {k: v for k, v in d.items() if not k.startswith("_") and k not in ("dtype", "torch_dtype")}


class OutOfScope(Exception):
    """A rotary model type whose RoPE is not a text decoder's (vision patches, audio frames)."""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transformers", required=True)
    ap.add_argument("--transformers-commit", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "golden"))
    ap.add_argument("--only", nargs="*", help="model types (default: all)")
    args = ap.parse_args()
    transformers = golden.setup(args.transformers)
    # the decoder layers are built here (the scaffold's placeholder refuses): a plain module
    import torch
    import transformers.modeling_layers as ml

    class GradientCheckpointingLayer(torch.nn.Module):
        pass

    ml.GradientCheckpointingLayer = GradientCheckpointingLayer
    golden.ENVIRONMENT.append("sweep: transformers.modeling_layers.GradientCheckpointingLayer is "
                              "a plain torch.nn.Module, so that decoder layers can be built")
    commit = args.transformers_commit or golden.commit_of(args.transformers)
    if not commit:
        sys.exit("--transformers-commit is required")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    import warnings
    import logging

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    swept, not_run, out_of_scope, no_rotary, arrays = {}, {}, {}, [], {}
    for mt in sorted(CONFIG_MAPPING_NAMES):
        if args.only and mt not in args.only:
            continue
        try:
            cls = CONFIG_MAPPING[mt]
            src = modeling_sources(args.transformers, cls)
        except Exception as e:  # noqa: BLE001
            not_run[mt] = f"config class not importable: {type(e).__name__}: {e}"[:300]
            continue
        if not ROTARY_CODE.search(src):
            no_rotary.append(mt)
            continue
        try:
            swept[mt] = sweep_one(mt, cls, args.transformers, arrays)
            print(f"sweep: {mt}: ok", file=sys.stderr)
        except OutOfScope as e:
            out_of_scope[mt] = str(e)
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)[-1]
            not_run[mt] = (f"{type(e).__name__}: {e}"[:300] +
                           f" (at {os.path.basename(tb.filename)}:{tb.lineno})")
            print(f"sweep: {mt}: not run: {not_run[mt]}", file=sys.stderr)
    out = os.path.abspath(args.out)
    import numpy as np

    golden.write_json(os.path.join(out, "transformers", "sweep.json"), {
        "transformers_commit": commit, "transformers_version": transformers.__version__,
        "generator": "scripts/golden/transformers_sweep.py",
        "environment": golden.ENVIRONMENT, "positions": golden.POSITIONS,
        "layer_run": {"seq": SEQ, "heads": HEADS, "strides": [1, 3], "dtype": "float64",
                      "mode": "eval (no dropout)",
                      "weights": "attention parameters random: matrices N(0, 1) / sqrt(fan in), "
                                 "vectors 0.5 N(0, 1)",
                      "context_tokens": CONTEXT},
        "counts": {"model_types": len(CONFIG_MAPPING_NAMES), "rotary": len(swept) + len(not_run) + len(out_of_scope),
                   "swept": len(swept), "not_run": len(not_run), "not_a_text_decoder": len(out_of_scope), "no_rotary_code": len(no_rotary)},
        "model_types": swept, "not_run": not_run, "not_a_text_decoder": out_of_scope, "no_rotary_code": no_rotary})
    np.savez_compressed(os.path.join(out, "transformers", "sweep_cos_sin.npz"), **arrays)


if __name__ == "__main__":
    main()
