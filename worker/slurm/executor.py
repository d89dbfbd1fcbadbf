"""Running a job through Slurm: check its inputs, write its run folder and sbatch script on
the shared filesystem, submit it, and follow it (queued with Slurm's reason while pending,
running from Slurm's start, metrics from the ranks' files as a local worker stores them)
until Slurm says it ended; then judge it from its run folder as a local job is judged.

An executor that stops (killed, restarted) leaves its Slurm jobs running: the next one to
start follows them again from the rows (`jobs_to_follow_again`). Cancel is `scancel`, and
the row is cancelled only once Slurm says the job ended.
"""
from __future__ import annotations

import logging
import shlex
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from tunedeck import job_store
from tunedeck.backend_config import backend_config
from tunedeck.db.engine import Database
from tunedeck.failure_kinds import ERROR
from tunedeck.job_spec import JobSpec
from tunedeck.job_states import FINISHED_STATUSES, QUEUED, RUNNING, InvalidTransition
from tunedeck.run_folder import RunFolder, write_run_folder
from tunedeck.settings import Settings
from tunedeck.slurm.sbatch_script import (SCRIPT_NAME, SbatchJob, SlurmOptions, published_site,
                                         rank_threads, sbatch_script)
from tunedeck.slurm.states import Verdict, verdict
from worker import job_runner
from worker.failure_triage import FailureEvidence, FailureReason, classify_failure
from worker.input_check import find_input_problems, worker_input_roots
from worker.launch import inherited_environment, launch_environment, torchrun_path
from worker.outcome import Outcome
from worker.sampler import JobSampler
from worker.slurm import client
from worker.slurm.allocation import SlurmAllocation, cancel_quietly
from worker.slurm.client import SlurmError, SlurmStates
from worker.supervision import supervise
from worker.trackers.export import TrackerExport
from worker.worker_identity import WorkerIdentity

log = logging.getLogger(__name__)


def slurm_options(settings: Settings, *, gpus: bool) -> SlurmOptions:
    """The site's sbatch options from the settings; ValueError names a bad one."""
    return SlurmOptions(partition=settings.slurm_partition, account=settings.slurm_account,
                        qos=settings.slurm_qos, time_limit=settings.slurm_time_limit,
                        extra_args=tuple(shlex.split(settings.slurm_extra_args)),
                        cpus_per_task=settings.slurm_cpus_per_task, gpus=gpus)


