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
from tunedeck.safetensors_headers import tensor_bytes

from trainer.model.builtin_model import BUILTIN_MODEL_NAME, ensure_builtin_model
from trainer.data.chat_format import use_training_chat_template
from trainer.startup.progress import Phase, download_progress_class, loading_weights_progress
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
                    attn_implementation: str | None = None, telemetry=None):
    """`quantization` is `BitsAndBytesConfig` keywords (tunedeck.launch_config's
    `quantization_config`); it needs the `device` the rank trains on. With `telemetry`, the
    load is a "load_shards" phase of the checkpoint's bytes as the weights land (transformers'
    own "Loading weights" bar, trainer/startup/progress.py), and each file fetched from the hub a
    "download" phase of its bytes (huggingface_hub's own progress, through `tqdm_class`)."""
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
    # A local folder's checkpoint size is known before the load; a hub id's once its files
    # are downloaded, which is when the loading pass asks again (and sets the total).
    total = sum(checkpoint_tensor_bytes(source).values()) or None
    with Phase(telemetry or NullTelemetry(), LOAD_SHARDS, total=total,
               unit="bytes" if total else None) as phase, \
            loading_weights_progress(phase, lambda: checkpoint_tensor_bytes(source)):
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32,
                                                     trust_remote_code=trust_remote_code,
                                                     attn_implementation=attn_implementation,
                                                     **placement)
        # Where transformers drew no "Loading weights" bar (another version, or a loader of
        # its own such as ZeRO-3's), nothing counted on the way: all of it is in now.
        phase.done = phase.total or 0
    model.config.use_cache = False  # a KV cache is only for generation
    return model


def checkpoint_tensor_bytes(source: str) -> dict[str, int]:
    """Each checkpoint tensor's size in bytes, by name, from the safetensors headers of the
    files `from_pretrained` reads: a local folder's, or a hub id's in the hub cache. Empty
    when there is nothing to read yet (not downloaded) or the weights are not safetensors."""
    folder = model_folder(source)
    if folder is None:
        return {}
    try:
        return {name: size for path in weight_files(folder)
                for name, size in tensor_bytes(path).items()}
    except (OSError, ValueError, KeyError):
        # A shard missing, a torn header (HeaderError) or index: the load counts tensors.
        return {}


def model_folder(source: str) -> Path | None:
    """The folder holding the model's files: `source` itself, or a hub id's snapshot in the
    hub cache (None before its first download)."""
    folder = Path(source)
    if folder.is_dir():
        return folder
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(source, "config.json")
    except ValueError:  # not a valid repo id either: from_pretrained will say so
        return None
    return Path(config).parent if isinstance(config, str) else None


def weight_files(folder: Path) -> list[Path]:
    """The weight files `from_pretrained` reads: those the safetensors index names, or the
    one `model.safetensors`; none for a checkpoint in another format."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        return [folder / name for name in sorted(names)]
    single = folder / "model.safetensors"
    return [single] if single.is_file() else []


def load_tokenizer(source: str, *, trust_remote_code: bool = False):
    """The tokenizer training, "Try it" and export use, carrying the template training
    renders with (trainer/data/chat_format.py), so an exported folder saves that template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    use_training_chat_template(tokenizer)
    if tokenizer.pad_token_id is None:
        # Many base models ship without a pad token; padding is masked out of attention and
        # loss, so any id works, and end-of-sequence is the usual choice.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
