"""ZeRO-2 on a CPU-only host: what the trainer changes in the generated DeepSpeed config, and
optimizer offload trained for real (DeepSpeedCPUAdam is JIT-compiled on first use, about
1-2 minutes, then cached under TORCH_EXTENSIONS_DIR)."""
from statistics import mean

import pytest
import torch

from tunedeck.backends.zero2 import zero2_config
from tunedeck.spec.job_spec import JobSpec
from tunedeck.torch_extensions import environment_extensions_dir

from trainer.backends.zero2 import Zero2Backend, config_for_host, ops_to_compile
from trainer.rank import RankContext
from tests.trainer.conftest import launch_trainer, write_run

OFFLOAD_STEPS = 6


def context_on(device: str) -> RankContext:
    return RankContext(rank=0, local_rank=0, world_size=1, local_world_size=1,
                       device=torch.device(device))


def test_offloaded_optimizer_state_is_pinned_only_on_a_gpu_host():
    settings = zero2_config(JobSpec(max_steps=1, zero2={"offload_optimizer": True}))
    assert settings["zero_optimization"]["offload_optimizer"]["pin_memory"] is True

    on_cpu = config_for_host(settings, context_on("cpu"), trainable=10**9)
    assert on_cpu["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert settings["zero_optimization"]["offload_optimizer"]["pin_memory"] is True  # not mutated
    assert {**on_cpu, "zero_optimization": None} == {**settings, "zero_optimization": None}
    assert config_for_host(settings, context_on("cuda:0"), trainable=10**9) == settings


def test_a_config_without_offload_passes_through():
    settings = zero2_config(JobSpec(max_steps=1))
    assert config_for_host(settings, context_on("cpu"), trainable=10**9) == settings


def test_the_reduce_bucket_is_never_larger_than_the_trainable_parameters():
    """DeepSpeed allocates its two 5e8-element buckets whole (2 GB in bf16) even for a
    20M-parameter LoRA adapter: the trainer hands it a bucket the adapter's size, rounded
    up to whole MiB of elements, and the planner counts the same."""
    settings = zero2_config(JobSpec(max_steps=1))
    assert settings["zero_optimization"]["reduce_bucket_size"] == 500_000_000
    lora = config_for_host(settings, context_on("cuda:0"), trainable=20_000_001)
    assert lora["zero_optimization"]["reduce_bucket_size"] == 20 * 2**20
    assert settings["zero_optimization"]["reduce_bucket_size"] == 500_000_000  # not mutated
    full = config_for_host(settings, context_on("cuda:0"), trainable=8 * 10**9)
    assert full["zero_optimization"]["reduce_bucket_size"] == 500_000_000


def test_ops_without_a_build_in_the_extension_folder_are_named_before_launch(tmp_path):
    offload = zero2_config(JobSpec(max_steps=1, zero2={"offload_optimizer": True}))
    plain = zero2_config(JobSpec(max_steps=1))
    # An offloaded optimizer loads CPU Adam; without offload the ranks use torch's AdamW
    # and torch.distributed's collectives (the shared-memory ones are skipped), nothing to build.
    assert ops_to_compile(offload, context_on("cpu"), tmp_path) == ["cpu_adam"]
    assert ops_to_compile(plain, context_on("cpu"), tmp_path) == []
    assert ops_to_compile(plain, context_on("cuda:0"), tmp_path) == []
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "build.ninja").write_text("")  # a build under way
    assert ops_to_compile(offload, context_on("cpu"), tmp_path) == ["cpu_adam"]
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    assert ops_to_compile(offload, context_on("cpu"), tmp_path) == []


