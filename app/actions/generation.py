""""Try it": one policy for `POST /api/jobs/{id}/generate`, `GET /api/generations/{id}` and
the job page's panel. Who may ask (whoever may see the job), what may be asked (a
succeeded job whose weights are there, no more new tokens than the cap), storing the
request and sending it to the worker that ran the job (its run folder has the weights),
waiting a while for the answer, and reading it back for its owner (or an admin) only.
Sending, waiting and reading back are every worker request's
(app/actions/worker_requests.py).
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from app.actions.errors import Conflict, Invalid
from app.actions.job_lookup import find_visible_job
from app.actions.worker_requests import (NO_WORKER, RequestAnswer, await_request,
                                         send_or_fail)
from app.auth.job_access import owner_for_new_job
from app.auth.principal import Principal
from tunedeck.jobs import queries as job_queries
from tunedeck.accounts import audit
from tunedeck.services.broker import send_generation
from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.placement import free_gpus
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.db.request_rows import JobGeneration
from tunedeck.generation.request import GenerationRequest
from tunedeck.generation.store import GENERATIONS, generation_to_dict
from tunedeck.generation.weights import missing_weights
from tunedeck.jobs.states import SUCCEEDED
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from tunedeck.worker_requests.states import PENDING

POLL_SECONDS = 0.1


class JobCannotGenerate(Conflict):
    """The job is not in a state to answer: not succeeded, or its weights are gone."""


def start_generation(*, database: Database, celery_app, settings: Settings,
                     principal: Principal, job_id: int, request: GenerationRequest,
                     client: str | None = None) -> int:
    """The new generation's id, its request stored, audited and sent to the job's worker;
    NotFound for a job the principal may not see, Invalid (naming max_new_tokens) past the
    cap, JobCannotGenerate for a job that did not succeed or whose weights are gone."""
    if request.max_new_tokens > settings.generation_max_new_tokens:
        cap = settings.generation_max_new_tokens
        raise Invalid([(("max_new_tokens",), f"max_new_tokens {request.max_new_tokens}: at most "
                        f"{cap} (TUNEDECK_GENERATION_MAX_NEW_TOKENS)")])
    with database.transaction() as session:
        job = find_visible_job(session=session, principal=principal, job_id=job_id)
        _check_can_generate(job, request, settings)
        generation = GENERATIONS.create(session=session, request=request,
                                        owner=owner_for_new_job(principal), job_id=job_id,
                                        worker_name=job.worker_name)
        audit.record(session=session, actor=principal.name, action=audit.GENERATE, job_id=job_id,
                     detail=f"generation {generation.id}: {request.variant}", client=client)
        generation_id, worker_name = generation.id, job.worker_name
    send_or_fail(database=database, store=GENERATIONS, request_id=generation_id,
                 send=lambda: send_generation(celery_app, generation_id, worker_name))
    return generation_id


def _check_can_generate(job: Job, request: GenerationRequest, settings: Settings) -> None:
    if job.status != SUCCEEDED:
        raise JobCannotGenerate(f"job {job.id} is {job.status}: only a succeeded job's model "
                                "answers prompts")
    if not job.run_dir or not job.worker_name:
        raise JobCannotGenerate(f"job {job.id} has no run folder: it left no weights")
    run = RunFolder(Path(job.run_dir))
    # The web sees the run folder in one-host mode (and with a shared filesystem); where it
    # does not, the job's worker checks the same thing before it loads anything.
    if run.path.is_dir() or _runs_root_is_here(run, settings):
        if problem := missing_weights(job.spec_model, run, request.variant, job_id=job.id):
            raise JobCannotGenerate(problem)


def _runs_root_is_here(run: RunFolder, settings: Settings) -> bool:
    """The job's run folder belongs under this host's runs root (which exists): a missing
    folder there was deleted, not kept on another host."""
    return settings.runs_dir.is_dir() and run.path.parent.resolve() == settings.runs_dir.resolve()


def await_generation(*, database: Database, settings: Settings, principal: Principal,
                     generation_id: int, wait_seconds: float | None = None) -> RequestAnswer:
    """The generation once finished, or after `wait_seconds` (default the setting; at once
    when the job's worker is not live); NotFound for one missing or not the principal's."""
    if wait_seconds is None:
        wait_seconds = settings.generation_wait_seconds
    return await_request(database=database, store=GENERATIONS, principal=principal,
                         request_id=generation_id, wait_seconds=wait_seconds,
                         poll_seconds=POLL_SECONDS, to_dict=generation_to_dict,
                         waiting_reason=lambda session, generation: _waiting_reason(
                             session, generation, settings))


def _waiting_reason(session: Session, generation: JobGeneration, settings: Settings) -> str:
    worker_name = generation.worker_name
    live = {worker.name: worker for worker in worker_registry.live_worker_views(
        session=session, silent_seconds=settings.worker_lost_seconds)}
    worker = live.get(worker_name)
    if worker is None:
        return (f"{NO_WORKER}: worker {worker_name}, which ran job {generation.job_id} and "
                "holds its weights, is not running; the answer comes once it starts")
    if generation.status != PENDING:
        return f"generating on worker {worker_name}"
    training = [job.id for job in job_queries.list_running_jobs_of_worker(
        session=session, worker_name=worker_name)]
    if not training:
        return f"queued on worker {worker_name}"
    jobs = ", ".join(str(job_id) for job_id in training)
    if free_gpus(worker, job_queries.worker_load(session=session, worker_name=worker_name)) == []:
        return (f"queued: worker {worker_name} is busy training job {jobs} on all its GPUs; "
                "the prompt runs once one is free")
    return (f"queued: worker {worker_name} is busy training job {jobs}; the prompt runs on "
            "its spare thread, never on the job's GPUs")
