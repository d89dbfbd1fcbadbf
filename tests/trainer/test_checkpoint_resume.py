"""Checkpoints and `--resume`: a run killed after a checkpoint and resumed goes on exactly as
an uninterrupted run of the same spec would (real torchrun CPU ranks, built-in model)."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.trainer.conftest import launch_trainer, torchrun_command, trainer_environment, write_run

STEPS = 20
CHECKPOINT_EVERY_STEPS = 5
KEEP_CHECKPOINTS = 2
FIRST_CHECKPOINT_TIMEOUT_SECONDS = 180


def run_events(events: list[dict]) -> list[list[dict]]:
    """A rank file's events split into launches (every launch starts by loading the model)."""
    launches = []
    for event in events:
        if event["kind"] == "notice" and event["message"].startswith("loading model"):
            launches.append([])
        launches[-1].append(event)
    return launches


def step_losses(events: list[dict]) -> dict[int, float]:
    return {event["step"]: event["loss"] for event in events if event["kind"] == "step"}


def step_figure(events: list[dict], name: str) -> dict[int, float]:
    return {event["step"]: event[name] for event in events if event["kind"] == "step"}


def notices(events: list[dict]) -> list[str]:
    return [event["message"] for event in events if event["kind"] == "notice"]


def assert_same_losses(actual: dict[int, float], expected: dict[int, float], *, ranks: int) -> None:
    expected = {step: expected[step] for step in actual}
    if ranks == 1:
        assert actual == expected  # one rank: nothing is reduced, so bit for bit
    else:
        assert actual == pytest.approx(expected, rel=0.01)


