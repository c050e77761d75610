#!/usr/bin/env python3
"""Regenerates the golden GGUF files in tests/golden/gguf with llama.cpp's own converter.

    scripts/golden/gguf.py --llama-cpp /path/to/llama.cpp [--out tests/golden/gguf]

Not run by CI (it needs a llama.cpp checkout; the files it writes are checked in). For each
config.json under tests/golden/gguf/configs the script makes a model directory holding that
config and a model.safetensors with one tensor (the final norm weight, ones, float32), then runs
the converter's metadata path unchanged: ModelBase.load_hparams, the model class the converter
picks for the config's architectures, prepare_tensors (the model's tensor plus the RoPE factor
tensors the converter generates: rope_freqs for Llama 3, rope_factors_long/short for Phi-3),
ModelBase.prepare_metadata (general.* keys, set_gguf_parameters, the quantization version), and
gguf-py's GGUFWriter. The vocabulary is not written (TextModel.prepare_metadata would ask for a
tokenizer the configs do not come with); nothing the RoPE reading uses depends on it.

Shims (scripts/golden/shims/gguf): transformers.AutoConfig fails, so the converter reads
config.json itself (its own fallback); PyTorch 2 dtype names are defined for torch 1.13.

manifest.json records the llama.cpp commit, each file's config and where that config.json was
published, the converter class, the GGUF architecture, and the file's sha256.
"""
import argparse
import hashlib
import json
import logging
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# name -> (config file, tensor name in the checkpoint, where the config.json was published)
CASES = {
    "llama3_2_1b": (
        "llama3_2_1b.json", "model.norm.weight",
        "meta-llama/Llama-3.2-1B config.json, as copied in "
        "MatthewGoldsberry/LLM-Projects@bf1733705e944f312bf5564d13932a9b6de21606 "
        "(Llama-3.2-1B/config.json)"),
    "phi3_5_mini": (
        "phi3_5_mini.json", "model.norm.weight",
        "microsoft/Phi-3.5-mini-instruct config.json (transformers 4.46.3 save, "
        "_name_or_path microsoft/Phi-3.5-mini-instruct), as quoted verbatim in a public test "
        "module (thunder_model_blocks)"),
    "deepseek_v2_lite_chat": (
        "deepseek_v2_lite_chat.json", "model.norm.weight",
        "deepseek-ai/DeepSeek-V2-Lite-Chat, DeepseekV2Config as printed by transformers 5.7.0 "
        "(rope_parameters form), from a public model report"),
    "gpt_oss_20b": (
        "gpt_oss_20b.json", "model.norm.weight",
        "openai/gpt-oss-20b config.json, as copied in "
        "jihengzhang/jihz-gpt-oss-20b@7ec89800d2b55da8f65106e8a6f794b7b6433df8 "
        "(gpt-oss-20b/config.json)"),
    "ministral3_8b": (
        "ministral3_8b.json", "model.norm.weight",
        "mistralai Ministral-3-8B (Mistral3ForConditionalGeneration, text model ministral3): "
        "the text_config geometry and RoPE keys as quoted from the published config.json in "
        "two public tests (a vLLM-port loader test, 'real 3B/8B fields'; an InvokeAI loader "
        "test, 'the released RoPE settings' with mscale / mscale_all_dim 1); no key invented"),
    "gemma3_1b_it": (
        "gemma3_1b_it.json", "model.norm.weight",
        "google/gemma-3-1b-it config.json (transformers 4.52.4 save), as quoted in a public "
        "checkpoint-loading document"),
    "h2ogpt_oig_oasst1_512_6_9b": (
        "h2ogpt_oig_oasst1_512_6_9b.json", "gpt_neox.final_layer_norm.weight",
        "h2oai/h2ogpt-oig-oasst1-512-6_9b config.json (GPT-NeoX, Pythia-6.9B fine-tune), as "
        "printed in its model card"),
    "phi_2": (
        "phi_2.json", "model.final_layernorm.weight",
        "microsoft/phi-2 config.json (transformers 4.42.0.dev0 save), as quoted in a public "
        "module (Python literals written as JSON)"),
    "nexus_gen_v2_qwen2_5_vl": (
        "nexus_gen_v2_qwen2_5_vl.json", "model.norm.weight",
        "DiffSynth-Studio/Nexus-GenV2 config.json (a Qwen2.5-VL-7B fine-tune; M-RoPE sections "
        "16/24/24), as quoted in DiffSynth-Studio's source (Python literals written as JSON)"),
    "falcon_7b_instruct": (
        "falcon_7b_instruct.json", "transformer.ln_f.weight",
        "tiiuae/falcon-7b-instruct config.json (transformers 4.28.1 save), as quoted in a public "
        "module (Python literals written as JSON)"),
}


