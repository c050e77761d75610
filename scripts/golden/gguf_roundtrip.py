#!/usr/bin/env python3
"""Converts each swept transformers default config with llama.cpp's converter, run unchanged.

    scripts/golden/gguf_roundtrip.py --llama-cpp /path/to/llama.cpp \
        [--transformers /path/to/transformers] [--out tests/golden/gguf_roundtrip]

Not run by CI (it needs a llama.cpp checkout; the files it writes are checked in). For every
model type of tests/golden/transformers/sweep.json the script looks for a HF architecture name
the converter registers (conversion.TEXT_MODEL_MAP): the names transformers' auto mappings give
the config's model_type (MODEL_FOR_CAUSAL_LM, IMAGE_TEXT_TO_TEXT, MULTIMODAL_LM, MODEL, ...,
parsed from models/auto/modeling_auto.py of --transformers, the sweep's commit), then names made
from the config class (FooConfig -> FooForCausalLM, FooForConditionalGeneration, FooModel).
With one found, the swept config (the class defaults as save_pretrained writes it; nothing
shrunk, so layer patterns and RoPE keys are the class's own) gets "architectures": [name] and
goes through the converter's metadata path exactly as scripts/golden/gguf.py runs it
(load_hparams, the model class, prepare_tensors, ModelBase.prepare_metadata, GGUFWriter) with
one one-element float32 tensor (a final norm weight; the tensor names tried are listed in
TENSORS). Files hold metadata and that tensor only (plus any RoPE factor tensor the converter
generates).

manifest.json records the llama.cpp commit and, per model type: the architecture name used and
where it came from, the converter class, the GGUF architecture and file, or the converter's
exception (type and message), or that no converter class exists.
"""
import argparse
import ast
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SWEEP = ROOT / "tests" / "golden" / "transformers" / "sweep.json"

# tensor names tried in turn (the final norm of the common layouts)
TENSORS = ["model.norm.weight", "model.language_model.norm.weight", "transformer.ln_f.weight",
           "gpt_neox.final_layer_norm.weight", "model.final_layernorm.weight",
           "language_model.model.norm.weight", "model.embedding_norm.weight",
           "model.embed_tokens.weight"]

AUTO_MAPPINGS = ["MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
                 "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
                 "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                 "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES", "MODEL_MAPPING_NAMES"]


def auto_names(transformers):
    """{model_type: [architecture names]} from transformers' auto mapping names (ast, no import)."""
    out = {}
    if transformers is None:
        return out
    p = transformers / "src" / "transformers" / "models" / "auto" / "modeling_auto.py"
    tree = ast.parse(p.read_text())
    tables = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in AUTO_MAPPINGS):
            try:
                pairs = ast.literal_eval(node.value.args[0])
            except (ValueError, IndexError, AttributeError):
                continue
            tables[node.targets[0].id] = pairs
    for name in AUTO_MAPPINGS:
        for k, v in tables.get(name, []):
            for a in (v if isinstance(v, (list, tuple)) else [v]):
                out.setdefault(k, [])
                if a not in out[k]:
                    out[k].append(a)
    return out


def candidates(mt, entry, auto):
    cfg = entry["config"]
    names = []
    text = (cfg.get("text_config") or {}).get("model_type")
    for key, sub in ((cfg.get("model_type"), False), (mt, False), (text, True)):
        for a in auto.get(key, []) if key else []:
            names.append((a, f"transformers auto mapping for model_type {key!r}", sub))
    for cc, sub in ((entry.get("config_class"), False),
                    (entry.get("text_config_class"), entry.get("text_config_class") != entry.get("config_class"))):
        if cc and cc.endswith("Config"):
            base = cc[:-len("Config")]
            for suf in ("ForCausalLM", "ForConditionalGeneration", "Model"):
                names.append((base + suf, f"made from the config class {cc}", sub))
    seen, out = set(), []
    for a, why, sub in sorted(names, key=lambda n: n[2]):  # the model's own names first
        if a not in seen:
            seen.add(a)
            out.append((a, why, sub and "text_config" in cfg))
    return out


