"""Running a job through Slurm: submit it (worker/slurm/submission.py checks its inputs and
writes its run folder and sbatch script on the shared filesystem), and follow it (queued
with Slurm's reason while pending, running from Slurm's start, metrics from the ranks'
files as a local worker stores them) until Slurm says it ended; then judge it from its run
folder as a local job is judged.

An executor that stops (killed, restarted) leaves its Slurm jobs running: the next one to
start follows them again from the rows (`jobs_to_follow_again`). Cancel is `scancel`, and
the row is cancelled only once Slurm says the job ended.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database
from tunedeck.jobs.failure_kinds import ERROR
from tunedeck.jobs.states import FINISHED_STATUSES, QUEUED, RUNNING
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from tunedeck.slurm.states import Verdict, verdict
from worker import job_runner
from worker.failure_triage import FailureReason
from worker.outcome import Outcome
from worker.sampler import JobSampler
from worker.slurm.allocation import SlurmAllocation, cancel_quietly
from worker.slurm.client import SlurmStates
from worker.slurm.submission import SlurmSubmission
from worker.supervision import supervise
from worker.trackers.export import TrackerExport
from worker.worker_identity import WorkerIdentity


class SlurmExecutor:
    """What a Slurm executor process shares among its job threads: one SlurmStates (one
    squeue and one sacct a poll for all its jobs), which jobs it follows now, and the
    SlurmSubmission (its partition, asked once) it submits them with."""

    def __init__(self, *, settings: Settings, database: Database, identity: WorkerIdentity):
        self.settings = settings
        self.database = database
        self.identity = identity
        self.states = SlurmStates(settings.slurm_poll_seconds)
        self._following: set[int] = set()
        self._lock = threading.Lock()
        self.submission = SlurmSubmission(settings=settings, database=database, identity=identity)

    def run_job(self, job_id: int, *, shutdown_requested: Callable[[], bool]) -> Outcome:
        """Submit the queued job, or follow the one this executor submitted before it
        restarted; returns once Slurm says it ended (or the executor stops)."""
        with self._lock:
            if job_id in self._following:
                return Outcome.LEFT_QUEUED  # a re-sent id of a job followed already
            self._following.add(job_id)
        try:
            return self._run(job_id, shutdown_requested)
        finally:
            with self._lock:
                self._following.discard(job_id)

    def jobs_to_follow_again(self) -> list[int]:
        """The queued and running jobs this executor submitted before it (re)started."""
        with self.database.transaction() as session:
            return [job.id for job in job_queries.list_slurm_jobs_of_worker(
                session=session, worker_name=self.identity.name)]

    def _run(self, job_id: int, shutdown_requested: Callable[[], bool]) -> Outcome:
        with self.database.transaction() as session:
            try:
                job = job_queries.get_job(session=session, job_id=job_id)
            except job_queries.JobNotFound:
                return Outcome.MISSING
            status, slurm_job_id, worker_name = job.status, job.slurm_job_id, job.worker_name
            spec, owner = job.spec_model, job.owner
            resume = job.resume_requested
        if status in FINISHED_STATUSES:
            return Outcome.of_unclaimed(status)
        if slurm_job_id is not None and worker_name != self.identity.name:
            return Outcome.RUNNING_ELSEWHERE
        run = RunFolder(self.settings.run_dir_for(job_id))
        if slurm_job_id is None:
            if status != QUEUED:
                return Outcome.of_unclaimed(status)
            slurm_job_id = self.submission.submit(job_id, spec, run, owner=owner, resume=resume)
            if slurm_job_id is None:
                return Outcome.FAILED
        # The trackers of its report_to, from the stored rows: a restarted executor's
        # export carries on from their cursors in the run folder.
        export = TrackerExport.for_job(job_id, spec, run, settings=self.settings,
                                       database=self.database).start()
        outcome = self._follow(job_id, slurm_job_id, run, shutdown_requested,
                               on_stored=export.nudge)
        if outcome.job_finished:  # not when the executor stops: Slurm runs the job on
            export.finish(outcome)
        return outcome

    # --- following ----------------------------------------------------------------------

    def _follow(self, job_id: int, slurm_job_id: str, run: RunFolder,
                shutdown_requested: Callable[[], bool],
                on_stored: Callable[[], None] = lambda: None) -> Outcome:
        self.states.follow(slurm_job_id)
        try:
            while True:
                started = self._wait_for_start(job_id, slurm_job_id, run, shutdown_requested)
                if isinstance(started, Outcome):
                    return started
                allocation = SlurmAllocation(slurm_job_id, self.states, shutdown_requested)
                supervision = supervise(
                    job_id, allocation, run, settings=self.settings, database=self.database,
                    shutdown_requested=lambda: False, sampler=_no_local_processes(),
                    worker_name=self.identity.name, on_stored=on_stored)
                if allocation.detached:
                    return Outcome.RUNNING_ELSEWHERE  # Slurm keeps the job
                if supervision.taken_away:
                    return Outcome.TAKEN_AWAY
                if allocation.requeued and not supervision.cancelled:
                    if self._back_to_queued(job_id, allocation.verdict):
                        continue
                    return Outcome.FAILED
                result = self._judge(allocation, supervision, run)
                job_runner.record_outcome(job_id, result, database=self.database)
                return result.outcome
        finally:
            self.states.forget(slurm_job_id)

    def _wait_for_start(self, job_id: int, slurm_job_id: str, run: RunFolder,
                        shutdown_requested: Callable[[], bool]) -> Outcome | None:
        """Until Slurm runs the job (None: it runs, the row says so), noting each new
        pending reason; an Outcome when it ended, was cancelled, or the executor stops."""
        partition = self.settings.slurm_partition or self.submission.partition.name
        while True:
            if shutdown_requested():
                return Outcome.RUNNING_ELSEWHERE  # Slurm keeps the job; the next executor follows it
            state = self.states.state(slurm_job_id)
            with self.database.transaction() as session:
                job = job_queries.get_job(session=session, job_id=job_id)
                if job.status == RUNNING:
                    return None  # followed again after a restart: it runs already
                if job.status != QUEUED:  # cancelled while pending
                    cancel_quietly(slurm_job_id)
                    return Outcome.of_unclaimed(job.status)
                if state is None:
                    job_store.mark_job_failed(
                        session=session, job_id=job_id, failure_kind=ERROR,
                        error=f"Slurm no longer knows its job {slurm_job_id}")
                    return Outcome.FAILED
                judged = verdict(state, partition)
                if judged.phase in ("queued", "requeued"):
                    job_store.note_job_waiting(session=session, job_id=job_id,
                                               reason=f"Slurm job {slurm_job_id}: {judged.words}")
                else:
                    # Running, or ended before it was seen running (a short job, a bad
                    # node): the row runs, and the supervision judges how it ended.
                    job_store.mark_job_running(session=session, job_id=job_id,
                                               run_dir=str(run.path),
                                               worker_host=state.nodes or "slurm",
                                               worker_name=self.identity.name)
                    job_store.add_job_event(session=session, job_id=job_id, kind="slurm",
                                            message=f"Slurm job {slurm_job_id} runs on "
                                                    f"{state.nodes or 'its nodes'}")
                    return None
            time.sleep(self.settings.slurm_poll_seconds)

    def _back_to_queued(self, job_id: int, judged: Verdict | None) -> bool:
        """Slurm requeued the running job (a preemption): queued again, to resume from its
        latest checkpoint, within the spec's max_restarts; past them it fails."""
        with self.database.transaction() as session:
            job = job_queries.get_job(session=session, job_id=job_id)
            words = judged.words if judged else "Slurm requeued the job"
            if job.attempts > job.spec_model.max_restarts:
                job_store.mark_job_failed(session=session, job_id=job_id, failure_kind=ERROR,
                                          error=f"{words}; no restart left "
                                                f"(max_restarts {job.spec_model.max_restarts})")
                cancel = job.slurm_job_id
            else:
                job_store.requeue_slurm_job(session=session, job_id=job_id,
                                            reason=f"{words}: it resumes from its latest "
                                                   "checkpoint when Slurm starts it again")
                cancel = None
        if cancel:
            cancel_quietly(cancel)
        return cancel is None

    def _judge(self, allocation: SlurmAllocation, supervision,
               run: RunFolder) -> job_runner.RunResult:
        judged = allocation.verdict
        if supervision.cancelled or (judged is not None and judged.phase == "cancelled"):
            return job_runner.RunResult(Outcome.CANCELLED)
        if judged is not None and judged.phase == "failed":
            return job_runner.RunResult(Outcome.FAILED, judged.words,
                                        FailureReason(judged.failure_kind or ERROR))
        if allocation.lost:
            return job_runner.RunResult(
                Outcome.FAILED, f"Slurm no longer knows its job {allocation.slurm_job_id}",
                FailureReason(ERROR))
        result = job_runner.judge_run(allocation.returncode, supervision, run)
        if result.outcome == Outcome.FAILED and judged is not None and judged.words \
                and result.error and judged.words not in result.error:
            result.error = f"{judged.words}\n{result.error}"
        return result


def _no_local_processes() -> JobSampler:
    """The ranks run on the cluster's nodes: nothing of this host to sample (their memory
    comes from the ranks' own allocator readings, in their metric lines)."""
    return JobSampler(host="slurm", gpu_ids=[], nvml=None)