def kill_after_first_checkpoint(run, tunedeck_home: Path, *, ranks: int) -> None:
    """Start the run, wait for its first complete checkpoint, then SIGKILL the launcher and
    its ranks: a crash, with no chance to clean up."""
    import psutil

    launcher = subprocess.Popen(torchrun_command(run, ranks=ranks), env=trainer_environment(tunedeck_home),
                                cwd=run.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + FIRST_CHECKPOINT_TIMEOUT_SECONDS
        while not run.completed_checkpoints():
            assert launcher.poll() is None, f"the run exited ({launcher.returncode}) before a checkpoint"
            assert time.monotonic() < deadline, "the run saved no checkpoint in time"
            time.sleep(0.05)
    finally:
        ranks_alive = psutil.Process(launcher.pid).children(recursive=True) if launcher.poll() is None else []
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        psutil.wait_procs(ranks_alive, timeout=30)


# A full fine-tune's DPO with a precomputed reference: the resumed launch computes the
# reference again before it loads the checkpoint, so it is the base's, not the trained one's.
DPO_PRECOMPUTED = {"objective": "dpo", "dataset": "builtin:arithmetic-preference",
                   "method": "full", "dpo": {"reference": "precomputed"}, "seq_len": 48}


# GRPO: the resumed launch skips the rounds trained before the checkpoint without sampling
# them, and samples the next round as the first launch did (the round's seed).
GRPO = {"objective": "grpo", "dataset": "builtin:arithmetic-rl", "seq_len": 48,
        "grpo": {"num_generations": 4, "max_completion_length": 8,
                 "rewards": [{"name": "contains", "text": "e"}]}}


@pytest.mark.torchrun
@pytest.mark.parametrize("backend, ranks, options", [
    ("zero2", 1, {}), ("zero2", 2, {}), ("fsdp", 1, {}), ("fsdp", 2, {}),
    ("fsdp", 2, DPO_PRECOMPUTED), ("zero2", 2, GRPO)],
    ids=["zero2-1-rank", "zero2-2-ranks", "fsdp-1-rank", "fsdp-2-ranks", "fsdp-2-ranks-dpo",
         "zero2-2-ranks-grpo"])
def test_a_killed_run_resumes_as_if_never_stopped(backend, ranks, options, tmp_path, tunedeck_home,
                                                  builtin_model_dir):
    spec = {"backend": backend, "method": "lora", "precision": "bf16", "num_gpus": ranks,
            "max_steps": STEPS, "warmup_steps": 2, **options}
    started = time.monotonic()
    # The reference: uninterrupted. Its --resume finds nothing to resume and says so.
    straight = launch_trainer(write_run(tmp_path / "straight", **spec), tunedeck_home, "--resume",
                              ranks=ranks)
    assert straight.returncode == 0, straight.output
    assert any(message.startswith("no complete checkpoint") for message in notices(straight.events(0)))
    straight_losses = step_losses(straight.events(0))
    assert sorted(straight_losses) == list(range(1, STEPS + 1))

    run = write_run(tmp_path / "interrupted", checkpoint_every_steps=CHECKPOINT_EVERY_STEPS,
                    keep_checkpoints=KEEP_CHECKPOINTS, **spec)
    kill_after_first_checkpoint(run, tunedeck_home, ranks=ranks)
    saved_step = run.completed_checkpoints()[-1][0]
    assert saved_step < STEPS, "the run finished before it could be killed"
    # A newer folder without trainer_state.json, as a kill in the middle of a save leaves it.
    partial = run.checkpoint_dir(saved_step + CHECKPOINT_EVERY_STEPS)
    partial.mkdir(exist_ok=True)
    (partial / "half-written.distcp").write_bytes(b"\0")

    resumed = launch_trainer(run, tunedeck_home, "--resume", ranks=ranks)
    assert resumed.returncode == 0, resumed.output
    print(f"{backend} on {ranks} rank(s): straight, killed at step {saved_step}+, resumed: "
          f"{time.monotonic() - started:.1f} s")

    for rank in range(ranks):
        killed_events, resumed_events = run_events(resumed.events(rank))
        assert f"resumed from step {saved_step} ({run.checkpoint_dir(saved_step).resolve()})" in notices(resumed_events)
        resumed_losses = step_losses(resumed_events)
        assert sorted(resumed_losses) == list(range(saved_step + 1, STEPS + 1))
        assert_same_losses(resumed_losses, straight_losses, ranks=ranks)
        if options is GRPO:  # the same completions, so the same rewards
            assert len(set(step_figure(straight.events(rank), "reward").values())) > 1
            assert step_figure(resumed_events, "reward") == {
                step: reward for step, reward in step_figure(straight.events(rank), "reward").items()
                if step > saved_step}
        # Saving a checkpoint does not disturb the run that saves it either.
        assert_same_losses(step_losses(killed_events), straight_losses, ranks=ranks)

    # The newest K complete checkpoints stay; the partial one was saved over, the rest pruned.
    kept_steps = [STEPS - CHECKPOINT_EVERY_STEPS * index for index in reversed(range(KEEP_CHECKPOINTS))]
    assert run.completed_checkpoints() == [(step, run.checkpoint_dir(step)) for step in kept_steps]
    assert sorted(run.checkpoints_dir.iterdir()) == [run.checkpoint_dir(step) for step in kept_steps]
    newest = run.checkpoint_dir(STEPS)
    assert not (newest / "half-written.distcp").exists()
    assert {f"rng-rank-{rank}.pt" for rank in range(ranks)} <= {path.name for path in newest.iterdir()}
    assert resumed.events_of_kind(0, "notice")[-1]["message"].startswith("merged model saved")


def test_skipping_micro_batches_leaves_the_stream_where_the_saved_steps_left_it():
    from trainer.checkpoint import skip_micro_batches

    batches = skip_micro_batches(iter(range(100)), steps=3, grad_accum=4)
    assert next(batches) == 12


def test_a_checkpoint_of_another_configuration_is_refused(tmp_path):
    from trainer.checkpoint import check_resumable

    saved = {"step": 10, "backend": "zero2", "world_size": 2, "total_steps": 20}
    check_resumable(saved, {"backend": "zero2", "world_size": 2, "total_steps": 20}, path=tmp_path)
    with pytest.raises(ValueError, match="world_size 2 \\(now 4\\)"):
        check_resumable(saved, {"backend": "zero2", "world_size": 4, "total_steps": 20}, path=tmp_path)
