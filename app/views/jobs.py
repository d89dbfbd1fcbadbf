"""Job rows as the API's JSON, and what the web reads of a job's run folder."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from app.views.artifacts import ARTIFACT_KINDS, artifact_summary
from tunedeck.launch_config import backend_config, build_torchrun_argv, trainer_settings
from tunedeck.db.models import Job
from tunedeck.jobs.states import FINISHED_STATUSES
from tunedeck.run_folder import RunFolder, read_json
from tunedeck.slurm.sbatch_script import SCRIPT_NAME as SBATCH_SCRIPT_NAME


def job_to_dict(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "status": job.status,
        "owner": job.owner,
        "spec": job.spec,
        # The user's own labels (the spec's `tags`; a spec stored before them has none).
        "tags": list((job.spec or {}).get("tags") or []),
        "error": job.error,
        # Why it failed (tunedeck.jobs.failure_kinds) and the rank that failed first, when known.
        "failure_kind": job.failure_kind,
        "failed_rank": job.failed_rank,
        "cancel_requested": job.cancel_requested,
        "archived": job.archived,
        "attempts": job.attempts,
        "worker_host": job.worker_host,
        # The worker that runs (or last ran) it, and the GPUs it holds there.
        "worker_name": job.worker_name,
        "gpu_indices": job.gpu_indices,
        # The pid of node 0's launcher (torchrun) on its worker's host, while it may live.
        "launcher_pid": job.launcher_pid,
        # Its Slurm job, where a Slurm executor runs it.
        "slurm_job_id": job.slurm_job_id,
        "created_at": _iso(job.created_at),
        # Its first start (a resume keeps it), and its latest claim by a worker.
        "started_at": _iso(job.started_at),
        "claimed_at": _iso(job.claimed_at),
        "finished_at": _iso(job.finished_at),
        "updated_at": _iso(job.updated_at),
    }


def job_lineage(job: Job, *, database, principal) -> list[dict[str, Any]]:
    """The jobs whose weights `job` started from, oldest first, then `job` itself: SFT, then
    DPO, then GRPO. An ancestor the principal may not see ends the list there."""
    from tunedeck.jobs.lineage import find_job, lineage

    with database.transaction() as session:
        chain = lineage(session, find_job(session, job.id) or job)
        visible = []
        for ancestor in reversed(chain):
            if ancestor.id != job.id and not principal.may_see_job_of(ancestor.owner):
                break
            spec = ancestor.spec_model
            visible.insert(0, {"id": ancestor.id, "name": ancestor.name,
                               "objective": spec.objective, "method": spec.method,
                               "status": ancestor.status})
    return visible


def latest_step_figures(step_row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job row's `latest` in a listing: its newest step, loss and tokens/s."""
    if not step_row:
        return None
    return {field: step_row.get(field) for field in ("step", "loss", "tokens_per_second")}


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def job_artifacts(job: Job) -> dict[str, dict]:
    """{kind: {dtype, bytes, files}} of each download the job's run folder holds (merged,
    adapter); empty before the export."""
    run = job_run_folder(job)
    if run is None:
        return {}
    summaries = {kind: artifact_summary(run, kind) for kind in ARTIFACT_KINDS}
    return {kind: summary for kind, summary in summaries.items() if summary is not None}


def job_run_folder(job: Job) -> RunFolder | None:
    return RunFolder(Path(job.run_dir)) if job.run_dir else None


def job_config(job: Job) -> dict[str, Any]:
    """What ran (from the run folder) once launched; what would run (generated) before.
    A job a Slurm executor submitted has `sbatch_script` too."""
    spec = job.spec_model
    run = job_run_folder(job)
    if run is not None and run.launch_file.is_file():
        launch = read_json(run.launch_file)
        config_file = run.backend_config_file(spec.backend)
        config = read_json(config_file) if config_file.is_file() else backend_config(spec)
        shown = {"backend": spec.backend, "config": config, "trainer": trainer_settings(spec),
                 "argv": launch["argv"], "env": launch.get("env", {}), "source": "run folder"}
        script = run.path / SBATCH_SCRIPT_NAME
        if script.is_file():  # a Slurm executor's: the script sbatch was given
            shown["sbatch_script"] = script.read_text(encoding="utf-8", errors="replace")
        return shown
    argv = build_torchrun_argv(spec, run.path.as_posix() if run else "RUN_DIR")
    return {"backend": spec.backend, "config": backend_config(spec),
            "trainer": trainer_settings(spec), "argv": argv, "env": {}, "source": "generated"}


def job_log_file(job: Job) -> Path | None:
    """The job's torchrun log (node 0's), or None before it is written."""
    run = job_run_folder(job)
    return run.launcher_log_file if run is not None and run.launcher_log_file.is_file() else None


def read_job_log_tail(job: Job, lines: int) -> list[str]:
    return read_job_log_tail_and_size(job, lines)[0]


def read_job_log_tail_and_size(job: Job, lines: int) -> tuple[list[str], int]:
    """The log's last `lines`, and its size in bytes as far as they go (where a follower
    reads on from)."""
    log_file = job_log_file(job)
    if log_file is None:
        return [], 0
    with log_file.open("rb") as file:
        size = file.seek(0, 2)
        start = max(0, size - TAIL_BYTES)  # the tail is all we show; don't read GBs
        file.seek(start)
        text = file.read(size - start).decode("utf-8", errors="replace")
    return text.splitlines()[-lines:], size


TAIL_BYTES = 256 * 1024
LOG_CHUNK_BYTES = 1 << 20


def read_job_log_chunk(job: Job, offset: int, max_bytes: int = LOG_CHUNK_BYTES) -> dict[str, Any]:
    """The log's bytes after `offset` (GET /api/jobs/{id}/logs?offset=N): `text`,
    `next_offset`, and `complete` once the job has finished and nothing is left; `offset`
    is where `text` starts (0 when the log is shorter than asked: a relaunch rewrote it).
    While the job runs, a chunk ends at a line's end, so a follower never prints half a
    line."""
    # The status before the size: a job finished by then has written its last byte.
    finished = job.status in FINISHED_STATUSES
    log_file = job_log_file(job)
    if log_file is None:
        return {"offset": offset, "text": "", "next_offset": offset, "complete": finished}
    with log_file.open("rb") as file:
        size = file.seek(0, 2)
        start = offset if offset <= size else 0  # shorter than that: rewritten, from its start
        file.seek(start)
        data = file.read(min(size - start, max_bytes))
    last_chunk = finished and start + len(data) == size
    if not last_chunk:
        data = _whole_lines(data, full=len(data) == max_bytes)
    next_offset = start + len(data)
    return {"offset": start, "text": data.decode("utf-8", errors="replace"),
            "next_offset": next_offset, "complete": finished and next_offset == size}


def _whole_lines(data: bytes, *, full: bool) -> bytes:
    """`data` up to its last newline; a chunk with none that fills the limit (one very long
    line) up to its last whole UTF-8 character instead."""
    end = data.rfind(b"\n")
    if end >= 0:
        return data[:end + 1]
    if not full:
        return b""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.reason == "unexpected end of data":  # the limit cut a character
            return data[:error.start]
    return data