def _golden_gguf():
    """scripts/golden/gguf.py (its convert and write_safetensors), under a name that is not
    gguf-py's package's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("golden_gguf", HERE / "gguf.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def convert(cfg, tensor_name, out_path):
    """scripts/golden/gguf.py's convert with a one-element tensor, written to a temporary file of
    the same name (the converter names the model after it) and copied only when it succeeds, so
    a converter failure leaves no partial file."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_out = Path(tmp) / Path(out_path).name
        result = _golden_gguf().convert(cfg, tensor_name, tmp_out, n=1)
        shutil.copyfile(tmp_out, out_path)
        return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True, type=Path)
    ap.add_argument("--transformers", type=Path, default=None,
                    help="transformers checkout at the sweep's commit (its auto mapping names)")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "gguf_roundtrip")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    llama = args.llama_cpp.resolve()
    for p in ("conversion", "gguf-py", "convert_hf_to_gguf.py"):
        if not (llama / p).exists():
            sys.exit(f"--llama-cpp: {llama} has no {p}; pass a llama.cpp checkout")
    sys.path[:0] = [str(HERE / "shims" / "gguf"), str(llama), str(llama / "gguf-py")]
    import torch2_names  # noqa: F401
    logging.basicConfig(level=logging.ERROR)
    import conversion
    registered = conversion.TEXT_MODEL_MAP

    commit = os.environ.get("LLAMA_CPP_COMMIT")
    if not commit:
        import subprocess
        try:
            commit = subprocess.run(["git", "-C", str(llama), "rev-parse", "HEAD"], check=True,
                                    capture_output=True, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"

    sweep = json.loads(SWEEP.read_text())
    auto = auto_names(args.transformers)
    args.out.mkdir(parents=True, exist_ok=True)
    mpath = args.out / "manifest.json"
    manifest = json.loads(mpath.read_text()) if (args.only and mpath.exists()) else {}
    manifest["llama_cpp"] = {"commit": commit,
                             "path": "convert_hf_to_gguf.py, conversion/, gguf-py/ (run unchanged; "
                                     "shims in scripts/golden/shims/gguf)"}
    manifest["transformers_commit"] = sweep["transformers_commit"]
    manifest["generator"] = "scripts/golden/gguf_roundtrip.py"
    types = manifest.setdefault("model_types", {})
    for mt, entry in sorted(sweep["model_types"].items()):
        if args.only and mt not in args.only:
            continue
        cands = candidates(mt, entry, auto)
        hit = [(a, why, sub) for a, why, sub in cands if a in registered]
        if not hit:
            # the converter registers the spelling of the published checkpoints' architectures
            # (PhiMoEForCausalLM for transformers' PhimoeForCausalLM): matched ignoring case
            folded = {r.lower(): r for r in registered}
            hit = [(folded[a.lower()], why + f" ({a}, matched ignoring case)", sub)
                   for a, why, sub in cands if a.lower() in folded]
        if not hit:
            types[mt] = {"status": "no_converter_class",
                         "architectures_tried": [a for a, _, _ in cands]}
            continue
        arch, why, sub = hit[0]
        # an architecture of the text model converts the text model's config (what a checkpoint
        # of that architecture holds), not the composite around it
        cfg = dict(entry["config"]["text_config"] if sub else entry["config"])
        cfg["architectures"] = [arch]
        rec = {"architecture_hf": arch, "architecture_from": why,
               "config_converted": "text_config" if sub else "config"}
        out = args.out / (mt + ".gguf")
        err = None
        for t in TENSORS:
            try:
                cls, garch = convert(cfg, t, out)
            except BaseException as e:  # noqa: BLE001  (SystemExit too: the converter exits on some)
                if isinstance(e, KeyboardInterrupt):
                    raise
                msg = str(e)
                if "Can not map tensor" in msg or "can not map tensor" in msg.lower():
                    err = e
                    continue
                err = e
                break
            else:
                err = None
                rec.update({"status": "converted", "converter_class": cls, "gguf_architecture": garch,
                            "gguf": out.name, "tensor": t, "bytes": out.stat().st_size,
                            "sha256": hashlib.sha256(out.read_bytes()).hexdigest()})
                break
        if err is not None:
            if out.exists():
                out.unlink()
            try:
                cls_name = conversion.get_model_class(arch).__qualname__
            except Exception:  # noqa: BLE001
                cls_name = None
            tb = traceback.extract_tb(err.__traceback__)
            where = next((f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(tb)
                          if "llama" in f.filename or "gguf" in f.filename), None)
            rec.update({"status": "converter_failed", "converter_class": cls_name,
                        "exception": type(err).__name__, "message": str(err)[:400], "raised_at": where})
        types[mt] = rec
        print(f"{mt}: {rec['status']} {rec.get('gguf_architecture') or rec.get('exception', '')}",
              flush=True)
    st = [v["status"] for v in types.values()]
    manifest["counts"] = {"swept": len(types),
                          "converter_class": sum(s != "no_converter_class" for s in st),
                          "converted": st.count("converted"),
                          "converter_failed": st.count("converter_failed")}
    mpath.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
