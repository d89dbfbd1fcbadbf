"""Every method x backend x precision cell on 2 CPU ranks (gloo) with builtin:tiny-llama:
each supported cell trains (the loss falls in a few steps), each refused one is refused with
a message that says what to choose instead, where the refusal belongs.

| backend | method            | bf16   | fp16                           | fp32   |
| ------- | ----------------- | ------ | ------------------------------ | ------ |
| zero2   | lora, qlora, full | trains | the worker's preflight refuses | trains |
|         |                   |        | it on CPU-only hosts (GPU: not |        |
|         |                   |        | run by these tests)            |        |
| fsdp    | lora, full        | trains | trains (sharded grad scaler)   | trains |
| fsdp    | qlora             | the spec refuses it (why: test_qlora_backends.py)  |
"""
from statistics import mean

import pytest
import torch

from tunedeck.spec.job_spec import JobSpec

from tunedeck.spec.text import format_validation_error
from worker.input_check import find_input_problems
from tests.trainer.conftest import launch_trainer, write_run

pytestmark = pytest.mark.torchrun

STEPS = 8
PRECISIONS = ("bf16", "fp16", "fp32")
TRAINED_CELLS = [
    *[("zero2", method, precision) for method in ("lora", "qlora", "full")
      for precision in ("bf16", "fp32")],
    *[("fsdp", method, precision) for method in ("lora", "full") for precision in PRECISIONS],
]
FP16_ON_CPU_MESSAGE = "precision fp16 under zero2 needs a CUDA GPU"


@pytest.fixture(scope="module")
def cell_run(tmp_path_factory, tunedeck_home, builtin_model_dir):
    """cell_run(backend, method, precision) -> TrainerRun, each cell launched once per module
    (the export tests reuse the training tests' runs)."""
    runs = {}

    def run(backend: str, method: str, precision: str):
        cell = (backend, method, precision)
        if cell not in runs:
            run_dir = tmp_path_factory.mktemp("-".join(cell)) / "run"
            folder = write_run(run_dir, backend=backend, method=method, precision=precision,
                               max_steps=STEPS)
            runs[cell] = launch_trainer(folder, tunedeck_home)
        return runs[cell]

    return run


@pytest.mark.parametrize("backend,method,precision", TRAINED_CELLS)
def test_supported_cell_trains(backend, method, precision, cell_run):
    result = cell_run(backend, method, precision)
    assert result.returncode == 0, result.output
    print(f"{backend} {method} {precision}: {result.seconds:.1f} s")
    losses = [event["loss"] for event in result.events_of_kind(0, "step")]
    assert len(losses) == STEPS
    # At the conftest's learning rate every cell drops by 1.9 or more in 8 steps.
    assert mean(losses[-2:]) < mean(losses[:2]) - 1.0, losses


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_qlora_exports_an_adapter_whose_merge_into_the_fp32_base_matches(precision, cell_run,
                                                                         builtin_model_dir):
    from tests.trainer.test_trainer_runs import assert_merged_matches_base_plus_adapter

    result = cell_run("zero2", "qlora", precision)
    assert result.returncode == 0, result.output
    assert (result.run.adapter_dir / "adapter_model.safetensors").is_file()
    # merged/ reloads with AutoModelForCausalLM as fp32, and gives the logits of the fp32
    # base (never the 4-bit one) plus the adapter.
    assert_merged_matches_base_plus_adapter(result.run, builtin_model_dir)


