"""A worker answering "Try it" requests for the jobs it ran: claim the stored request, find
the weights in the job's run folder, pick a device (a GPU no running job of this worker
holds, else the CPU), and ask the generation process (trainer/generation.py), which this
module keeps alive, model loaded, for TUNEDECK_GENERATION_WARM_SECONDS after its last
request. The worker process itself never loads a model.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from tunedeck.jobs import queries as job_queries
from tunedeck.cluster.placement import free_gpus
from tunedeck.db.engine import Database
from tunedeck.generation.request import GenerationRequest
from tunedeck.generation.store import GENERATIONS
from tunedeck.generation.weights import missing_weights, variant_weights
from tunedeck.jobs.lineage import parent_weights
from tunedeck.jobs.states import SUCCEEDED
from tunedeck.services.line_server import LineServer, LineServerError, installed_module
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from tunedeck.worker_requests.states import DONE, FAILED
from worker.worker_identity import WorkerIdentity

log = logging.getLogger(__name__)
# Loading a big model from disk (or the hub cache) and generating 1024 tokens on a CPU.
GENERATION_TIMEOUT_SECONDS = 900
WAITING_FOR_A_GPU = "waiting for a GPU"


class WarmGenerator:
    """The generation process of one device choice, stopped once idle `warm_seconds` (its
    model with it). A question for another device stops the current one first: a process
    sees only the GPUs its CUDA_VISIBLE_DEVICES names."""

    def __init__(self, *, settings: Settings):
        self._settings = settings
        self._lock = threading.Lock()
        self._server: LineServer | None = None
        self._visible_devices: str | None = None
        self._last_used = 0.0
        self._idle_timer: threading.Timer | None = None
        self._released_mid_answer = False

    def ask(self, request: dict, *, visible_devices: str) -> dict:
        """The generation process's answer; LineServerError when it gave none (it died,
        timed out, or a job claimed its GPU mid-answer: `release_gpus`)."""
        with self._lock:
            if self._server is None or visible_devices != self._visible_devices:
                self._stop_server()
                self._server = self._new_server(visible_devices)
                self._visible_devices = visible_devices
            try:
                return self._server.ask(request)
            except LineServerError as error:
                if self._released_mid_answer:
                    raise LineServerError("a training job claimed its GPU while it answered; "
                                          "ask again") from error
                raise
            finally:
                self._released_mid_answer = False
                self._last_used = time.monotonic()
                self._arm_idle_timer()

    def stop(self) -> None:
        with self._lock:
            self._stop_server()

    def release_gpus(self, cuda_ids: str | None = None) -> None:
        """Stop the generation process at once if it holds one of `cuda_ids` (a job's
        CUDA_VISIBLE_DEVICES; None: any GPU), even in the middle of an answer: a job just
        claimed that GPU, and a job's GPUs are its own (it never waits for a prompt)."""
        server = self._server
        if server is None or not self._holds_any(cuda_ids):
            return  # on the CPU, or on other GPUs
        self._released_mid_answer = self._lock.locked()
        server.stop()  # the process only: a later question starts a fresh one

    def _holds_any(self, cuda_ids: str | None) -> bool:
        held = set(filter(None, (self._visible_devices or "").split(",")))
        return bool(held) and (cuda_ids is None or bool(held & set(cuda_ids.split(","))))

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._server is not None else None

    def _new_server(self, visible_devices: str) -> LineServer:
        environment = {**os.environ, "TUNEDECK_HOME": str(self._settings.home_dir),
                       "CUDA_VISIBLE_DEVICES": visible_devices}
        return LineServer(installed_module("trainer.generation", "--serve"),
                          env=environment, timeout_seconds=GENERATION_TIMEOUT_SECONDS)

    def _arm_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = threading.Timer(self._settings.generation_warm_seconds,
                                           self._stop_if_idle)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _stop_if_idle(self) -> None:
        with self._lock:
            # A question since this timer was armed re-armed a later one.
            if time.monotonic() - self._last_used >= self._settings.generation_warm_seconds:
                self._stop_server()

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        self._visible_devices = None


