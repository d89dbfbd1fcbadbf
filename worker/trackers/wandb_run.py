"""Weights & Biases: one run a job. Offline (the default) needs no network: the run is a
folder under TUNEDECK_WANDB_DIR that `wandb sync` uploads later."""
from __future__ import annotations

import secrets
from itertools import groupby
from typing import Any

from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings
from worker.trackers.tracker import Scalar, import_or_refuse

STEP_KEY = "train/step"


class WandbTracker:
    name = "wandb"

    def __init__(self, job_id: int, settings: Settings):
        self._job_id, self._settings = job_id, settings
        self._run = None

    def start(self, spec: JobSpec, saved: dict[str, Any]) -> dict[str, Any]:
        wandb = import_or_refuse("wandb", "wandb")
        folder = self._settings.wandb_dir_or_default
        folder.mkdir(parents=True, exist_ok=True)
        run_id = saved.get("run_id") or f"job{self._job_id}-{secrets.token_hex(4)}"
        self._run = wandb.init(
            project=self._settings.wandb_project, entity=self._settings.wandb_entity,
            mode=self._settings.wandb_mode, dir=str(folder), id=run_id, resume="allow",
            name=f"job-{self._job_id}-{spec.display_name}", config=spec.model_dump(mode="json"),
            reinit="create_new", settings=wandb.Settings(silent=True, console="off",
                                                         x_disable_stats=True, save_code=False))
        # Every figure is charted against the train step it belongs to, so rows that reach
        # W&B late (another rank's memory, a catch-up) still land at their step.
        self._run.define_metric(STEP_KEY)
        self._run.define_metric("*", step_metric=STEP_KEY)
        return {"run_id": run_id, "folder": str(folder)}

    def write(self, scalars: list[Scalar]) -> None:
        for step, same_step in groupby(scalars, key=lambda scalar: scalar.step):
            self._run.log({STEP_KEY: step, **{scalar.tag: scalar.value for scalar in same_step}})

    def finish(self, outcome: str) -> None:
        if self._run is not None:
            self._run.summary["outcome"] = outcome
            self._run.finish(exit_code=0 if outcome == "succeeded" else 1)
