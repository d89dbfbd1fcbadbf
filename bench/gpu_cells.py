"""The cells of bench/gpu_throughput.py: a model size, a method, a backend, a sequence length
and speed options, with an optional micro-batch; how one is written
(`8b/full/fsdp/4096/liger+ckpt+fused@2`), the spec fields its speed options set, and the
order of a whole matrix.

A speed value is "none" (the plain path: kernels none, whatever the spec's default) or
options joined by "+": liger (kernels liger), auto (kernels auto, the spec's default),
fused (fused_optimizer), flash (attention flash, which needs flash-attn), padding-free,
ckpt (activation checkpointing, in the cell backend's own section of the spec), dpo
(objective dpo on the same rows as pairs: a micro-batch of N pairs is 2N rows; its tokens/s
against the same cell without it is DPO's cost), and grpo (objective grpo on the rows'
prompts: a micro-batch of completions, half of seq_len each at most, in groups of up to 8;
the table's tokens/s is trained tokens over the whole step, and a line under the row gives
the tokens sampled a second, the trained tokens a second and the step's time split).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from random_llama import SHAPES

from tunedeck.spec.fields import BackendName, Method

METHODS = get_args(Method)
BACKENDS = get_args(BackendName)
# A speed value's parts -> the spec fields they set (over PLAIN).
PLAIN = {"kernels": "none"}
SPEED_OPTIONS = {"liger": {"kernels": "liger"}, "auto": {"kernels": "auto"},
                 "fused": {"fused_optimizer": True},
                 "flash": {"attention": "flash"}, "padding-free": {"padding_free": True},
                 "ckpt": {"activation_checkpointing": True}, "dpo": {"objective": "dpo"},
                 "grpo": {"objective": "grpo"}}
# GRPO's cell: groups of up to this many completions; a completion is at most half the row.
GRPO_GENERATIONS = 8


def grpo_fields(micro_batch: int, seq_len: int) -> dict:
    """The grpo section of a GRPO cell: G the largest divisor of the micro-batch up to
    GRPO_GENERATIONS, completions of half a row, a reward that reads no column (the rows
    file's prompts have none to read), no rollouts kept."""
    generations = max(value for value in range(2, GRPO_GENERATIONS + 1)
                      if micro_batch % value == 0) if micro_batch > 1 else 2
    return {"grpo": {"num_generations": generations, "max_completion_length": seq_len // 2,
                     "rewards": [{"name": "length", "target": 64}], "rollouts_every": 0}}
# The options set in the backend's own section of the spec (`zero2:` or `fsdp:`).
BACKEND_SECTION_OPTIONS = frozenset({"ckpt"})


def speed_parts(speed: str) -> list[str]:
    return [part for part in speed.split("+") if part != "none"]


def unknown_speed_parts(speed: str) -> list[str]:
    return [part for part in speed_parts(speed) if part not in SPEED_OPTIONS]


def speed_fields(speed: str, backend: str) -> dict:
    """The spec fields of a speed value such as "liger+ckpt" under `backend`."""
    fields: dict = dict(PLAIN)
    section: dict = {}
    for part in speed_parts(speed):
        (section if part in BACKEND_SECTION_OPTIONS else fields).update(SPEED_OPTIONS[part])
    if section:
        fields[backend] = section
    return fields


@dataclass(frozen=True)
class Cell:
    size: str
    method: str
    backend: str
    seq_len: int
    speed: str
    micro_batch: int | None = None  # None: the bench's default for the size and seq_len

    @property
    def name(self) -> str:
        batch = f"-mb{self.micro_batch}" if self.micro_batch else ""
        return f"{self.size}-{self.method}-{self.backend}-s{self.seq_len}-{self.speed}{batch}"

    @property
    def text(self) -> str:
        """As `--cells` takes it: "8b/full/fsdp/4096/liger+ckpt+fused@2"."""
        batch = f"@{self.micro_batch}" if self.micro_batch else ""
        return f"{self.size}/{self.method}/{self.backend}/{self.seq_len}/{self.speed}{batch}"


CELL_FORM = "size/method/backend/seq_len/speed[@micro_batch]"


def parse_cell(text: str) -> Cell:
    """A cell from its text; a ValueError names the part that is unknown."""
    body, _at, batch = text.strip().partition("@")
    parts = body.split("/")
    if len(parts) != 5:
        raise ValueError(f"{text!r}: a cell is {CELL_FORM}")
    size, method, backend, seq_len, speed = parts
    for what, value, known in (("size", size, SHAPES), ("method", method, METHODS),
                               ("backend", backend, BACKENDS)):
        if value not in known:
            raise ValueError(f"{text!r}: unknown {what} {value!r}; known: {', '.join(known)}")
    if not seq_len.isdigit():
        raise ValueError(f"{text!r}: seq_len {seq_len!r} is not a whole number")
    unknown = unknown_speed_parts(speed)
    if unknown:
        raise ValueError(f"{text!r}: unknown speed option {', '.join(unknown)}; known: none, "
                         f"{', '.join(SPEED_OPTIONS)}")
    if _at and not batch.isdigit():
        raise ValueError(f"{text!r}: micro-batch {batch!r} is not a whole number")
    return Cell(size, method, backend, int(seq_len), speed, int(batch) if _at else None)


def parse_cells(text: str) -> list[Cell]:
    """A comma-separated list of cells, in its order."""
    return [parse_cell(part) for part in text.split(",") if part.strip()]


def read_cells_file(path: Path) -> list[Cell]:
    """One cell a line; blank lines and "#" comments are skipped."""
    lines = (line.partition("#")[0] for line in path.read_text(encoding="utf-8").splitlines())
    return [parse_cell(line) for line in lines if line.strip()]


def ordered_cells(*, sizes: list[str], methods: list[str], backends: list[str],
                  seq_lens: list[int], speeds: list[str]) -> list[Cell]:
    """Every cell of a matrix, the most telling first: the first size at the first seq_len
    and speed value, then the second size's LoRA there, then the rest in table order."""
    cells = [Cell(size, method, backend, seq_len, speed) for size, seq_len, speed, method, backend
             in itertools.product(sizes, seq_lens, speeds, methods, backends)]

    def tier(cell: Cell) -> int:
        first_setting = cell.seq_len == seq_lens[0] and cell.speed == speeds[0]
        if first_setting and cell.size == sizes[0]:
            return 0
        if first_setting and cell.size in sizes[1:2] and cell.method == "lora":
            return 1
        return 2
    return sorted(cells, key=tier)
