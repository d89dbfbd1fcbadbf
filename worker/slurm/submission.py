"""Submitting a queued job to Slurm: check its inputs against what the partition offers,
write its run folder and sbatch script on the shared filesystem, run sbatch, and note the
Slurm job on the row. Following the job from there is worker/slurm/executor.py's.
"""
from __future__ import annotations

import logging
import shlex
from dataclasses import asdict
from pathlib import Path

from tunedeck.jobs import store as job_store
from tunedeck.launch_config import backend_config
from tunedeck.db.engine import Database
from tunedeck.jobs.failure_kinds import ERROR
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.states import InvalidTransition
from tunedeck.run_folder import RunFolder, write_run_folder
from tunedeck.settings import Settings
from tunedeck.slurm.sbatch_script import (SCRIPT_NAME, SbatchJob, SlurmOptions, published_site,
                                         rank_threads, sbatch_script)
from worker import job_runner
from worker.failure_triage import FailureEvidence, FailureReason, classify_failure
from worker.input_check import find_input_problems, trainer_inputs, worker_input_roots
from worker.launch import inherited_environment, launch_environment, torchrun_path
from worker.outcome import Outcome
from worker.slurm import client
from worker.slurm.allocation import cancel_quietly
from worker.slurm.client import SlurmError
from worker.worker_identity import WorkerIdentity

log = logging.getLogger(__name__)


def slurm_options(settings: Settings, *, gpus: bool) -> SlurmOptions:
    """The site's sbatch options from the settings; ValueError names a bad one."""
    return SlurmOptions(partition=settings.slurm_partition, account=settings.slurm_account,
                        qos=settings.slurm_qos, time_limit=settings.slurm_time_limit,
                        extra_args=tuple(shlex.split(settings.slurm_extra_args)),
                        cpus_per_task=settings.slurm_cpus_per_task, gpus=gpus)


class SlurmSubmission:
    """What a Slurm executor submits with: its partition (asked of sinfo on first use, then
    kept for the checks and the scripts), the site its heartbeat describes, and `submit`,
    which turns a queued job into a Slurm job."""

    def __init__(self, *, settings: Settings, database: Database, identity: WorkerIdentity):
        self.settings = settings
        self.database = database
        self.identity = identity
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

    def submit(self, job_id: int, spec: JobSpec, run: RunFolder, *, owner: str | None,
               resume: bool) -> str | None:
        """The new Slurm job's id, or None when the job failed before Slurm took it."""
        inputs = trainer_inputs(spec, database=self.database, settings=self.settings)
        spec = inputs.spec
        problems = [inputs.problem] if inputs.problem else find_input_problems(
            spec, allowed_roots=(*worker_input_roots(self.settings, owner), *inputs.extra_roots),
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

    def _fail(self, job_id: int, error: str, failure: FailureReason) -> None:
        job_runner.record_outcome(job_id, job_runner.RunResult(Outcome.FAILED, error, failure),
                                  database=self.database)
