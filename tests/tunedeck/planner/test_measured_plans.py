"""The memory planner against peaks measured on a GPU (tests/golden/measured_peaks.json,
from bench/gpu_throughput.py and bench/gpu_memory_plan.py): for every measured cell, what
the allocator reserved is within 10% of the plan (measured / planned, the benches'
"meas/plan"; they were 0.99 to 1.05 when these cells were added), and no plan "fits" a
job a GPU run saw fail for memory."""
import json
from pathlib import Path

import pytest

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.advice import plan_memory
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import spec_plan
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import GB, GIB

MEASURED = json.loads((Path(__file__).resolve().parents[2] / "golden" / "measured_peaks.json")
                      .read_text())
TOLERANCE = 0.10


def shape_of(name: str) -> ModelShape:
    return ModelShape(name, **MEASURED["shapes"][name])


def cell_spec(cell: dict) -> JobSpec:
    return JobSpec(model=cell["model"], max_steps=10, num_gpus=1, precision="bf16",
                   learning_rate=1e-5, **cell["spec"])


CELLS = [(run["card_gib"], cell) for run in MEASURED["runs"] for cell in run["cells"]]


def cell_id(card_and_cell) -> str:
    _card, cell = card_and_cell
    spec = cell["spec"]
    extras = "+ckpt" if any(isinstance(value, dict) and value.get("activation_checkpointing")
                           for value in spec.values()) else ""
    return (f"{cell['model']}-{spec['method']}-{spec['backend']}-s{spec['seq_len']}"
            f"-mb{spec['micro_batch_size']}-{spec['kernels']}{extras}")


@pytest.mark.parametrize("card_and_cell", CELLS, ids=[cell_id(item) for item in CELLS])
def test_the_plan_is_within_10_percent_of_the_measured_peak(card_and_cell):
    card_gib, cell = card_and_cell
    spec = cell_spec(cell)
    # The benches' rows are all seq_len long: no padding, so no mask to plan for.
    planned = spec_plan(spec, GpuSet(1, card_gib * GIB / GB), shape_of(cell["model"]),
                        full_rows=True)
    assert cell["reserved_gib"] / (planned.breakdown.total / GIB) == \
        pytest.approx(1.0, abs=TOLERANCE)


OUT_OF_MEMORY = MEASURED["out_of_memory"]


@pytest.mark.parametrize("cell", OUT_OF_MEMORY["cells"],
                         ids=[cell["spec"]["backend"] for cell in OUT_OF_MEMORY["cells"]])
def test_the_8b_full_fine_tunes_that_ran_out_of_memory_are_never_said_to_fit(cell):
    """Llama-3.1-8B's shape, full, seq 4096, micro-batch 2, Liger and activation
    checkpointing, one H200: both failed on the GPU (torch's foreach AdamW makes an fp32
    copy of every trainable parameter in its step, 32 GB here, and ZeRO-2 an fp32 copy of
    its gradient partition besides)."""
    spec = cell_spec(cell)
    plan = plan_memory(spec, GpuSet(1, OUT_OF_MEMORY["card_gib"] * GIB / GB),
                       shape_of(cell["model"]))
    assert plan.verdicts[spec.backend] == "does not fit"


def test_the_8b_full_fine_tune_that_ran_is_tight_and_recommends_what_has_a_margin():
    """With the fused AdamW the FSDP one ran (129.3 GiB reserved of 139.8): the plan says
    tight, not fits, and recommends a set-up with a margin before it."""
    spec = cell_spec(MEASURED["runs"][0]["cells"][0])
    assert spec.fused_optimizer and spec.backend == "fsdp" and spec.method == "full"
    plan = plan_memory(spec, GpuSet(1, 139.8 * GIB / GB), shape_of("8b"))
    assert plan.verdicts["fsdp"] == "tight"
    assert plan.recommended["fits"] == "fits"
    assert any(setup["label"] == "fsdp" and setup["fits"] == "tight"
               for setup in plan.alternatives)