def run_generation(generation_id: int, *, settings: Settings, database: Database,
                   identity: WorkerIdentity, generator: WarmGenerator) -> str:
    """The row's new status: done or failed; "not pending" when another delivery has it;
    "waiting for a GPU" when every GPU of this worker trains a job (the row stays pending,
    and is sent again when a job here ends: tasks.py, `offer_waiting_work`)."""
    with database.transaction() as session:
        if _device(session, identity) is None:
            return WAITING_FOR_A_GPU
        claimed = GENERATIONS.claim(session=session, request_id=generation_id,
                                    worker_name=identity.name)
        if claimed is None:
            return "not pending"
        job_id, stored_request = claimed.job_id, claimed.request
    try:
        question, visible_devices = _question(database, identity, job_id, stored_request,
                                              settings=settings)
        answer = generator.ask(question, visible_devices=visible_devices)
    except CannotAnswer as refusal:
        return _fail(database, generation_id, str(refusal))
    except LineServerError as error:
        return _fail(database, generation_id, f"the generation process gave no answer ({error})")
    except Exception as error:  # noqa: BLE001 - the row must not stay running; the log has it
        log.exception("generation %s failed", generation_id)
        return _fail(database, generation_id, f"generation failed on worker {identity.name}: "
                                              f"{type(error).__name__}: {error}")
    if "error" in answer:
        return _fail(database, generation_id, answer["error"])
    with database.transaction() as session:
        GENERATIONS.finish(session=session, request_id=generation_id, result=answer)
    return DONE


class CannotAnswer(Exception):
    """The job cannot answer here (not succeeded, or its weights are not in its run folder)."""


def _question(database: Database, identity: WorkerIdentity, job_id: int,
              stored_request: dict, *, settings: Settings) -> tuple[dict, str]:
    """(what to ask the generation process, its CUDA_VISIBLE_DEVICES), read from the job row
    and its run folder; CannotAnswer naming why not. A job that started from another job's
    weights (`model: job:ID`) has those weights as its base."""
    request = GenerationRequest.model_validate(stored_request)
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
        status, spec, run_dir = job.status, job.spec_model, job.run_dir
        parent_folder, _problem = parent_weights(session, spec.model,
                                                 runs_dir_for=settings.run_dir_for)
        if parent_folder is not None:
            spec = spec.model_copy(update={"model": str(parent_folder)})
        visible_devices, device = _device(session, identity) or ("", "cpu")
    if status != SUCCEEDED or not run_dir:
        raise CannotAnswer(f"job {job_id} is {status}: only a succeeded job's model answers")
    run = RunFolder(Path(run_dir))
    if problem := missing_weights(spec, run, request.variant, job_id=job_id):
        raise CannotAnswer(problem)
    weights = variant_weights(spec, run, request.variant)
    question = {**request.model_dump(mode="json"), "model_source": weights.model_source,
                "adapter_dir": weights.adapter_dir, "device": device,
                "trust_remote_code": spec.trust_remote_code}
    return question, visible_devices


def _device(session, identity: WorkerIdentity) -> tuple[str, str] | None:
    """(CUDA_VISIBLE_DEVICES, torch device) for the generation process: the first of this
    worker's GPUs that no running job holds, or the CPU on a host without GPUs; None when
    jobs hold every GPU (a prompt never takes a training job's GPU, and a big model on the
    CPU beside a GPU job would starve its data loading)."""
    held = job_queries.worker_load(session=session, worker_name=identity.name)
    free = free_gpus(identity.view, held)
    if free is None:
        return "", "cpu"
    if free:
        return identity.cuda_visible_devices([free[0]]), "cuda"
    return None


def _fail(database: Database, generation_id: int, error: str) -> str:
    with database.transaction() as session:
        GENERATIONS.fail(session=session, request_id=generation_id, error=error)
    return FAILED
