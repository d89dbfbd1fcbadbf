"""One typed settings object, read from the environment (`.env.example` lists every key).

Infrastructure lives here, never in a job spec.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tunedeck.torch_extensions import DEFAULT_EXTENSIONS_ROOT
from tunedeck.units import MIB


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TUNEDECK_", extra="ignore", frozen=True)

    home: Path = Field(Path("./var"), description="data folder: SQLite file, runs, broker files")
    # Not in repr: both URLs may carry a password (tunedeck/accounts/redaction.py shows them).
    database_url: str | None = Field(None, repr=False,
                                     description="SQLAlchemy URL; default SQLite under home")
    broker_url: str | None = Field(None, repr=False,
                                   description="Celery broker; default a folder under home")
    host: str = "127.0.0.1"
    port: int = Field(7860, ge=1, le=65535)
    worker_concurrency: int | None = Field(
        None, ge=1, le=64,
        description="jobs one worker runs at once; default: one per GPU (1 on a host without GPUs)")
    worker_name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$",
        description="this worker's name on the cluster page; default HOSTNAME-QUEUES")
    worker_queues: str = Field(
        "default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}(,[A-Za-z0-9][A-Za-z0-9_.-]{0,127})*$",
        description="comma-separated job queues this worker serves (a job's spec names one)")
    worker_gpus: str | None = Field(
        None, description="the GPUs this worker hands out (comma-separated CUDA ids); "
                          "default: every GPU it sees (CUDA_VISIBLE_DEVICES or NVML)")
    broker_visibility_timeout_seconds: float = Field(
        3600.0, gt=0, le=7 * 24 * 3600,
        description="Redis: an unacknowledged message goes to another worker after this long "
                    "(jobs are acknowledged when they start, so a long job never runs twice)")
    worker_address: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,253}$",
        description="how other hosts reach this worker (node 0 of a job on several nodes "
                    "hosts its rendezvous there); default the host name")
    node_start_timeout_seconds: float = Field(
        300.0, gt=0, le=3600,
        description="a job on several nodes fails when a node has not joined after this long")
    heartbeat_seconds: float = Field(5.0, gt=0, le=60, description="how often a worker reports")
    # 20 s plus one heartbeat interval of sweep delay stays within the promised 30 s.
    worker_lost_seconds: float = Field(
        20.0, gt=0, le=3600,
        description="a worker silent this long is lost: its jobs fail or restart")
    redispatch_seconds: float = Field(
        30.0, gt=0, le=3600,
        description="a queued job nobody claimed is sent to the broker again after this long")
    initial_admin: str = Field(
        "admin", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="the admin `tunedeck migrate` creates when no account exists yet")
    initial_admin_password: SecretStr | None = Field(
        None, min_length=8, max_length=1024, repr=False,
        description="with it, `tunedeck migrate` creates the initial admin if there is no "
                    "account (later changes have no effect: use `tunedeck user passwd`)")
    session_hours: float = Field(
        12.0, gt=0, le=24 * 90, description="a browser sign-in lasts this long")
    cookie_secure: bool = Field(
        False, description="send the sign-in cookie over HTTPS only (set it behind TLS)")
    warm_start: bool = Field(
        True, description="keep a launcher ready with torch, transformers and peft imported, "
                          "so a job's ranks start in a second instead of importing for "
                          "seconds (LoRA and full jobs on one node; QLoRA starts cold)")
    poll_seconds: float = Field(0.5, gt=0, le=10, description="how often the worker tails metrics")
    python_rewards: bool = Field(
        False, description="let GRPO jobs name a Python reward (a file of the user's own code, "
                           "run on the worker's ranks); off, such a spec is refused by name. "
                           "Set it on the web and the workers alike")
    trainer_module: str = Field(
        "trainer", pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        description="the module a local worker's ranks run (`torchrun -m`); benches set a "
                    "fake trainer here, nobody else needs to")
    cancel_grace_seconds: float = Field(10.0, ge=0, le=600)
    torch_extensions_dir: Path = Field(
        DEFAULT_EXTENSIONS_ROOT,
        description="where DeepSpeed's compiled ops are cached, outside the repo; each "
                    "Python environment and torch version builds in a folder of its own "
                    "under it, so checkouts never rebuild each other's ops",
    )
    allowed_roots: str | None = Field(
        None, max_length=10_000,
        description="comma-separated absolute folders a job's local model and dataset paths "
                    "must lie in (symlinks resolved); default HOME/data. A user's uploads "
                    "folder (HOME/uploads/NAME) is always allowed for their own jobs")
    max_upload_mb: int = Field(1024, ge=1, le=1_048_576,
                               description="largest dataset upload (POST /api/datasets), in MB")
    generation_max_new_tokens: int = Field(
        1024, ge=1, le=65_536,
        description="the most tokens one \"Try it\" request (POST /api/jobs/{id}/generate) "
                    "may ask for")
    generation_warm_seconds: float = Field(
        300.0, ge=0, le=24 * 3600,
        description="a worker keeps the last model it generated with loaded this long after "
                    "the last request, so the next prompt answers at once (0: unload at once)")
    # At most 55: the command line's requests give up after 60 s.
    generation_wait_seconds: float = Field(
        45.0, ge=0, le=55,
        description="how long POST /api/jobs/{id}/generate waits for the worker's answer "
                    "before it answers 202 with the request's id to poll (0-55)")
    datasets_cache: Path | None = Field(
        None, description="a worker's `datasets` library cache (what it prepares of Hugging "
                          "Face ids, .parquet and .csv datasets; the ranks' HF_DATASETS_CACHE); "
                          "default HOME/hf-datasets")
    log_format: Literal["text", "json"] = Field(
        "text", description="the services' log lines: readable text, or JSON lines (one "
                            "object a line, for a log shipper)")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="the services' log level (DEBUG also logs the page's polling)")
    # A Slurm executor (worker/slurm) runs on a login node: it holds no GPU, submits each
    # job of its queues with sbatch and follows it on the shared filesystem.
    executor: Literal["local", "slurm"] = Field(
        "local", description="how this worker runs jobs: `local` (torchrun on this host's "
                             "GPUs) or `slurm` (sbatch on a Slurm cluster)")
    slurm_partition: str | None = Field(None, description="sbatch --partition (default: "
                                        "the cluster's default partition)")
    slurm_account: str | None = Field(None, description="sbatch --account")
    slurm_qos: str | None = Field(None, description="sbatch --qos")
    slurm_time_limit: str | None = Field(
        None, description="sbatch --time, in Slurm's formats (90, 4:00:00, 2-00:00:00)")
    slurm_extra_args: str = Field(
        "", max_length=2000, description="more sbatch options, space-separated "
                                         "--option=value words (e.g. --exclusive)")
    slurm_cpus_per_task: int | None = Field(
        None, ge=1, le=1024, description="sbatch --cpus-per-task (default: a core a rank on "
                                         "a partition without GPUs, Slurm's own otherwise)")
    slurm_shared_dir: Path | None = Field(
        None, description="where a Slurm executor writes run folders: a folder every node "
                          "mounts at the same path; default HOME/runs")
    slurm_poll_seconds: float = Field(
        5.0, gt=0, le=300, description="how often a Slurm executor asks squeue/sacct "
                                       "about all its jobs (one call each)")
    # Trackers a job's spec names in report_to (worker/trackers/): where each writes.
    mlflow_tracking_uri: str | None = Field(
        None, repr=False, max_length=2000,
        description="MLflow tracking server (http://mlflow.team:5000) or store; default a "
                    "file store under HOME/mlruns")
    mlflow_experiment: str = Field("tunedeck", min_length=1, max_length=500,
                                   description="the MLflow experiment jobs' runs go in")
    mlflow_log_artifacts: bool = Field(
        False, description="log a succeeded job's merged/ (and adapter/) folder to its MLflow run")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline", description="W&B: offline writes the run under wandb_dir (`wandb sync` "
                               "uploads it later); online needs WANDB_API_KEY in the "
                               "worker's environment")
    wandb_project: str = Field("tunedeck", min_length=1, max_length=200)
    wandb_entity: str | None = Field(None, max_length=200, description="W&B team or user")
    wandb_dir: Path | None = Field(None, description="where W&B writes its runs; default HOME/wandb")

    # Never logged, never in repr: a scraper's credential for GET /metrics alone.
    metrics_token: SecretStr | None = Field(
        None, min_length=16, max_length=1024, repr=False,
        description="a bearer token that may read GET /metrics (and nothing else) from "
                    "any address; loopback needs none, an account's API token also works")
    worker_metrics_port: int | None = Field(
        None, ge=1, le=65535,
        description="a worker serves its own Prometheus /metrics on this port (GPU memory, "
                    "utilisation, power, jobs running, tail lag); default: not served")
    worker_metrics_host: str = Field(
        "127.0.0.1", description="the address a worker's /metrics listens on (0.0.0.0 for a "
                                 "Prometheus on another host; it has no authentication)")

    @field_validator("allowed_roots")
    @classmethod
    def _absolute_roots(cls, roots: str | None) -> str | None:
        for root in (roots or "").split(","):
            if root.strip() and not Path(root.strip()).is_absolute():
                raise ValueError(f"{root.strip()!r} is not an absolute folder")
            if "\x00" in root:
                raise ValueError("must not contain a NUL character")
        return roots

    @cached_property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @cached_property
    def allowed_root_paths(self) -> tuple[Path, ...]:
        """The folders local model and dataset paths must lie in, symlinks resolved."""
        if self.allowed_roots is None:
            return (self.home_dir / "data",)
        return tuple(Path(root.strip()).resolve() for root in self.allowed_roots.split(",")
                     if root.strip())

    @cached_property
    def datasets_cache_dir(self) -> Path:
        if self.datasets_cache is None:
            return self.home_dir / "hf-datasets"
        return self.datasets_cache.expanduser().resolve()

    @property
    def mlflow_tracking_uri_or_default(self) -> str:
        return self.mlflow_tracking_uri or (self.home_dir / "mlruns").as_uri()

    @property
    def wandb_dir_or_default(self) -> Path:
        return (self.wandb_dir.expanduser().resolve() if self.wandb_dir is not None
                else self.home_dir / "wandb")

    @property
    def uploads_dir(self) -> Path:
        return self.home_dir / "uploads"

    def upload_dir_for(self, user_name: str) -> Path:
        """Where `user_name`'s uploaded datasets are stored (always allowed for their jobs)."""
        return self.uploads_dir / user_name

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * MIB

    @property
    def runs_dir(self) -> Path:
        return self.home_dir / "runs"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home_dir / 'tunedeck.db'}"

    @property
    def broker_folder(self) -> Path:
        return self.home_dir / "broker"

    @property
    def resolved_broker_url(self) -> str:
        # kombu's filesystem transport reads folders, not a host; the URL names one only so
        # that kombu does not warn "No hostname was supplied" on every connection.
        return self.broker_url or "filesystem://localhost/"

    @property
    def uses_embedded_broker(self) -> bool:
        return self.broker_url is None

    @property
    def worker_queue_list(self) -> list[str]:
        return [queue for queue in self.worker_queues.split(",") if queue]

    def run_dir_for(self, job_id: int) -> Path:
        if self.executor == "slurm" and self.slurm_shared_dir is not None:
            return self.slurm_shared_dir.expanduser().resolve() / f"job-{job_id}"
        return self.runs_dir / f"job-{job_id}"


def load_settings() -> Settings:
    return Settings()
