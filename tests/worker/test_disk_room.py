"""A job waits in the queue while the disk under the run folders is too small for its
checkpoints and export, and starts by itself once there is room; a disk-full failure is
judged with the room left and leaves no half checkpoint behind."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.small_disk import mount_problem, small_disk
from tests.worker.test_job_claim import heartbeat, submit
from tunedeck.jobs import queries as job_queries
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.disk_need import disk_need
from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA
from tunedeck.run_folder import CHECKPOINT_STATE_FILE, RunFolder, write_json
from worker.disk_room import DiskRoom, disk_hold_reason, free_bytes_under
from worker.job_claim import claim_job
from worker.job_runner import judge_run
from worker.supervision import Supervision
from worker.worker_identity import WorkerIdentity

CPU_WORKER = WorkerIdentity(name="default@cpu-1", host="cpu-1", queues=("default",),
                            gpu_ids=None, concurrency=1)
# A full fine-tune of a 70B model: its checkpoints alone are terabytes, more than any disk
# this test runs on has free.
HUGE = {"model": "meta-llama/Meta-Llama-3-70B", "method": "full", "num_gpus": 1,
        "checkpoint_every_steps": 1, "backend": "fsdp"}
TINY = {"model": "builtin:tiny-llama", "num_gpus": 1}


def test_the_hold_reason_gives_both_figures_and_what_to_do():
    assert disk_hold_reason(runs_dir=Path("/var/tunedeck/runs"), free_bytes=900_000,
                            needed_bytes=1_672_448) == (
        "waiting: the disk under /var/tunedeck/runs is too small for this job (0.9 MB free, "
        "1.7 MB needed): free space, lower keep_checkpoints, or move TUNEDECK_HOME")
    assert disk_hold_reason(runs_dir=Path("/r"), free_bytes=10, needed_bytes=10) is None
    # A disk that cannot be measured holds nothing back.
    assert disk_hold_reason(runs_dir=Path("/r"), free_bytes=None, needed_bytes=10) is None


def test_free_space_is_read_on_the_nearest_folder_that_exists(tmp_path):
    assert free_bytes_under(tmp_path / "runs" / "job-1") == free_bytes_under(tmp_path) > 0


def _room(tmp_path: Path) -> DiskRoom:
    runs = tmp_path / "runs"
    return DiskRoom(runs, lambda job_id: runs / f"job-{job_id}")


def test_a_job_larger_than_the_free_disk_is_held_and_a_small_one_is_not(tmp_path):
    room = _room(tmp_path)
    huge = JobSpec(max_steps=10, **HUGE)
    reason = room.hold_reason(huge, job_id=1, resuming=False)
    assert reason.startswith(f"waiting: the disk under {tmp_path / 'runs'} is too small for this "
                             "job (")
    assert reason.endswith(" needed): free space, lower keep_checkpoints, or move TUNEDECK_HOME")
    assert room.hold_reason(JobSpec(max_steps=10, **TINY), job_id=2, resuming=False) is None
    # A model the planner cannot size is not held: its need is unknown.
    unknown = JobSpec(max_steps=10, model=str(tmp_path / "no-such-model"))
    assert room.hold_reason(unknown, job_id=3, resuming=False) is None


@pytest.mark.skipif(mount_problem() is not None, reason=str(mount_problem()))
def test_a_resumed_job_counts_the_checkpoints_it_already_wrote(tmp_path):
    spec = JobSpec(max_steps=6, checkpoint_every_steps=2, keep_checkpoints=2, **TINY)
    need = disk_need(spec, BUILTIN_TINY_LLAMA)
    with small_disk(tmp_path / "runs", need.total_bytes) as disk:
        room = DiskRoom(disk.path, lambda job_id: disk.path / f"job-{job_id}")
        run = RunFolder(disk.path / "job-1")
        run.checkpoint_dir(2).mkdir(parents=True)
        # Whole pages, as the tmpfs counts them.
        written = need.checkpoint_bytes // 4096 * 4096
        (run.checkpoint_dir(2) / "__0_0.distcp").write_bytes(b"\0" * written)
        assert disk.free_bytes < need.total_bytes
        assert "too small" in room.hold_reason(spec, job_id=1, resuming=False)
        assert room.hold_reason(spec, job_id=1, resuming=True) is None


def test_a_held_job_stays_queued_saying_why_and_holds_no_younger_job_back(database, tmp_path):
    heartbeat(database, CPU_WORKER)
    huge, small = submit(database, **HUGE), submit(database, **TINY)
    room = _room(tmp_path)
    held = claim_job(huge, identity=CPU_WORKER, database=database, run_dir=str(tmp_path / "1"),
                     worker_lost_seconds=20, disk_room=room)
    assert (held.status, held.spec, held.hand_on_to) == ("queued", None, None)
    with database.transaction() as session:
        note = job_queries.list_job_events(session=session, job_id=huge)[-1].message
    assert note.startswith("waiting: the disk under ") and "MB needed)" in note
    # The one job slot is not kept for the held job: the small one behind it runs.
    started = claim_job(small, identity=CPU_WORKER, database=database,
                        run_dir=str(tmp_path / "2"), worker_lost_seconds=20, disk_room=room)
    assert started.status == "running"


def test_a_disk_full_failure_leads_with_the_disk_and_clears_the_half_checkpoint(tmp_path):
    run = RunFolder(tmp_path / "job-7")
    run.checkpoint_dir(2).mkdir(parents=True)
    write_json(run.checkpoint_dir(2) / CHECKPOINT_STATE_FILE, {"step": 2})
    run.partial_checkpoint_dir(4).mkdir()
    notice = "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
    result = judge_run(1, Supervision(error_notices=[(1.0, 0, notice)]), run)
    assert (result.outcome, result.failure.kind, result.failure.rank) == ("failed", "disk_full", 0)
    first_line, rest = result.error.split("\n", 1)
    assert first_line.startswith(f"the disk under {run.path} is full (") and \
        first_line.endswith(" MB free): free space, lower keep_checkpoints, or move TUNEDECK_HOME")
    assert rest == f"rank 0: {notice}"
    assert sorted(run.checkpoints_dir.iterdir()) == [run.checkpoint_dir(2)]


@pytest.mark.skipif(mount_problem() is not None, reason=str(mount_problem()))
def test_a_run_folder_the_full_disk_cannot_hold_fails_the_job_by_name(tmp_path):
    """The worker's own writes (spec.json, the backend's config, launch.json) on a disk that
    filled between the claim and the launch: the job fails saying so; the worker goes on."""
    from tunedeck.settings import Settings
    from worker.job_runner import judge_launch_error
    from worker.launch import NodeLaunch, prepare_run_folder

    with small_disk(tmp_path / "runs", 64 * 1024) as disk:
        disk.fill_leaving(0)
        run = RunFolder(disk.path / "job-9")
        launch = NodeLaunch(job_id=9, spec=JobSpec(max_steps=10, **TINY), run=run)
        with pytest.raises(OSError) as raised:
            prepare_run_folder(launch, Settings(home=tmp_path))
        result = judge_launch_error(raised.value, run)
    assert (result.outcome, result.failure.kind) == ("failed", "disk_full")
    first_line, second_line = result.error.splitlines()
    assert first_line == (f"the disk under {run.path} is full (0.0 MB free): free space, lower "
                          "keep_checkpoints, or move TUNEDECK_HOME")
    assert second_line.startswith("could not start torchrun: [Errno 28] No space left on device")
