"""A schema fuzzer over the whole REST API: every operation of the OpenAPI document, with
data that fits the schema and data that breaks it, must never answer 5xx nor raise.

The app runs in-process over SQLite (and, where marked, PostgreSQL) and the server-less
broker under a temporary home (no worker runs, so submitted jobs stay queued: no GPU, no
torchrun). The number of cases run is printed (pytest -s) and held to a floor. A few
jobs are seeded first so the fuzzed ids 1, 2, 3 reach real rows: one queued, one running
with a run folder (log, checkpoint, merged model, adapter), one failed, so the log,
artifact, checkpoint, resume and retry routes read and write files, never only 404.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from app.views.artifacts import ARTIFACT_KINDS
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.jobs.failure_kinds import OUT_OF_MEMORY
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder

# Per operation, generation mode and pinned path: about 1,500 requests, some 40 s a
# database on the 2-core CI machine, and enough to reach every validator.
MAX_EXAMPLES = 30
# A floor below which the run would not have exercised the API (hypothesis stops early
# only on tiny input spaces such as /healthz's).
MIN_CASES = 1000

SPEC = {"name": "fuzz-seed", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
        "method": "lora", "backend": "fsdp", "num_gpus": 1, "max_steps": 5}


@dataclass
class FuzzRun:
    cases: int = 0
    operations: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


# A fresh database numbers them 1, 2, 3; _seed_jobs checks it.
SEEDED_JOB_IDS = [1, 2, 3]


def _seed_jobs(app: FastAPI, home: Path) -> None:
    """Job 1 queued; job 2 running from a run folder under `home`; job 3 failed."""
    database = app.state.database
    with database.transaction() as session:
        ids = [job_store.create_job(session=session, spec=JobSpec.model_validate(SPEC)).id
               for _ in SEEDED_JOB_IDS]
    assert ids == SEEDED_JOB_IDS
    run = RunFolder(home / "runs" / f"job-{ids[1]}")
    run.launcher_log_file.parent.mkdir(parents=True, exist_ok=True)
    run.launcher_log_file.write_text("step 1 loss 2.0\nstep 2 loss 1.5\n")
    for folder in (run.merged_dir, run.adapter_dir, run.checkpoint_dir(2)):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "weights.bin").write_bytes(b"\0" * 64)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=ids[1], run_dir=str(run.path),
                                   worker_host="fuzz-host")
        job_store.mark_job_running(session=session, job_id=ids[2],
                                   run_dir=str(home / "runs" / f"job-{ids[2]}"),
                                   worker_host="fuzz-host")
        job_store.mark_job_failed(session=session, job_id=ids[2], error="CUDA out of memory",
                                 failure_kind=OUT_OF_MEMORY)


@pytest.fixture
def fuzzed_app(hostile_app: FastAPI) -> FastAPI:
    """tests/security/conftest.py's app (SQLite, or PostgreSQL where marked), seeded."""
    _seed_jobs(hostile_app, hostile_app.state.settings.home_dir)
    # The LoRA target resolver's first answer waits for its imports (torch, transformers:
    # seconds on a busy machine, past the fuzz client's 10 s); every later one takes
    # milliseconds. Paid here, so each fuzzed request is timed as a warm web answers it.
    from app.actions.lora_preview import lora_targets_preview

    lora_targets_preview(JobSpec.model_validate(SPEC), home=hostile_app.state.settings.home_dir)
    return hostile_app


def _fixed_path_parameters(operation, job_ids: list[int]) -> list[dict[str, object] | None]:
    """Fuzzing alone almost never hits a seeded row or a real artifact kind, so each
    operation also runs with its path pinned to every seeded job (and artifact kind)."""
    names = {parameter.name for parameter in operation.path_parameters}
    pinned: list[dict[str, object] | None] = [None]
    if "job_id" in names:
        kinds = ARTIFACT_KINDS if "kind" in names else (None,)
        pinned += [{"job_id": job_id, **({"kind": kind} if kind else {})}
                   for job_id in job_ids for kind in kinds]
    return pinned


def _fuzz_operation(operation, mode: GenerationMode, path: dict[str, object] | None,
                    run: FuzzRun) -> None:
    @settings(max_examples=MAX_EXAMPLES, derandomize=True, database=None, deadline=None,
              # Shrinking a failure is worth it (the report shows the minimal request);
              # "explain" re-runs every failing case line by line and only costs time.
              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path))
    def fuzz(case) -> None:
        run.cases += 1
        case.call_and_validate(checks=[not_a_server_error])

    fuzz()


def _free_inputs(operation, path: dict[str, object] | None) -> int:
    """How many inputs are left for the negative mode to break."""
    return (len(operation.path_parameters) - len(path or {}) + len(operation.query)
            + len(operation.body))


def test_no_operation_answers_5xx_or_crashes(fuzzed_app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app)
    run = FuzzRun()
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        run.operations.append(operation.label)
        for path in _fixed_path_parameters(operation, SEEDED_JOB_IDS):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                if mode is GenerationMode.NEGATIVE and _free_inputs(operation, path) == 0:
                    continue  # nothing to break (e.g. /healthz): hypothesis finds no case
                try:
                    _fuzz_operation(operation, mode, path, run)
                except Exception as error:  # noqa: BLE001 - every failure is collected and reported
                    run.failures.append(f"{operation.label} {path or ''} [{mode.value}]: {error}")
    seconds = time.monotonic() - started
    print(f"\nfuzzed {run.cases} cases over {len(run.operations)} operations in {seconds:.1f} s")
    assert not run.failures, "\n\n".join(run.failures)
    # Every route of app/api/jobs.py is in the document (a route missing from it is not fuzzed).
    assert len(run.operations) >= 17, run.operations
    assert run.cases >= MIN_CASES
    # The fuzzer reached files only through job rows, and those all live under the home.
    home = fuzzed_app.state.settings.home_dir
    with fuzzed_app.state.database.transaction() as session:
        run_dirs = [job.run_dir for job in job_queries.list_jobs(session=session, limit=100_000)
                    if job.run_dir]
    assert run_dirs and all(Path(run_dir).is_relative_to(home) for run_dir in run_dirs)
