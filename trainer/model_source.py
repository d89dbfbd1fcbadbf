"""Where the base model comes from: `builtin:tiny-llama`, a local folder, or a Hugging Face id.

Weights load in fp32: they are the master weights, and the backend decides what precision
the forward pass runs in. QLoRA is the one exception: its frozen linear weights load as
bitsandbytes 4-bit NF4, quantized on the rank's own device. Export reloads the same source
in fp32, so a LoRA or QLoRA merge lands on the untouched fp32 base and not on a bf16 or
4-bit copy made for training.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedeck.metrics.events import LOAD_SHARDS

from trainer.builtin_model import BUILTIN_MODEL_NAME, ensure_builtin_model
from trainer.progress import Phase, download_progress_class
from trainer.telemetry import NullTelemetry

if TYPE_CHECKING:
    import torch

DEFAULT_TUNEDECK_HOME = "./var"


def tunedeck_home() -> Path:
    return Path(os.environ.get("TUNEDECK_HOME", DEFAULT_TUNEDECK_HOME)).expanduser().resolve()


def resolve_model_source(model: str) -> str:
    """A path or id `from_pretrained` accepts; builds the built-in model on first use."""
    if model.startswith("builtin:"):
        name = model.removeprefix("builtin:")
        if name != BUILTIN_MODEL_NAME:
            raise ValueError(f"model {model}: unknown; "
                             f"the built-in model is builtin:{BUILTIN_MODEL_NAME}")
        return str(ensure_builtin_model(tunedeck_home()))
    local = Path(model).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            raise FileNotFoundError(f"model {local}: no config.json; "
                                    "expected a Hugging Face model folder")
        return str(local.resolve())
    return model  # a Hugging Face id, passed through as is


def load_base_model(source: str, *, quantization: dict[str, Any] | None = None,
                    device: torch.device | None = None, trust_remote_code: bool = False,
                    telemetry=None):
    """`quantization` is `BitsAndBytesConfig` keywords (tunedeck.backend_config's
    `quantization_config`); it needs the `device` the rank trains on. With `telemetry`, the
    load is a "load_shards" phase, and each file fetched from the hub a "download" phase
    of its bytes (huggingface_hub's own progress, through `tqdm_class`)."""
    import torch
    from transformers import AutoModelForCausalLM

    placement = {}
    if quantization is not None:
        from transformers import BitsAndBytesConfig

        # bitsandbytes quantizes as the weights land on their device, so load them straight
        # onto this rank's device (CPU quantization works too: the CPU tests use it). The
        # output head and anything not an nn.Linear stay fp32.
        placement = {"quantization_config": BitsAndBytesConfig(**quantization),
                     "device_map": {"": str(device or "cpu")}}
    if telemetry is not None:
        placement["tqdm_class"] = download_progress_class(telemetry)
    # transformers 5 maps every shard lazily and then materialises the weights in one pass,
    # so there is no per-shard moment to count: the phase says N shards, and when all are in.
    shards = shard_count(source)
    with Phase(telemetry or NullTelemetry(), LOAD_SHARDS, total=shards,
               unit="shards" if shards else None) as phase:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32,
                                                     trust_remote_code=trust_remote_code,
                                                     **placement)
        phase.done = shards or 0
    model.config.use_cache = False  # a KV cache is only for generation
    return model


def shard_count(source: str) -> int | None:
    """How many weight files a local model folder has (its safetensors index names them);
    None for a hub id, whose files are not here yet."""
    folder = Path(source)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return len(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    return 1 if (folder / "model.safetensors").is_file() else None


def load_tokenizer(source: str, *, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        # Many base models ship without a pad token; padding is masked out of attention and
        # loss, so any id works, and end-of-sequence is the usual choice.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
