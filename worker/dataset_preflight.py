"""A worker running a data preflight: claim the stored request, check its paths against
this host's roots (as a job's inputs are checked), compute the report where the data can
be read (trainer/data/dataset_preflight.py), and store it, or the error, in the row."""
from __future__ import annotations

import functools
import logging
import os

from pydantic import ValidationError

from tunedeck.data.input_paths import spec_path_problems
from tunedeck.data.preflight_request import PreflightRequest
from tunedeck.data.preflight_store import PREFLIGHTS
from tunedeck.db.engine import Database
from tunedeck.spec.text import format_validation_error
from tunedeck.services.line_server import LineServer, LineServerError, installed_module
from tunedeck.settings import Settings
from tunedeck.worker_requests.states import DONE, FAILED
from worker.input_check import _model_problem, worker_input_roots

log = logging.getLogger(__name__)
# A preflight reads the whole dataset (and may download it first): beyond this it is ended.
PREFLIGHT_TIMEOUT_SECONDS = 600
# Its process may use half the host's memory, and never less than this (torch's imports
# alone reserve a few GB of address space).
MIN_PREFLIGHT_MEMORY_BYTES = 6 * 2**30


def run_dataset_preflight(preflight_id: int, *, settings: Settings, database: Database,
                          worker_name: str) -> str:
    """The row's new status: done or failed; "not pending" when another delivery (or
    worker) has it already."""
    with database.transaction() as session:
        claimed = PREFLIGHTS.claim(session=session, request_id=preflight_id,
                                   worker_name=worker_name)
    if claimed is None:
        return "not pending"
    try:
        report = _report(claimed.request, owner=claimed.owner, settings=settings)
    except (OSError, ValueError) as error:
        return _fail(database, preflight_id, _message(error))
    except Exception as error:  # noqa: BLE001 - the row must not stay running; the log has it
        log.exception("preflight %s failed", preflight_id)
        return _fail(database, preflight_id, f"the preflight failed on worker {worker_name}: "
                                             f"{type(error).__name__}: {error}")
    with database.transaction() as session:
        PREFLIGHTS.finish(session=session, request_id=preflight_id, result=report)
    return DONE


def _report(request: dict, *, owner: str | None, settings: Settings) -> dict:
    spec = PreflightRequest.model_validate(request).to_spec()
    # A job's own rules: the paths first (nothing outside the roots is opened), then the
    # model folder, said as the job's input check says it.
    problems = [message for _field, message in
                spec_path_problems(spec, worker_input_roots(settings, owner))]
    if problems:
        raise ValueError("\n".join(problems))
    if model_problem := _model_problem(spec.model):
        raise ValueError(model_problem)
    try:
        answer = preflight_server(settings).ask(
            {"spec": spec.model_dump(mode="json"), "cache_dir": str(settings.datasets_cache_dir)})
    except LineServerError as error:
        raise RuntimeError(f"the preflight process gave no report ({error}); a dataset this "
                           "large is better checked on a sample file") from None
    if "error" in answer:
        raise ValueError(answer["error"])
    return answer


@functools.lru_cache(maxsize=4)
def preflight_server(settings: Settings) -> LineServer:
    """`python -m trainer.data.dataset_preflight --serve`, kept for the worker's life (only the
    first preflight pays torch's and transformers' imports), with a memory cap and a
    deadline: reading a user's dataset must never take the worker down with its jobs."""
    import psutil

    memory_limit = max(MIN_PREFLIGHT_MEMORY_BYTES, psutil.virtual_memory().total // 2)
    return LineServer(installed_module("trainer.data.dataset_preflight", "--serve"),
                      env={**os.environ, "TUNEDECK_HOME": str(settings.home_dir)},
                      timeout_seconds=PREFLIGHT_TIMEOUT_SECONDS, memory_limit_bytes=memory_limit)


def _message(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return format_validation_error(error)
    return str(error)


def _fail(database: Database, preflight_id: int, error: str) -> str:
    with database.transaction() as session:
        PREFLIGHTS.fail(session=session, request_id=preflight_id, error=error)
    return FAILED