def test_the_startup_notice_says_what_compiles_and_where(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    offload = zero2_config(JobSpec(max_steps=1, zero2={"offload_optimizer": True}))
    notice = Zero2Backend.startup_notice(offload, context_on("cpu"))
    assert notice.startswith("compiling DeepSpeed's ops (cpu_adam), first time")
    assert "about a minute" in notice and str(tmp_path) in notice
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    assert Zero2Backend.startup_notice(offload, context_on("cpu")) is None
    assert Zero2Backend.startup_notice(zero2_config(JobSpec(max_steps=1)), context_on("cpu")) is None


@pytest.mark.torchrun
def test_cpu_ranks_build_no_op_from_an_empty_extension_folder(tmp_path, tunedeck_home,
                                                              builtin_model_dir):
    """A fresh clone's first ZeRO-2 job on CPU ranks used to sit at step 0 for about two
    minutes while DeepSpeed compiled its shared-memory all-reduce, which training never
    calls: it now starts like an FSDP job, with nothing built and nothing announced."""
    empty_extensions = tmp_path / "torch_extensions"
    empty_extensions.mkdir()
    run = write_run(tmp_path / "run", backend="zero2", method="lora", max_steps=2)
    result = launch_trainer(run, tunedeck_home,
                            environment={"TORCH_EXTENSIONS_DIR": str(empty_extensions)},
                            timeout_seconds=COLD_COMPILE_TIMEOUT_SECONDS)
    assert result.returncode == 0, result.output
    assert list(empty_extensions.iterdir()) == []
    assert "built successfully" not in result.output
    assert "compiling DeepSpeed's ops" not in result.output
    assert [event["phase"] for event in result.events_of_kind(0, "phase")
            if event["phase"] == "compile_ops"] == []
    assert len(result.events_of_kind(0, "step")) == 2


COLD_COMPILE_TIMEOUT_SECONDS = 900


@pytest.mark.torchrun
def test_offloaded_optimizer_trains_on_cpu_ranks(tmp_path, tunedeck_home, builtin_model_dir):
    from tests.trainer.test_trainer_runs import assert_merged_matches_base_plus_adapter

    run = write_run(tmp_path / "run", backend="zero2", method="lora", precision="bf16",
                    max_steps=OFFLOAD_STEPS, zero2={"offload_optimizer": True})
    cpu_adam_builds = environment_extensions_dir() / "cpu_adam"
    compiles = not any(cpu_adam_builds.glob("*.so"))
    # DeepSpeed JIT-compiles its CPU Adam on a fresh clone: minutes on 2 cores.
    result = launch_trainer(run, tunedeck_home, timeout_seconds=COLD_COMPILE_TIMEOUT_SECONDS)
    assert result.returncode == 0, result.output
    print(f"zero2 offload run: {result.seconds:.1f} s (cpu_adam compiled: {compiles})")
    # The job says why it sits at step 0 exactly when the op had to be built.
    notices = [event["message"] for event in result.events_of_kind(0, "notice")]
    compile_notices = [notice for notice in notices if notice.startswith("compiling DeepSpeed's ops")]
    assert bool(compile_notices) == compiles, notices
    assert all("cpu_adam" in notice for notice in compile_notices)
    assert bool(compile_notices) == ("compiling DeepSpeed's ops" in result.output)
    losses = [event["loss"] for event in result.events_of_kind(0, "step")]
    assert len(losses) == OFFLOAD_STEPS and mean(losses[-2:]) < mean(losses[:2]) - 1.0, losses
    assert_merged_matches_base_plus_adapter(result.run, builtin_model_dir)


def test_a_build_lock_left_by_a_killed_build_is_removed_and_a_fresh_one_kept(tmp_path):
    """torch waits forever on a JIT build's lock file; a job cancelled mid-build leaves one."""
    import os
    import time

    from trainer.backends.zero2 import STALE_BUILD_LOCK_SECONDS, remove_stale_build_locks

    stale, fresh = tmp_path / "cpu_adam" / "lock", tmp_path / "shm_comm" / "lock"
    for lock in (stale, fresh):
        lock.parent.mkdir()
        lock.write_text("")
    old = time.time() - STALE_BUILD_LOCK_SECONDS - 60
    os.utime(stale, (old, old))
    assert remove_stale_build_locks(tmp_path) == [stale]
    assert not stale.exists() and fresh.exists()
