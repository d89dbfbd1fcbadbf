"""Launching one node of a job: write its run folder, start its torchrun (cold, or on the
worker's warm launcher) with the environment the ranks get, and supervise it to its end.

`NodeLaunch` says what is launched; node 0 (worker/job_runner.py) and the other nodes of a
job on several nodes (worker/node_runner.py) both launch through `launch_node`.
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tunedeck.jobs import store as job_store
from tunedeck.launch_config import backend_config, build_torchrun_argv
from tunedeck.db.engine import Database
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder, write_run_folder
from tunedeck.settings import Settings
from tunedeck.torch_extensions import environment_extensions_dir
from worker.process_group import JobProcesses, start_process_group
from worker.supervision import Supervision, supervise
from worker.warm_launcher import WarmLauncher, fits_warm_start


def never() -> bool:
    return False


@dataclass(frozen=True)
class NodeLaunch:
    """One node's launch of a job: the job, its spec and run folder, whether it resumes
    from its latest checkpoint, which node it is (node 0 hosts the rendezvous of a job on
    several nodes), and the CUDA_VISIBLE_DEVICES of the GPUs it was given (None: no GPU)."""

    job_id: int
    spec: JobSpec
    run: RunFolder
    resume: bool = False
    node_rank: int = 0
    rendezvous: str | None = None
    visible_devices: str | None = None
    # The worker whose row the job is (node 0's): its supervision stops the job once the row
    # names another. None for the other nodes, which the row does not name.
    worker_name: str | None = None

    @property
    def own_ranks(self) -> range | None:
        """The ranks whose lines this node stores (None: every rank, the job's one node).
        Static rendezvous: node K holds ranks K*N .. K*N+N-1."""
        if self.spec.num_nodes == 1:
            return None
        return range(self.node_rank * self.spec.num_gpus, (self.node_rank + 1) * self.spec.num_gpus)


def launch_node(launch: NodeLaunch, *, settings: Settings, database: Database,
                shutdown_requested: Callable[[], bool] = never,
                warm: WarmLauncher | None = None,
                on_stored: Callable[[], None] = lambda: None) -> tuple[int | None, Supervision]:
    """Start this node's torchrun (forked by the warm launcher `warm` when the job fits it)
    and supervise it to its end: (its exit code, what the supervision learned). Raises
    OSError when torchrun cannot start. `on_stored()` follows each commit of new rows."""
    argv, env = prepare_run_folder(launch, settings)
    log_file = launch.run.node_launcher_log_file(launch.node_rank)
    # The worker's own folder, so relative model and dataset paths mean what the check saw.
    process = warm.take(argv, cwd=Path.cwd(), env=env, log_file=log_file) \
        if warm is not None and fits_warm_start(launch.spec) else None
    if process is None:
        process = start_process_group(argv, cwd=Path.cwd(), env=env, log_file=log_file)
    if launch.node_rank == 0:
        with database.transaction() as session:
            job_store.record_launcher_pid(session=session, job_id=launch.job_id,
                                          launcher_pid=process.pid)
    processes = JobProcesses(process)
    try:
        supervision = supervise(launch.job_id, processes, launch.run, settings=settings,
                                database=database, shutdown_requested=shutdown_requested,
                                launch_env=env, worker_name=launch.worker_name,
                                ranks=launch.own_ranks, ranks_on_node=launch.spec.num_gpus,
                                on_stored=on_stored)
    finally:
        processes.kill()  # nothing of the job outlives its supervision
    return process.returncode, supervision


def prepare_run_folder(launch: NodeLaunch, settings: Settings) -> tuple[list[str], dict[str, str]]:
    """Write spec, config and launch record; return torchrun's argv and environment. A
    resumed job keeps its folder's checkpoints, metrics and logs: the trainer continues
    from the latest checkpoint, and each rank's metrics file grows on, so no point is
    ingested twice."""
    spec, run = launch.spec, launch.run
    argv = build_torchrun_argv(spec, str(run.path), torchrun=torchrun_path(), resume=launch.resume,
                               node_rank=launch.node_rank, rendezvous=launch.rendezvous,
                               job_id=launch.job_id,
                               start_timeout_seconds=settings.node_start_timeout_seconds,
                               trainer_module=settings.trainer_module)
    launch_env = launch_environment(spec, settings)
    if launch.visible_devices is not None:  # its GPUs only: other jobs here hold the others
        launch_env["CUDA_VISIBLE_DEVICES"] = launch.visible_devices
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec), node_rank=launch.node_rank,
                     launch={"argv": argv, "env": launch_env, "cwd": str(Path.cwd())})
    return argv, {**inherited_environment(), **launch_env}


def torchrun_path() -> str:
    """The torchrun beside this worker's Python, else the one on PATH. (A Slurm executor's
    nodes run it at the same path: a shared filesystem, or the same image everywhere.)"""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        torchrun = shutil.which("torchrun") or "torchrun"
    return torchrun


def launch_environment(spec: JobSpec, settings: Settings) -> dict[str, str]:
    """What TuneDeck sets for the ranks; recorded in launch.json, so never a secret."""
    threads_per_rank = max(1, (os.cpu_count() or 1) // spec.num_gpus)
    return {
        "TUNEDECK_HOME": str(settings.home_dir),
        # This worker's Python runs the ranks: its own build folder (tunedeck/torch_extensions).
        "TORCH_EXTENSIONS_DIR": str(environment_extensions_dir(settings.torch_extensions_dir)),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads_per_rank)),
        "PYTHONUNBUFFERED": "1",
        # Each rank's `python -m trainer` imports the installed trainer: Python would first
        # look in the working folder, where a user's own `trainer/` would silently replace it.
        "PYTHONSAFEPATH": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Where the input check prepared the dataset: the ranks read it, not prepare it again.
        "HF_DATASETS_CACHE": str(settings.datasets_cache_dir),
    }


def standby_environment() -> dict[str, str]:
    """What the warm launcher starts with (each job's launcher takes on its job's environment)."""
    return {**inherited_environment(), "PYTHONUNBUFFERED": "1"}


def inherited_environment() -> dict[str, str]:
    """What the ranks inherit of the worker's environment. They need PATH, CUDA_* and the
    like, and HF_TOKEN for gated models (never written down: launch.json holds
    `launch_environment` only), but not our database or broker credentials: no TUNEDECK_*
    URL, nor compose's POSTGRES_PASSWORD (its .env reaches the worker's container)."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith("TUNEDECK_") and key != "POSTGRES_PASSWORD"}
