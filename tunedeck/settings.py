"""One typed settings object, read from the environment (`.env.example` lists every key).

Infrastructure lives here, never in a job spec.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TUNEDECK_", extra="ignore", frozen=True)

    home: Path = Field(Path("./var"), description="data folder: SQLite file, runs, broker files")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default SQLite under home")
    broker_url: str | None = Field(None, description="Celery broker; default a folder under home")
    host: str = "127.0.0.1"
    port: int = Field(7860, ge=1, le=65535)
    worker_concurrency: int = Field(1, ge=1, le=64, description="jobs one worker runs at once")
    poll_seconds: float = Field(0.5, gt=0, le=10, description="how often the worker tails metrics")
    cancel_grace_seconds: float = Field(10.0, ge=0, le=600)
    torch_extensions_dir: Path = Field(
        Path.home() / ".cache" / "tunedeck" / "torch_extensions",
        description="DeepSpeed's compiled ops, cached outside the repo",
    )

    @cached_property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

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
        return self.broker_url or "filesystem://"

    @property
    def uses_embedded_broker(self) -> bool:
        return self.broker_url is None

    def run_dir_for(self, job_id: int) -> Path:
        return self.runs_dir / f"job-{job_id}"


def load_settings() -> Settings:
    return Settings()
