"""Cache locations read at import time by transformers.utils.hub; nothing is read or written
there by the golden run (HF_HUB_OFFLINE is on)."""

import os

HF_HOME = os.path.join(os.environ.get("TMPDIR", "/tmp"), "posenc-golden-hf-home")
HF_HUB_CACHE = os.path.join(HF_HOME, "hub")
HUGGINGFACE_HUB_CACHE = HF_HUB_CACHE
HF_HUB_OFFLINE = True
HF_HUB_DISABLE_TELEMETRY = True
ENDPOINT = "https://huggingface.co"
HUGGINGFACE_CO_RESOLVE_ENDPOINT = ENDPOINT
