"""What objective dpo costs in the memory planner: Llama-3.1-8B (the bundled table's shape,
the GPU benches' "8b"), a full fine-tune on one node of 8 x 80 GB, under FSDP and ZeRO-2,
with and without activation checkpointing: the planner's bytes per GPU for the SFT spec,
then the same spec as DPO with reference auto (a frozen copy of the weights, held as the
backend holds them) and reference precomputed (none), each as a ratio to the SFT spec's
figures computed in the same run, with the cost model's step time beside them. Pure: no
GPU, no network, no download; it runs in seconds.

Usage: .venv/bin/python bench/dpo_memory_plan.py [--seq-len 2048] [--micro-batch 1]
       [--gpus 8] [--gpu-memory-gb 80] [--markdown FILE: append the table as markdown]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from markdown_table import MarkdownTable  # noqa: E402
from random_llama import SHAPES  # noqa: E402

from tunedeck.backends import BACKENDS  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.planner.advice import verdict  # noqa: E402
from tunedeck.planner.gpu_cards import GpuSet  # noqa: E402
from tunedeck.planner.memory_plan import plan_strategies  # noqa: E402
from tunedeck.planner.model_shapes import ModelShape  # noqa: E402
from tunedeck.planner.shape_source import known_shape  # noqa: E402
from tunedeck.planner.step_cost import step_cost  # noqa: E402
from tunedeck.units import GB  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B"
OBJECTIVES = {"sft": {}, "dpo auto": {"objective": "dpo"},
              "dpo precomputed": {"objective": "dpo", "dpo": {"reference": "precomputed"}}}
COLUMNS = ["backend", "ckpt", "objective", "weights GB", "reference GB", "activations GB",
           "total GB", "verdict", "total / SFT", "activations / SFT", "step / SFT"]


def eight_b_shape() -> ModelShape:
    """The bundled table's Llama-3.1-8B, checked against the shape the GPU benches build."""
    shape = known_shape(MODEL)
    bench = SHAPES["8b"]
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.num_kv_heads,
            shape.intermediate_size, shape.vocab_size) == (
        bench.hidden, bench.layers, bench.heads, bench.kv_heads, bench.intermediate,
        bench.vocab), "the bundled 8B is not the benches' 8B"
    return shape


def job(backend: str, checkpointing: bool, objective: dict, arguments) -> JobSpec:
    return JobSpec.model_validate({
        "max_steps": 1, "model": MODEL, "method": "full", "backend": backend,
        "num_gpus": arguments.gpus, "seq_len": arguments.seq_len,
        "micro_batch_size": arguments.micro_batch, "precision": "bf16",
        backend: {"activation_checkpointing": checkpointing}, **objective})


def rows(shape: ModelShape, gpus: GpuSet, arguments) -> list[list[str]]:
    table = []
    for backend in BACKENDS.values():
        strategy = backend.strategy(False)
        for checkpointing in (False, True):
            figures = {}
            for name, objective in OBJECTIVES.items():
                spec = job(backend.name, checkpointing, objective, arguments)
                plan = plan_strategies(spec, gpus, shape)[strategy]
                figures[name] = (plan, step_cost(spec, gpus, shape, strategy).seconds)
            sft_plan, sft_seconds = figures["sft"]
            for name, (plan, seconds) in figures.items():
                part = plan.breakdown
                table.append([
                    strategy, "on" if checkpointing else "off", name,
                    f"{part.params / GB:.2f}", f"{plan.reference_bytes / GB:.2f}",
                    f"{part.activations / GB:.2f}", f"{part.total / GB:.2f}", verdict(plan, gpus),
                    f"{part.total / sft_plan.breakdown.total:.3f}",
                    f"{part.activations / sft_plan.breakdown.activations:.3f}",
                    f"{seconds / sft_seconds:.3f}"])
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=1,
                        help="examples (SFT) or pairs (DPO) a micro-batch")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--gpu-memory-gb", type=float, default=80.0)
    parser.add_argument("--markdown", type=Path, default=None)
    arguments = parser.parse_args()
    shape = eight_b_shape()
    gpus = GpuSet(arguments.gpus, arguments.gpu_memory_gb)
    title = (f"DPO against SFT in the memory plan: {MODEL} full, {gpus.count} x "
             f"{gpus.memory_gb:g} GB ({gpus.card_spec.name}), seq {arguments.seq_len}, "
             f"micro-batch {arguments.micro_batch}, bf16, per GPU (GB = 10^9 bytes)")
    table = rows(shape, gpus, arguments)
    widths = [max(len(row[index]) for row in [COLUMNS, *table]) for index in range(len(COLUMNS))]
    print(title)
    for row in [COLUMNS, *table]:
        print("  ".join(cell.ljust(width) if index < 3 or index == 7 else cell.rjust(width)
                        for index, (cell, width) in enumerate(zip(row, widths))))
    notes = ("DPO: a micro-batch of pairs is one forward of twice the rows (activations "
             "doubled; whole logits, no fused loss); above 2.000 where one SFT row has no mask "
             "and a pair's two rows, padded to each other, have one (sdpa keeps a bias per "
             "layer and repeats k/v for grouped-query attention). reference GB: the frozen "
             "copy's share of the weights (auto, full fine-tune); precomputed holds none and "
             "pays one forward pass over the pairs before step 1, charged per step like auto's "
             "reference forward. step: the planner's cost model, not a measurement.")
    print(notes)
    markdown = MarkdownTable(arguments.markdown, COLUMNS)
    markdown.start(title)
    for row in table:
        markdown.add(row)
    markdown.end((notes,))
    return 0


if __name__ == "__main__":
    sys.exit(main())
