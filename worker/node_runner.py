"""Running node K > 0 of a job on several nodes, on the worker node 0 gave it to.

Node 0's worker owns the job row: it claimed it, and it records how the job ended. This
worker only starts its node (once: `job_store.start_node`), supervises that node's ranks
(storing their lines, obeying cancel, stopping when the job is no longer running) and
records how the node ended. A node whose inputs are missing on this host fails the job at
once, naming the node, so node 0 does not wait for it in vain.
"""
from __future__ import annotations

from dataclasses import replace

import logging
from typing import Callable

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database
from tunedeck.jobs.failure_kinds import ERROR
from tunedeck.jobs.states import InvalidTransition
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from worker.failure_triage import FailureEvidence, classify_failure
from worker.input_check import find_input_problems, trainer_inputs, worker_input_roots
from worker.launch import NodeLaunch, launch_node, never
from worker.outcome import Outcome
from worker.worker_identity import WorkerIdentity

log = logging.getLogger(__name__)


def run_job_node(job_id: int, node_rank: int, *, settings: Settings, database: Database,
                 identity: WorkerIdentity,
                 shutdown_requested: Callable[[], bool] = never) -> Outcome:
    """Run this worker's node of the job to its end; returns what became of the node."""
    started = _start_node(job_id, node_rank, identity=identity, settings=settings,
                          database=database)
    if started is None:
        log.info("not starting node %s of job %s: not running, or not ours", node_rank, job_id)
        return Outcome.NOT_STARTED
    launch, owner = started
    inputs = trainer_inputs(launch.spec, database=database, settings=settings)
    launch = replace(launch, spec=inputs.spec)
    problems = [inputs.problem] if inputs.problem else find_input_problems(
        launch.spec, allowed_roots=(*worker_input_roots(settings, owner), *inputs.extra_roots),
        datasets_cache=settings.datasets_cache_dir)
    if problems:
        kind = classify_failure(FailureEvidence(input_problems=tuple(problems))).kind
        return _fail_job(job_id, node_rank, identity, "; ".join(problems), kind,
                         database=database)
    try:
        returncode, supervision = launch_node(launch, settings=settings, database=database,
                                              shutdown_requested=shutdown_requested)
    except OSError as error:
        return _fail_job(job_id, node_rank, identity, f"could not start torchrun: {error}", ERROR,
                         database=database)
    # A node this worker stopped because the job had ended (node 0 finished first, or the
    # job was cancelled or failed) exits by our signal: that is no error of the node's.
    stopped_by_us = supervision.taken_away or supervision.cancelled
    with database.transaction() as session:
        job_store.finish_node(session=session, job_id=job_id, node_rank=node_rank,
                              exit_code=returncode)
        if returncode not in (0, None) and not stopped_by_us:
            job_store.add_job_event(
                session=session, job_id=job_id, kind="error",
                message=f"node {node_rank} on worker {identity.name} ({identity.host}): torchrun "
                        f"exited with code {returncode}; its log is "
                        f"{launch.run.node_launcher_log_file(node_rank)} on that host")
    if returncode != 0:
        log.info("node %s of job %s: torchrun exited with code %s", node_rank, job_id, returncode)
    return Outcome.EXITED


def _start_node(job_id: int, node_rank: int, *, identity: WorkerIdentity, settings: Settings,
                database: Database) -> tuple[NodeLaunch, str | None] | None:
    """Mark the node started (once) and read what it launches, with the job's owner; None
    when the job no longer runs or the node is not this worker's."""
    with database.transaction() as session:
        if not job_store.start_node(session=session, job_id=job_id, node_rank=node_rank,
                                    worker_name=identity.name):
            return None
        job = job_queries.get_job(session=session, job_id=job_id)
        node = next(node for node in job_queries.list_job_nodes(session=session, job_id=job_id)
                    if node.node_rank == node_rank)
        launch = NodeLaunch(job_id=job_id, spec=job.spec_model,
                            run=RunFolder(settings.run_dir_for(job_id)),
                            resume=job.resume_requested, node_rank=node_rank,
                            rendezvous=job.rendezvous,
                            visible_devices=identity.cuda_visible_devices(node.gpu_indices))
        return launch, job.owner


def _fail_job(job_id: int, node_rank: int, identity: WorkerIdentity, why: str, kind: str, *,
              database: Database) -> Outcome:
    error = f"node {node_rank} on worker {identity.name} ({identity.host}): {why}"
    with database.transaction() as session:
        job_store.finish_node(session=session, job_id=job_id, node_rank=node_rank, exit_code=None)
        try:
            job_store.mark_job_failed(session=session, job_id=job_id, error=error,
                                      failure_kind=kind)
        except InvalidTransition:
            pass  # the job already ended
    return Outcome.FAILED
