"""ZeRO-2 on a CPU-only host: what the trainer changes in the generated DeepSpeed config, and
optimizer offload trained for real (DeepSpeedCPUAdam is JIT-compiled on first use, about
1-2 minutes, then cached under TORCH_EXTENSIONS_DIR)."""
from statistics import mean

import pytest
import torch

from tunedeck.backend_config import zero2_config
from tunedeck.job_spec import JobSpec

from trainer.backends.zero2 import config_for_host
from trainer.rank import RankContext

OFFLOAD_STEPS = 6


def context_on(device: str) -> RankContext:
    return RankContext(rank=0, local_rank=0, world_size=1, local_world_size=1,
                       device=torch.device(device))


def test_offloaded_optimizer_state_is_pinned_only_on_a_gpu_host():
    settings = zero2_config(JobSpec(max_steps=1, zero2={"offload_optimizer": True}))
    assert settings["zero_optimization"]["offload_optimizer"]["pin_memory"] is True

    on_cpu = config_for_host(settings, context_on("cpu"))
    assert on_cpu["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert settings["zero_optimization"]["offload_optimizer"]["pin_memory"] is True  # not mutated
    assert {**on_cpu, "zero_optimization": None} == {**settings, "zero_optimization": None}
    assert config_for_host(settings, context_on("cuda:0")) is settings


def test_a_config_without_offload_passes_through():
    settings = zero2_config(JobSpec(max_steps=1))
    assert config_for_host(settings, context_on("cpu")) is settings


@pytest.mark.torchrun
def test_offloaded_optimizer_trains_on_cpu_ranks(run_trainer, builtin_model_dir):
    from tests.trainer.test_trainer_runs import assert_merged_matches_base_plus_adapter

    result = run_trainer(backend="zero2", method="lora", precision="bf16", max_steps=OFFLOAD_STEPS,
                         zero2={"offload_optimizer": True})
    assert result.returncode == 0, result.output
    print(f"zero2 offload run: {result.seconds:.1f} s")
    losses = [event["loss"] for event in result.events_of_kind(0, "step")]
    assert len(losses) == OFFLOAD_STEPS and mean(losses[-2:]) < mean(losses[:2]) - 1.0, losses
    assert_merged_matches_base_plus_adapter(result.run, builtin_model_dir)
