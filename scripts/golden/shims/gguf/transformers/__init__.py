"""Stand-in for transformers when regenerating tests/golden/gguf (scripts/golden/gguf.py).

llama.cpp's converter reads a model's hyperparameters with transformers.AutoConfig and, when
that fails, from config.json itself (ModelBase.load_hparams). The golden files take the second
path on purpose: they record what the converter writes for the config.json as published, with no
transformers version in between. AutoConfig is the only name the converter imports from here.
"""


class AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise OSError("posenc's golden GGUF files read config.json directly (no transformers)")