def text_hidden_size(cfg):
    t = cfg.get("text_config", cfg)
    for k in ("hidden_size", "n_embd", "d_model"):
        if k in t:
            return int(t[k])
    raise KeyError("no hidden size in config")


def write_safetensors(path, name, n):
    """One float32 tensor of n ones (safetensors: u64 header length, JSON header, data)."""
    header = {name: {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]},
              "__metadata__": {"format": "pt"}}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(struct.pack("<%df" % n, *([1.0] * n)))


def convert(cfg, tensor_name, out_path, n=None):
    """Runs the converter's metadata path on one config (a dict) with one float32 tensor of n
    elements (default: the text hidden size); returns (class name, gguf arch). Also used by
    scripts/golden/gguf_roundtrip.py."""
    import gguf
    import torch
    from conversion import ModelBase, ModelType, get_model_architecture, get_model_class

    with tempfile.TemporaryDirectory() as tmp:
        # The converter names the model after its directory (general.name): a fixed name keeps
        # the files reproducible byte for byte.
        d = Path(tmp) / Path(out_path).stem
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
        write_safetensors(d / "model.safetensors", tensor_name,
                          text_hidden_size(cfg) if n is None else n)
        with torch.inference_mode():
            hparams = ModelBase.load_hparams(d, False)
            arch = get_model_architecture(hparams, ModelType.TEXT)
            cls = get_model_class(arch)
            model = cls(d, gguf.LlamaFileType.ALL_F32, Path(out_path), eager=True)
            impl = getattr(model, "impl", model)  # Mistral3Model delegates to its text model
            impl.prepare_tensors()
            # ModelBase.prepare_metadata: general.*, set_gguf_parameters, quantization version
            # (TextModel's override adds only the file name and the vocabulary).
            impl.metadata_override = None
            ModelBase.prepare_metadata(impl, vocab_only=False)
            w = impl.gguf_writer
            w.write_header_to_file(path=Path(out_path))
            w.write_kv_data_to_file()
            w.write_tensors_to_file(progress=False)
            w.close()
            return type(impl).__qualname__, gguf.MODEL_ARCH_NAMES[impl.model_arch]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True, type=Path,
                    help="llama.cpp checkout (convert_hf_to_gguf.py, conversion/, gguf-py/)")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "gguf")
    ap.add_argument("--configs", type=Path, default=ROOT / "tests" / "golden" / "gguf" / "configs",
                    help="the config.json files (default tests/golden/gguf/configs)")
    ap.add_argument("--only", nargs="*", help="regenerate these cases only")
    args = ap.parse_args()
    llama = args.llama_cpp.resolve()
    for p in ("conversion", "gguf-py", "convert_hf_to_gguf.py"):
        if not (llama / p).exists():
            sys.exit(f"--llama-cpp: {llama} has no {p}; pass a llama.cpp checkout")
    sys.path[:0] = [str(HERE / "shims" / "gguf"), str(llama), str(llama / "gguf-py")]
    import torch2_names  # noqa: F401  (before the converter's modules)

    logging.basicConfig(level=logging.WARNING)
    try:
        commit = subprocess.run(["git", "-C", str(llama), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = os.environ.get("LLAMA_CPP_COMMIT", "unknown")

    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest["llama_cpp"] = {
        "repository": "https://github.com/EricNie-Git/llama.cpp-tq3-release (upstream-identical "
                      "converter, gguf-py and loader)",
        "commit": commit,
        "path": "convert_hf_to_gguf.py, conversion/, gguf-py/ (run unchanged; shims in "
                "scripts/golden/shims/gguf)",
    }
    files = manifest.setdefault("files", {})
    for name, (cfg, tensor, source) in CASES.items():
        if args.only and name not in args.only:
            continue
        out = args.out / (name + ".gguf")
        cls, arch = convert(json.loads((args.configs / cfg).read_text()), tensor, out)
        files[name] = {
            "gguf": out.name,
            "config": "configs/" + cfg,
            "config_source": source,
            "converter_class": cls,
            "architecture": arch,
            "tensor": tensor,
            "bytes": out.stat().st_size,
            "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        }
        print(f"{out.name}: {arch} ({cls}), {out.stat().st_size} bytes")
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
