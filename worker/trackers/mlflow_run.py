"""MLflow: one run a job (params: the flattened spec; metrics by step; the merged or
adapter folder as artifacts when TUNEDECK_MLFLOW_LOG_ARTIFACTS asks), on a file store or
a tracking server."""
from __future__ import annotations

import os
from typing import Any

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from worker.trackers.tracker import Scalar, flat_spec, import_or_refuse

PARAMS_PER_CALL = 100  # MLflow's limit on params in one log_batch
METRICS_PER_CALL = 1000
PARAM_VALUE_CHARS = 6000
OUTCOME_STATUS = {"succeeded": "FINISHED", "cancelled": "KILLED"}


class MlflowTracker:
    name = "mlflow"

    def __init__(self, job_id: int, run: RunFolder, settings: Settings):
        self._job_id, self._run, self._settings = job_id, run, settings
        self._client = None
        self._run_id: str | None = None

    def start(self, spec: JobSpec, saved: dict[str, Any]) -> dict[str, Any]:
        tracking = import_or_refuse("mlflow.tracking", "mlflow-skinny")
        uri = self._settings.mlflow_tracking_uri_or_default
        if uri.startswith("file:") or "://" not in uri:
            # MLflow 3 refuses its file store unless asked (it would rather have a database
            # store, which mlflow-skinny lacks): the default, a folder under the home, asks.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = tracking.MlflowClient(tracking_uri=uri)
        self._run_id = saved.get("run_id")
        if self._run_id is None:
            self._run_id = self._create_run(spec)
        return {"run_id": self._run_id}

    def _create_run(self, spec: JobSpec) -> str:
        from mlflow.entities import Param

        experiment_id = self._experiment_id(self._settings.mlflow_experiment)
        run = self._client.create_run(experiment_id, run_name=f"job-{self._job_id}-{spec.display_name}",
                                      tags={"tunedeck.job_id": str(self._job_id)})
        params = [Param(key, str(value)[:PARAM_VALUE_CHARS]) for key, value in flat_spec(spec).items()]
        for start in range(0, len(params), PARAMS_PER_CALL):
            self._client.log_batch(run.info.run_id, params=params[start:start + PARAMS_PER_CALL])
        return run.info.run_id

    def _experiment_id(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        experiment = self._client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self._client.create_experiment(name)
        except MlflowException:
            # Another job's export created it meanwhile.
            experiment = self._client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def write(self, scalars: list[Scalar]) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(scalar.tag, scalar.value, int(scalar.time * 1000), scalar.step)
                   for scalar in scalars]
        for start in range(0, len(metrics), METRICS_PER_CALL):
            self._client.log_batch(self._run_id, metrics=metrics[start:start + METRICS_PER_CALL])

    def finish(self, outcome: str) -> None:
        if self._client is None:
            return
        if outcome == "succeeded" and self._settings.mlflow_log_artifacts:
            for folder in (self._run.merged_dir, self._run.adapter_dir):
                if folder.is_dir():
                    self._client.log_artifacts(self._run_id, str(folder), folder.name)
        self._client.set_terminated(self._run_id, status=OUTCOME_STATUS.get(outcome, "FAILED"))
