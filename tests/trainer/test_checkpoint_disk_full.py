"""A checkpoint that the disk fills up under mid-write: a real full disk (a tmpfs as the run's
checkpoints folder, room for one checkpoint and not two), real torchrun, the built-in model.
The failed save leaves only its temporary folder, never a final name; the rank's notice is
torch.distributed.checkpoint's own words, which the worker's triage calls a full disk; and a
resume, once there is room, starts from the checkpoint before it and cleans the rest up."""
from __future__ import annotations

import pytest

from harness.small_disk import mount_problem, small_disk
from tests.trainer.conftest import BASE_SPEC, launch_trainer, write_run
from tests.trainer.test_checkpoint_resume import run_events
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.disk_need import checkpoint_bytes
from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA
from tunedeck.run_folder import CHECKPOINT_STATE_FILE
from worker.failure_triage import FailureEvidence, classify_failure

pytestmark = [pytest.mark.torchrun,
              pytest.mark.skipif(mount_problem() is not None, reason=str(mount_problem()))]

STEPS, EVERY = 6, 2
# A full fine-tune: its checkpoint is almost all weights and optimizer state, which the
# planner counts to within a few percent (measured 1.67 MB against 1.79 MB planned), so a
# disk of 1.5 planned checkpoints holds one and not two.
SPEC = {"method": "full", "backend": "fsdp", "num_gpus": 1, "max_steps": STEPS,
        "checkpoint_every_steps": EVERY, "keep_checkpoints": 2}


def test_a_checkpoint_cut_short_by_a_full_disk_is_never_the_latest(tmp_path, tunedeck_home,
                                                                   builtin_model_dir):
    run = write_run(tmp_path / "run", **SPEC)
    one_checkpoint = checkpoint_bytes(JobSpec.model_validate({**BASE_SPEC, **SPEC}),
                                      BUILTIN_TINY_LLAMA)
    with small_disk(run.checkpoints_dir, one_checkpoint * 3 // 2) as disk:
        failed = launch_trainer(run, tunedeck_home, ranks=1)
        assert failed.returncode != 0, "every checkpoint fitted: the disk was not small enough"
        partial = [path.name for path in run.checkpoints_dir.iterdir() if path.name.startswith(".")]
        completed = run.completed_checkpoints()
        assert completed, f"not even one checkpoint fitted: {failed.output}"
        saved_step = completed[-1][0]
        # The save that ran out of room is under its temporary name only.
        assert partial == [f".step-{saved_step + EVERY:08d}.partial"]
        assert sorted(path.name for path in run.checkpoints_dir.glob("step-*")) == \
            [path.name for _step, path in completed]
        assert all((path / CHECKPOINT_STATE_FILE).is_file() for _step, path in completed)

        # The rank's own notice: torch's words, which never say the disk is full.
        notice = failed.events_of_kind(0, "notice")[-1]
        assert notice["level"] == "error", (failed.events(0)[-5:], failed.output)
        reason = classify_failure(FailureEvidence(returncode=1, run_dir=str(run.path),
                                                  error_notices=((1.0, 0, notice["message"]),)))
        assert reason.kind == "disk_full", notice["message"]
        print(f"the rank's notice: {notice['message'][:300]!r}")

        disk.remount(16 * 1024 * 1024)
        resumed = launch_trainer(run, tunedeck_home, "--resume", ranks=1)
        # The temporary folder went at the resume; the rotation kept the newest two.
        left = sorted(path.name for path in run.checkpoints_dir.iterdir())
    assert resumed.returncode == 0, resumed.output
    assert left == [run.checkpoint_dir(step).name for step in (STEPS - EVERY, STEPS)]
    _failed_launch, resumed_launch = run_events(resumed.events(0))
    messages = [event["message"] for event in resumed_launch if event["kind"] == "notice"]
    saved_path = run.checkpoint_dir(saved_step).resolve()
    assert f"resumed from step {saved_step} ({saved_path})" in messages
    assert [event["step"] for event in resumed_launch if event["kind"] == "step"] == \
        list(range(saved_step + 1, STEPS + 1))