class SlurmExecutor:
    """What a Slurm executor process shares among its job threads: one SlurmStates (one
    squeue and one sacct a poll for all its jobs) and which jobs it follows now."""

    def __init__(self, *, settings: Settings, database: Database, identity: WorkerIdentity):
        self.settings = settings
        self.database = database
        self.identity = identity
        self.states = SlurmStates(settings.slurm_poll_seconds)
        self._following: set[int] = set()
        self._lock = threading.Lock()
        self._partition: client.Partition | None = None

    @property
    def partition(self) -> client.Partition:
        if self._partition is None:
            self._partition = client.partition_info(self.settings.slurm_partition)
        return self._partition

    def described(self) -> dict | None:
        """The partition (sinfo) and how this executor writes scripts, for its heartbeat;
        None while Slurm does not answer."""
        try:
            partition = client.partition_info(self.settings.slurm_partition)
        except SlurmError as error:
            log.warning("sinfo: %s", error)
            return None
        # What every job's ranks get; OMP_NUM_THREADS is a job's own (rank_threads).
        environment = {key: value for key, value in
                       launch_environment(JobSpec(max_steps=1), self.settings).items()
                       if key != "OMP_NUM_THREADS"}
        site = published_site(slurm_options(self.settings, gpus=partition.gpus_per_node > 0),
                              torchrun=torchrun_path(),
                              runs_dir=str(self.settings.run_dir_for(0).parent),
                              environment=environment)
        return {**asdict(partition), "site": site}

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
            return [job.id for job in job_store.list_slurm_jobs_of_worker(
                session=session, worker_name=self.identity.name)]

    def _run(self, job_id: int, shutdown_requested: Callable[[], bool]) -> Outcome:
        with self.database.transaction() as session:
            try:
                job = job_store.get_job(session=session, job_id=job_id)
            except job_store.JobNotFound:
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
            slurm_job_id = self._submit(job_id, spec, run, owner=owner, resume=resume)
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

    # --- submission -------------------------------------------------------------------

    def _submit(self, job_id: int, spec: JobSpec, run: RunFolder, *, owner: str | None,
                resume: bool) -> str | None:
        """The new Slurm job's id, or None when the job failed before Slurm took it."""
        problems = find_input_problems(spec, allowed_roots=worker_input_roots(self.settings, owner),
                                       datasets_cache=self.settings.datasets_cache_dir,
                                       cuda_available=self._partition_has_gpus())
        problems += self._partition_problems(spec)
        if problems:
            self._fail(job_id, "\n".join(problems), classify_failure(
                FailureEvidence(input_problems=tuple(problems))))
            return None
        try:
            script = self._write_run_folder(job_id, spec, run, resume=resume)
            # The executor's own folder, as a local worker's ranks start in theirs (relative
            # paths mean what the input check saw); its environment less TuneDeck's
            # secrets (sbatch hands its environment to the job).
            slurm_job_id = client.submit(script, cwd=Path.cwd(), env=inherited_environment())
        except (SlurmError, ValueError, OSError) as error:
            self._fail(job_id, f"Slurm refused the job: {error}", FailureReason(ERROR))
            return None
        # The job page's log and the failure triage read torchrun.log: Slurm's output file.
        run.launcher_log_file.unlink(missing_ok=True)
        run.launcher_log_file.symlink_to(f"slurm-{slurm_job_id}.out")
        try:
            with self.database.transaction() as session:
                job_store.record_slurm_submission(session=session, job_id=job_id,
                                                  slurm_job_id=slurm_job_id,
                                                  worker_name=self.identity.name,
                                                  run_dir=str(run.path))
        except InvalidTransition:
            # Cancelled (or claimed) while sbatch ran: the Slurm job must not run on.
            cancel_quietly(slurm_job_id)
            return None
        return slurm_job_id

    def _partition_has_gpus(self) -> bool | None:
        """Whether the ranks will have CUDA: the partition's nodes', not this login node's
        (the ranks run this worker's own environment there, so its packages are theirs).
        None where sinfo cannot say: the input check then asks this host."""
        try:
            return self.partition.gpus_per_node > 0
        except SlurmError:
            return None

    def _partition_problems(self, spec: JobSpec) -> list[str]:
        try:
            partition = self.partition
        except SlurmError as error:
            return [f"Slurm: {error}"]
        problems = []
        if spec.num_nodes > partition.nodes:
            problems.append(f"num_nodes: {spec.num_nodes} nodes asked for; partition "
                            f"{partition.name} has {partition.nodes}")
        if partition.gpus_per_node and spec.num_gpus > partition.gpus_per_node:
            problems.append(f"num_gpus: {spec.num_gpus} GPUs a node asked for; partition "
                            f"{partition.name}'s nodes have {partition.gpus_per_node}")
        if not partition.gpus_per_node and spec.num_gpus > partition.cpus_per_node:
            problems.append(f"num_gpus: {spec.num_gpus} ranks a node asked for; partition "
                            f"{partition.name} has no GPUs and {partition.cpus_per_node} "
                            "CPUs a node")
        return problems

    def _write_run_folder(self, job_id: int, spec: JobSpec, run: RunFolder, *,
                          resume: bool) -> Path:
        gpus = self.partition.gpus_per_node > 0
        options = slurm_options(self.settings, gpus=gpus)
        environment = {**launch_environment(spec, self.settings),
                       "OMP_NUM_THREADS": str(rank_threads(spec, options))}
        script = sbatch_script(SbatchJob(job_id=job_id, spec=spec, run=run,
                                         torchrun=torchrun_path(), resume=resume,
                                         environment=environment), options)
        write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                         backend_config=backend_config(spec), launch={
                             "argv": ["sbatch", "--parsable", str(run.path / SCRIPT_NAME)],
                             "env": environment, "cwd": str(run.path)})
        path = run.path / SCRIPT_NAME
        path.write_text(script)
        return path

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
        partition = self.settings.slurm_partition or self.partition.name
        while True:
            if shutdown_requested():
                return Outcome.RUNNING_ELSEWHERE  # Slurm keeps the job; the next executor follows it
            state = self.states.state(slurm_job_id)
            with self.database.transaction() as session:
                job = job_store.get_job(session=session, job_id=job_id)
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
            job = job_store.get_job(session=session, job_id=job_id)
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

    def _fail(self, job_id: int, error: str, failure: FailureReason) -> None:
        job_runner.record_outcome(job_id, job_runner.RunResult(Outcome.FAILED, error, failure),
                                  database=self.database)


def _no_local_processes() -> JobSampler:
    """The ranks run on the cluster's nodes: nothing of this host to sample (their memory
    comes from the ranks' own allocator readings, in their metric lines)."""
    return JobSampler(host="slurm", gpu_ids=[], nvml=None)
