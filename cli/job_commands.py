"""`tunedeck jobs`, `tunedeck status ID` and `tunedeck cancel ID`: the jobs table and a
job's page in a terminal, over a running server's HTTP API (`--json` prints its answer)."""
from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from cli.server_calls import get_from_server, post_to_server
from cli.text_table import text_table
from tunedeck.jobs.states import CANCELLED, FAILED, QUEUED, RUNNING, STATUSES
from tunedeck.metrics.eta import eta_seconds, format_duration

JOB_COLUMNS = ("ID", "NAME", "STATUS", "METHOD", "STEP", "LOSS", "UPDATED")
# The newest points are enough for the ETA's recent mean; the route keeps the last one.
STATUS_METRIC_POINTS = 200


def add_job_commands(commands, *, add_server_options) -> None:
    jobs = commands.add_parser("jobs", help="the jobs you may see, newest first: status, "
                               "step, loss")
    jobs.add_argument("--status", choices=STATUSES, default=None, help="only jobs in this status")
    jobs.add_argument("--owner", default=None, help="only this user's jobs (an admin's filter)")
    jobs.add_argument("--archived", action="store_true", help="the archived jobs instead")
    jobs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    _add_json_option(jobs, "GET /api/jobs")
    add_server_options(jobs)
    jobs.set_defaults(handler=_run_jobs)

    status = commands.add_parser("status", help="one job: its spec, status, step, loss, ETA, "
                                 "error and downloads")
    status.add_argument("job_id", type=int)
    _add_json_option(status, "GET /api/jobs/{id}, with its newest step as `latest`")
    add_server_options(status)
    status.set_defaults(handler=_run_status)

    cancel = commands.add_parser("cancel", help="stop a queued or running job")
    cancel.add_argument("job_id", type=int)
    _add_json_option(cancel, "POST /api/jobs/{id}/cancel")
    add_server_options(cancel)
    cancel.set_defaults(handler=_run_cancel)


def _add_json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print the JSON of {what}")


def jobs_table(rows: list[dict[str, Any]]) -> str:
    """The listing as `tunedeck jobs` prints it: a job a line."""
    if not rows:
        return "no jobs"
    return text_table(JOB_COLUMNS, [_job_cells(row) for row in rows],
                      right_aligned=("ID", "STEP", "LOSS"))


def _job_cells(row: dict[str, Any]) -> list[str]:
    spec = row.get("spec") or {}
    latest = row.get("latest") or {}
    return [str(row["id"]), row.get("name") or "", row["status"],
            f"{_training_words(spec)}/{spec.get('backend', '?')}",
            step_text(latest.get("step"), spec.get("max_steps")),
            f"{latest['loss']:.4f}" if latest.get("loss") is not None else "-",
            short_time(row.get("updated_at"))]


def _training_words(spec: dict[str, Any]) -> str:
    """"lora", or "dpo lora": the API's spec, read as JobSpec.training_words reads it."""
    objective, method = spec.get("objective") or "sft", spec.get("method", "?")
    return method if objective == "sft" else f"{objective} {method}"


def step_text(step: int | None, max_steps: int | None) -> str:
    if step is None:
        return f"- / {max_steps:,}" if max_steps else "-"
    return f"{step:,} / {max_steps:,}" if max_steps else f"{step:,}"


def short_time(iso: str | None) -> str:
    """"2026-12-03 06:41:51" of an ISO time, in the zone the server wrote it in."""
    if not iso:
        return "-"
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def status_text(job: dict[str, Any], train: list[dict[str, Any]]) -> str:
    """A job as `tunedeck status` prints it: what it trains, where it is, what went wrong,
    what it left to download."""
    spec = job.get("spec") or {}
    lines = [f"job {job['id']}  {job.get('name') or ''}  {job['status']}".rstrip()]

    def field(label: str, value: str) -> None:
        lines.append(f"  {label:<10}{value}")

    if spec.get("tags"):
        field("tags", " ".join(f"#{tag}" for tag in spec["tags"]))
    field("model", f"{spec.get('model')} · dataset {spec.get('dataset')}")
    field("training", f"{_training_words(spec)} · {spec.get('backend')} · "
          f"{ranks_text(job, spec)} · {spec.get('precision')}")
    field("progress", _progress_text(job, spec, train))
    for label, key in (("created", "created_at"), ("started", "started_at"),
                       ("finished", "finished_at")):
        if job.get(key):
            field(label, short_time(job[key]))
    if job.get("worker_host"):
        field("worker", job.get("worker_name") or job["worker_host"])
    if job.get("error"):
        kind = f" ({job['failure_kind']})" if job.get("failure_kind") else ""
        field("error", f"{job['error']}{kind}")
    field("downloads", _artifacts_text(job["status"], job.get("artifacts") or {}))
    return "\n".join(lines)


