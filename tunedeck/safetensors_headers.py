"""What a folder of `*.safetensors` files holds, read from their headers alone.

A safetensors file opens with an 8-byte little-endian header length and a JSON header that
names every tensor with its dtype, shape and byte range, so dtypes, element counts and sizes
come out without loading (or even reading) a tensor. Pure: no torch, no safetensors package,
so the web (which has neither) can describe a download, and the trainer can learn a base
model's stored dtype, and how many bytes its load reads, before it loads anything.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from tunedeck.units import MIB

# A 70B model's shard headers are a few hundred KB; a length past this is not a header.
MAX_HEADER_BYTES = 100 * MIB
HEADER_LENGTH_BYTES = 8
METADATA_KEY = "__metadata__"
# The floating dtypes safetensors names; integer and bool tensors (e.g. quantization
# tables, position ids) never decide a model's dtype.
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})


class HeaderError(ValueError):
    """A file whose opening bytes are not a safetensors header."""


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # safetensors' own name: "F32", "BF16", "F16", "I64", ...
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def read_header(path: Path) -> dict:
    """The JSON header of one safetensors file (tensor names to dtype/shape/offsets)."""
    with Path(path).open("rb") as file:
        length_bytes = file.read(HEADER_LENGTH_BYTES)
        if len(length_bytes) != HEADER_LENGTH_BYTES:
            raise HeaderError(f"{path}: too short for a safetensors header")
        (header_length,) = struct.unpack("<Q", length_bytes)
        if not 2 <= header_length <= MAX_HEADER_BYTES:
            raise HeaderError(f"{path}: header length {header_length} is not plausible")
        header_bytes = file.read(header_length)
    if len(header_bytes) != header_length:
        raise HeaderError(f"{path}: truncated header")
    try:
        header = json.loads(header_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HeaderError(f"{path}: header is not JSON: {error}") from error
    if not isinstance(header, dict):
        raise HeaderError(f"{path}: header is not a JSON object")
    return header


def tensor_entries(path: Path) -> list[TensorEntry]:
    """(name, dtype, shape) of every tensor in one file, in header order."""
    entries = []
    for name, info in read_header(path).items():
        if name == METADATA_KEY:
            continue
        try:
            entries.append(TensorEntry(name=name, dtype=str(info["dtype"]),
                                       shape=tuple(int(size) for size in info["shape"])))
        except (KeyError, TypeError, ValueError) as error:
            raise HeaderError(f"{path}: tensor {name!r} has no valid dtype/shape") from error
    return entries


def tensor_bytes(path: Path) -> dict[str, int]:
    """Each tensor's size in bytes in one file, from its byte range: what loading it reads."""
    sizes = {}
    for name, info in read_header(path).items():
        if name == METADATA_KEY:
            continue
        try:
            start, end = (int(offset) for offset in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as error:
            raise HeaderError(f"{path}: tensor {name!r} has no valid data_offsets") from error
        sizes[name] = end - start
    return sizes


def safetensors_files(folder: Path) -> list[Path]:
    """The folder's weight files (top level, as Hugging Face lays them out), sorted."""
    return sorted(path for path in Path(folder).glob("*.safetensors") if path.is_file())


def folder_tensor_entries(folder: Path) -> list[TensorEntry]:
    """Every tensor of every `*.safetensors` file in `folder` (all shards of a model)."""
    return [entry for path in safetensors_files(folder) for entry in tensor_entries(path)]


def dominant_float_dtype(entries: list[TensorEntry]) -> str | None:
    """The floating dtype holding the most elements ("BF16", "F32", ...), or None if none."""
    elements_by_dtype: dict[str, int] = {}
    for entry in entries:
        if entry.dtype in FLOAT_DTYPES:
            elements_by_dtype[entry.dtype] = elements_by_dtype.get(entry.dtype, 0) + entry.elements
    if not elements_by_dtype:
        return None
    # A tie (rare) goes to the first name in sorted order, so the answer is stable.
    return max(sorted(elements_by_dtype), key=elements_by_dtype.__getitem__)


def folder_dominant_float_dtype(folder: Path) -> str | None:
    return dominant_float_dtype(folder_tensor_entries(folder))
