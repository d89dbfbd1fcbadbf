"""report_to through the real `tunedeck up`: one LoRA job on 2 CPU ranks reporting to
TensorBoard, MLflow (the default file store under the home) and W&B (offline), each read
back with its own reader, and the TensorBoard files downloaded from the API as a zip."""
from __future__ import annotations

import io
import json
import os
import zipfile

import pytest

from harness.servers import running_tunedeck, wait_until
from tunedeck.run_folder import RunFolder, read_json

pytestmark = [pytest.mark.torchrun]

STEPS = 6
JOB = {"name": "e2e-trackers", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
       "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": STEPS,
       "micro_batch_size": 4, "seq_len": 64, "precision": "bf16",
       "report_to": ["tensorboard", "mlflow", "wandb"]}


def test_a_job_reports_to_all_three_trackers(tmp_path):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.worker.test_trackers import _wandb_records

    with running_tunedeck(tmp_path / "up") as server:
        job_id = server.submit(JOB)
        job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
        assert job["status"] == "succeeded", job["error"]
        response = server.http.get(f"/api/jobs/{job_id}/artifacts/tensorboard")
        assert response.status_code == 200
        names = zipfile.ZipFile(io.BytesIO(response.content)).namelist()
        assert any(name.startswith("tensorboard/events.out.tfevents.") for name in names), names
        run = RunFolder(server.home / "runs" / f"job-{job_id}")
        server_home = server.home
        # The export closes its runs just after the row is recorded: wait for MLflow's end.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient(tracking_uri=(server_home / "mlruns").as_uri())
        wait_until(lambda: run.tracker_cursor_file("mlflow").is_file() and client.get_run(
            read_json(run.tracker_cursor_file("mlflow"))["tracker"]["run_id"]).info.status
            == "FINISHED", 60, "the MLflow run to finish")
        events = server.http.get(f"/api/jobs/{job_id}/events").json()
        assert not [event for event in events if event["kind"] == "tracker"], events

    accumulator = EventAccumulator(str(run.tensorboard_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert [event.step for event in accumulator.Scalars("train/loss")] == list(range(1, STEPS + 1))
    assert {"memory/rank-0/rss_mb", "memory/rank-1/rss_mb"} <= set(accumulator.Tags()["scalars"])

    mlflow_run_id = read_json(run.tracker_cursor_file("mlflow"))["tracker"]["run_id"]
    mlflow_run = client.get_run(mlflow_run_id)
    assert mlflow_run.data.params["name"] == "e2e-trackers"
    assert mlflow_run.info.status == "FINISHED"
    assert [metric.step for metric in client.get_metric_history(mlflow_run_id, "train/loss")] \
        == list(range(1, STEPS + 1))

    wandb_run_id = read_json(run.tracker_cursor_file("wandb"))["tracker"]["run_id"]
    run_file, = (server_home / "wandb" / "wandb").glob(f"offline-run-*-{wandb_run_id}/run-*.wandb")
    steps = sorted(json.loads(item.value_json) for record in _wandb_records(run_file)
                   if record.WhichOneof("record_type") == "history"
                   for item in record.history.item
                   if "/".join(item.nested_key) == "train/step"
                   and any("/".join(other.nested_key) == "train/loss" for other in record.history.item))
    assert steps == list(range(1, STEPS + 1))


def test_a_tracking_server_that_is_down_changes_nothing_of_the_job(tmp_path):
    """MLflow pointed at a port nobody listens on: the job succeeds all the same, its
    events say why MLflow has nothing, and TensorBoard has every step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    down = {"TUNEDECK_MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
            # MLflow's own client settings: fail fast instead of retrying for minutes.
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"}
    with running_tunedeck(tmp_path / "up", extra_env=down) as server:
        job_id = server.submit({**JOB, "report_to": ["mlflow", "tensorboard"]})
        job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
        assert job["status"] == "succeeded", job["error"]
        run = RunFolder(server.home / "runs" / f"job-{job_id}")
        wait_until(lambda: any(event["kind"] == "tracker" for event in
                               server.http.get(f"/api/jobs/{job_id}/events").json()),
                   60, "a tracker event")
        events = server.http.get(f"/api/jobs/{job_id}/events").json()
        wait_until(lambda: run.tracker_cursor_file("tensorboard").is_file()
                   and read_json(run.tracker_cursor_file("tensorboard"))["last_step"] == STEPS,
                   60, "TensorBoard to have every step")
    messages = [event["message"] for event in events if event["kind"] == "tracker"]
    assert all(message.startswith("mlflow: ") for message in messages), messages
    assert "mlflow: start failed" in messages[0], messages
    accumulator = EventAccumulator(str(run.tensorboard_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert [event.step for event in accumulator.Scalars("train/loss")] == list(range(1, STEPS + 1))