def _progress_text(job: dict[str, Any], spec: dict[str, Any], train: list[dict[str, Any]]) -> str:
    max_steps = spec.get("max_steps")
    if not train:
        return f"step {step_text(None, max_steps)}"
    return " · ".join(latest_step_words(job, train, max_steps))


def latest_step_words(job: dict[str, Any], train: list[dict[str, Any]],
                      max_steps: int | None) -> list[str]:
    """The newest step of `train` (not empty) as `status` and `watch` say it: step of the
    total, loss, tokens/s, and while the job runs the page's ETA."""
    latest = train[-1]
    words = [f"step {step_text(latest['step'], max_steps)}"]
    if latest.get("loss") is not None:
        words.append(f"loss {latest['loss']:.4f}")
    if latest.get("tokens_per_second") is not None:
        words.append(f"{latest['tokens_per_second']:,.0f} tokens/s")
    eta = eta_seconds(train, max_steps) if job["status"] == "running" else None
    if eta is not None:
        words.append(f"ETA {format_duration(eta)}")
    return words


def ranks_text(job: dict[str, Any], spec: dict[str, Any]) -> str:
    """"2 GPUs x 1 node"; "2 CPU ranks x 1 node" once a worker without GPUs took the job
    (it claimed no GPU for it: `gpu_indices` is empty, not unknown)."""
    on_cpu = job.get("worker_host") is not None and job.get("gpu_indices") == []
    return (f"{_counted(spec.get('num_gpus'), 'CPU rank' if on_cpu else 'GPU')} x "
            f"{_counted(spec.get('num_nodes', 1), 'node')}")


def _counted(count: int | None, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _artifacts_text(status: str, artifacts: dict[str, dict[str, Any]]) -> str:
    if not artifacts:
        # A failed or cancelled job exports nothing (a resume that succeeds does).
        return {QUEUED: "none yet", RUNNING: "none yet", FAILED: "none: the job failed",
                CANCELLED: "none: the job was cancelled"}.get(status, "none")
    return " · ".join(f"{kind} ({summary.get('dtype') or '?'}, "
                      f"{(summary.get('bytes') or 0) / 1e6:,.1f} MB, {summary.get('files')} files)"
                      for kind, summary in sorted(artifacts.items()))


def _run_jobs(arguments: argparse.Namespace) -> int:
    params = {"limit": arguments.limit, "status": arguments.status, "owner": arguments.owner,
              "archived": str(arguments.archived).lower()}
    rows = get_from_server(arguments, "/api/jobs", refusal="cannot list jobs",
                           params={key: value for key, value in params.items() if value is not None})
    print(json.dumps(rows, indent=2) if arguments.json else jobs_table(rows))
    return 0


def _run_status(arguments: argparse.Namespace) -> int:
    job_id = arguments.job_id
    refusal = f"cannot show job {job_id}"
    job = get_from_server(arguments, f"/api/jobs/{job_id}", refusal=refusal)
    train = get_from_server(arguments, f"/api/jobs/{job_id}/metrics", refusal=refusal,
                            params={"max_points": STATUS_METRIC_POINTS})["train"]
    if arguments.json:
        latest = train[-1] if train else None
        eta = eta_seconds(train, (job.get("spec") or {}).get("max_steps")) \
            if job["status"] == "running" else None
        print(json.dumps({**job, "latest": latest, "eta_seconds": eta}, indent=2))
    else:
        print(status_text(job, train))
    return 0


def _run_cancel(arguments: argparse.Namespace) -> int:
    job = post_to_server(arguments, f"/api/jobs/{arguments.job_id}/cancel", None,
                         expected_status=202, refusal=f"job {arguments.job_id} not cancelled")
    if arguments.json:
        print(json.dumps(job, indent=2))
    elif job["status"] == "cancelled":
        print(f"job {job['id']} cancelled")
    else:
        print(f"job {job['id']} {job['status']}: asked to stop")
    return 0
