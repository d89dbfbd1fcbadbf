"""Where a model's shape comes from: the built-in model, a local folder, the Hugging Face
cache, or the bundled table, in that order. Where the weights themselves are at hand (a
folder or a cached snapshot with `*.safetensors`), the parameter count is exact, per dtype,
from the files' headers (no tensor is read); the config formulas are the fallback.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from tunedeck.planner.architectures import KNOWN_MODEL_TYPES, generic_shape, shape_from_config
from tunedeck.planner.known_models import ALIASES, KNOWN_CONFIGS
from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA, ModelShape
from tunedeck.safetensors_headers import HeaderError, safetensors_files, tensor_entries

# Buffers some older checkpoints saved beside the weights; they are not parameters.
NOT_PARAMETERS = ("rotary_emb.inv_freq",)

KNOWN_SHAPES: dict[str, ModelShape] = {
    name.lower(): shape_from_config(name, config, counted_from="bundled table")
    for name, config in KNOWN_CONFIGS.items()}


def known_shape(model: str) -> ModelShape | None:
    key = model.lower()
    return KNOWN_SHAPES.get(ALIASES.get(key, key))


def resolve_model_shape(model: str) -> ModelShape:
    """The shape of `model` (a spec's `model` field); a ValueError says why there is none."""
    if model.startswith("builtin:"):
        if model != BUILTIN_TINY_LLAMA.name:
            raise ValueError(f"model {model}: unknown; the built-in model is {BUILTIN_TINY_LLAMA.name}")
        return BUILTIN_TINY_LLAMA
    local = Path(model).expanduser()
    if local.is_dir():
        return shape_from_folder(model, local)
    cached = _hub_cache_snapshot(model)
    if cached is not None:
        return shape_from_folder(model, cached)
    shape = known_shape(model)
    if shape is None:
        raise ValueError(f"model {model}: no config.json found (not a local folder, not in the "
                         "Hugging Face cache) and not among the bundled models "
                         f"({', '.join(s.name for s in KNOWN_SHAPES.values())})")
    return shape


def has_experts(model: str) -> bool | None:
    """Whether `model` is a mixture of experts, by the shape the planner reads for it: None
    when it has no shape (unreadable, unknown) or its model_type is one the formulas do not
    know (a generic shape cannot tell a sparse layer from a dense one)."""
    try:
        shape = resolve_model_shape(model)
    except ValueError:
        return None
    if shape.model_type not in KNOWN_MODEL_TYPES:
        return None
    return shape.experts is not None


def shape_from_folder(name: str, folder: Path) -> ModelShape:
    """A folder's config.json, with the exact count of its safetensors weights if any."""
    config = _read_config(name, folder / "config.json")
    # A pre-quantized checkpoint (GPTQ, AWQ, ...) packs several weights into each stored
    # integer: its headers count storage, not parameters.
    counts = None if config.get("quantization_config") else parameter_counts(folder)
    if counts is None:
        return shape_from_config(name, config)
    source = f"safetensors headers ({len(_weight_files(folder))} files)"
    try:
        shape = shape_from_config(name, config, counted_from=source)
    except ValueError:
        # A family the formulas do not know: the headers still count it exactly; only the
        # activations fall back to the config's generic sizes.
        shape = generic_shape(name, config, counted_from=source + "; activations, LoRA's "
                              "adapter and FSDP's gathered layer from the config's sizes as a "
                              "Llama-style decoder")
    return replace(shape, exact_parameters=sum(counts.values()),
                   parameters_by_dtype=tuple(sorted(counts.items())))


def parameter_counts(folder: Path) -> dict[str, int] | None:
    """Elements per stored dtype of the folder's safetensors tensors; None without any."""
    files = _weight_files(folder)
    if not files:
        return None
    try:
        entries = [entry for path in files for entry in tensor_entries(path)]
    except (HeaderError, OSError) as error:
        raise ValueError(f"model {folder}: cannot read its safetensors headers: {error}") from error
    counts: dict[str, int] = {}
    for entry in entries:
        if not entry.name.endswith(NOT_PARAMETERS):
            counts[entry.dtype] = counts.get(entry.dtype, 0) + entry.elements
    return counts


def _weight_files(folder: Path) -> list[Path]:
    """The files that hold the model: those its index names (a repo may ship a
    `consolidated.safetensors` beside the shards, the same weights again), all of them or
    none (a cache holding some shards would undercount); without an index, every file."""
    files = safetensors_files(folder)
    index = folder / "model.safetensors.index.json"
    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return files  # no index (one file), or one we cannot read: the files are what there is
    named = [path for path in files if path.name in shards]
    return named if len(named) == len(shards) else []


def _read_config(name: str, path: Path) -> dict:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"model {name}: cannot read {path}: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"model {name}: {path} is not valid JSON: {error}") from error
    if not isinstance(config, dict):
        raise ValueError(f"model {name}: {path} is not a JSON object")
    # Multimodal wrappers (e.g. Gemma 3, Llama 4) keep the decoder's sizes in text_config.
    text = config.get("text_config")
    return {**text, "model_type": text.get("model_type", config.get("model_type"))} \
        if isinstance(text, dict) and "hidden_size" not in config else config


def _hub_cache_snapshot(model: str) -> Path | None:
    """The newest cached snapshot folder of a hub id that has a config.json, if any."""
    if model.count("/") != 1:
        return None
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get(
        "HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    snapshots = hub / f"models--{model.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda path: path.stat().st_mtime)
    return found[-1].parent if found else None