def test_full_finetune_exports_under_both_backends_agree_and_hold_the_trained_weights(
        cell_run, builtin_model_dir):
    """Both backends did the same fp32 arithmetic on the same batches, so the weights each
    gathered to rank 0 must agree, and all of them must have moved from the base."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    states = {}
    for backend in ("zero2", "fsdp"):
        result = cell_run(backend, "full", "fp32")
        assert result.returncode == 0, result.output
        assert not result.run.adapter_dir.exists()
        AutoTokenizer.from_pretrained(result.run.merged_dir)
        merged = AutoModelForCausalLM.from_pretrained(result.run.merged_dir)
        assert merged.dtype == torch.float32
        states[backend] = merged.state_dict()
    base = AutoModelForCausalLM.from_pretrained(builtin_model_dir).state_dict()
    assert states["zero2"].keys() == states["fsdp"].keys() == base.keys()
    for name, weight in states["zero2"].items():
        assert torch.allclose(weight, states["fsdp"][name], atol=1e-5), name
        assert not torch.allclose(weight, base[name], atol=1e-3), name


@pytest.mark.parametrize("precision", PRECISIONS)
def test_qlora_under_fsdp_is_refused_by_the_spec(precision):
    with pytest.raises(ValueError) as refusal:
        JobSpec(max_steps=1, method="qlora", backend="fsdp", precision=precision)
    message = format_validation_error(refusal.value)
    assert message.startswith("backend: qlora under fsdp")
    assert "use backend zero2" in message and "method lora under fsdp" in message


@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
def test_fp16_under_zero2_is_refused_before_launch_on_a_cpu_host_only(method):
    spec = JobSpec(max_steps=1, method=method, backend="zero2", precision="fp16")
    (problem,) = find_input_problems(spec, cuda_available=False)
    assert problem.startswith(FP16_ON_CPU_MESSAGE) and "use bf16" in problem
    assert find_input_problems(spec, cuda_available=True) == []
    fsdp_spec = spec.model_copy(update={"backend": "fsdp", "method": "full"})
    assert find_input_problems(fsdp_spec, cuda_available=False) == []


def test_fp16_under_zero2_would_fail_at_deepspeed_startup_on_this_cpu(tmp_path, tunedeck_home,
                                                                       builtin_model_dir):
    """What the preflight saves: DeepSpeed's engine refuses fp16 on a CPU without oneDNN
    fp16 kernels, after the ranks have loaded the model."""
    if torch.cuda.is_available() or torch.ops.mkldnn._is_mkldnn_fp16_supported():
        pytest.skip("this host has fp16 support DeepSpeed accepts")
    folder = write_run(tmp_path / "run", backend="zero2", method="lora", precision="fp16",
                       max_steps=STEPS)
    result = launch_trainer(folder, tunedeck_home)
    assert result.returncode != 0
    # Both ranks hit the refusal; torchrun tears down the others as soon as one fails, so
    # only the rank that failed first is sure to have written its notice.
    errors = {event["message"] for rank in range(result.ranks)
              if result.run.rank_metrics_file(rank).exists()
              for event in result.events_of_kind(rank, "notice") if event["level"] == "error"}
    assert errors == {"ValueError: Type fp16 is not supported on your device."}, result.output


@pytest.mark.parametrize("backend,method,precision", TRAINED_CELLS)
def test_each_rank_holds_the_bytes_the_memory_planner_predicts(backend, method, precision,
                                                                cell_run):
    """Issue 4's check against real runs: parameters, gradients and optimizer state per rank,
    measured on the tensors (trainer/footprint.py), within 2% of tunedeck/planner/memory_plan.py."""
    from tunedeck.planner.gpu_cards import GpuSet
    from tunedeck.planner.memory_plan import plan_strategies
    from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA
    from tunedeck.run_folder import read_json

    result = cell_run(backend, method, precision)
    assert result.returncode == 0, result.output
    spec = JobSpec.model_validate(read_json(result.run.spec_file))
    planned = plan_strategies(spec, GpuSet(spec.num_gpus, 80), BUILTIN_TINY_LLAMA)[backend].breakdown
    for rank in range(result.ranks):
        (footprint,) = result.events_of_kind(rank, "footprint")
        for part, expected in (("params", planned.params), ("grads", planned.grads),
                               ("optimizer", planned.optimizer)):
            measured = footprint[f"{part}_bytes"]
            assert measured == pytest.approx(expected, rel=0.02), (rank, part, measured, expected)
