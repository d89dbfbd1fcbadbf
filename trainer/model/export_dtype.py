"""The dtype `merged/` is saved in: the spec's `export_dtype`, where `auto` is the base's own.

The base's stored dtype comes from its safetensors headers (the floating dtype holding the
most elements; nothing is loaded), else its config.json's `dtype` / `torch_dtype`, else
fp32. A Hugging Face id is looked up in the local cache only: export runs after training,
when `from_pretrained` has already fetched the files, and must not reach the network.
"""
from __future__ import annotations

import json
from pathlib import Path

from tunedeck.backends.base import TORCH_DTYPE_NAMES
from tunedeck.safetensors_headers import HeaderError, folder_dominant_float_dtype

AUTO = "auto"
FALLBACK_DTYPE = "fp32"
SAFETENSORS_DTYPES = {"F32": "fp32", "BF16": "bf16", "F16": "fp16"}
CONFIG_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def resolve_export_dtype(export_dtype: str, model_source: str) -> str:
    """"bf16", "fp16" or "fp32": the spec's choice, or the base's stored dtype for auto."""
    if export_dtype != AUTO:
        return export_dtype
    folder = local_model_folder(model_source)
    if folder is None:
        return FALLBACK_DTYPE
    return stored_dtype(folder) or FALLBACK_DTYPE


def stored_dtype(folder: Path) -> str | None:
    """The folder's weights' dtype in the spec's names, or None when nothing says."""
    try:
        dominant = folder_dominant_float_dtype(folder)
    except (OSError, HeaderError):
        dominant = None  # unreadable weights: the config may still say
    if dominant in SAFETENSORS_DTYPES:
        return SAFETENSORS_DTYPES[dominant]
    return config_dtype(folder / "config.json")


def config_dtype(config_file: Path) -> str | None:
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    # transformers 5 writes `dtype`; older versions (and most hub configs) `torch_dtype`.
    name = config.get("dtype") or config.get("torch_dtype")
    return CONFIG_DTYPES.get(str(name).removeprefix("torch.")) if name else None


def local_model_folder(model_source: str) -> Path | None:
    """The folder the source's files are in: itself, or a Hugging Face id's cached snapshot."""
    path = Path(model_source)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model_source, local_files_only=True))
    except (OSError, ValueError):
        # Not cached (LocalEntryNotFoundError, an OSError) or not a repo id (HFValidationError).
        return None


def torch_dtype(export_dtype: str):
    import torch

    return getattr(torch, TORCH_DTYPE_NAMES[export_dtype])
