"""The trackers a spec's report_to names, written from stored rows and read back with each
tool's own reader: TensorBoard's EventAccumulator, MLflow's client on a file store, the W&B
offline run's own record file. And a tracker that raises: a job event, never the job's."""
import struct
import time

import pytest

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import samples as sample_store, store as metric_store
from tunedeck.metrics.events import encode_event, decode_event
from tunedeck.run_folder import RunFolder, read_json
from tunedeck.settings import Settings
from worker.trackers.export import TrackerExport

STEPS = 12
# What a preference (DPO) job's step adds, by step; and each figure's tag (TRL's names).
PREFERENCE_FIGURES = {
    "rewards_chosen": ("train/rewards/chosen", lambda step: 0.1 * step),
    "rewards_rejected": ("train/rewards/rejected", lambda step: -0.05 * step),
    "reward_margin": ("train/rewards/margins", lambda step: 0.15 * step),
    "reward_accuracy": ("train/rewards/accuracies", lambda step: step / STEPS),
    "logps_chosen": ("train/logps/chosen", lambda step: -40.0 + step),
    "logps_rejected": ("train/logps/rejected", lambda step: -45.0 - step),
}
PREFERENCE_TAGS = {tag for tag, _value in PREFERENCE_FIGURES.values()}


def _preference_values(tag):
    """A preference tag's value at each step, as `_job_with_rows` stored them."""
    value = next(value for name, value in PREFERENCE_FIGURES.values() if name == tag)
    return {step: value(step) for step in range(1, STEPS + 1)}


def _job_with_rows(database, tmp_path, report_to, objective="sft"):
    spec = JobSpec(max_steps=STEPS, report_to=report_to, name="tracked", objective=objective,
                   **({"dataset": "builtin:arithmetic-preference"} if objective == "dpo" else {}))
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=spec).id
    now = time.time()
    events = []
    for step in range(1, STEPS + 1):
        preference = ({field: value(step) for field, (_tag, value) in PREFERENCE_FIGURES.items()}
                      if objective == "dpo" else {})
        events.append((len(events), decode_event(encode_event(
            "step", rank=0, time=now + step, step=step, loss=10.0 / step, learning_rate=1e-4,
            grad_norm=1.5, tokens_per_second=900.0, step_seconds=0.1, tokens=90,
            **preference))))
        events.append((len(events), decode_event(encode_event(
            "memory", rank=0, time=now + step, step=step, allocated_mb=100.0 + step,
            reserved_mb=200.0, peak_mb=150.0, rss_mb=500.0))))
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
        sample_store.add_samples(session=session, job_id=job_id, samples=[
            {"time": now + 3.5, "host": "h", "source": "gpu", "index": 0,
             "values": {"used_mb": 1234.0, "utilization_percent": 50.0}}])
    return job_id, spec, RunFolder(tmp_path / f"job-{job_id}")


def _settings(tmp_path):
    return Settings(home=tmp_path, mlflow_tracking_uri=(tmp_path / "mlruns").as_uri(),
                    wandb_dir=tmp_path / "wandb-runs", wandb_mode="offline")


def _export(database, tmp_path, report_to, objective="sft"):
    job_id, spec, run = _job_with_rows(database, tmp_path, report_to, objective)
    export = TrackerExport.for_job(job_id, spec, run, settings=_settings(tmp_path),
                                   database=database).start()
    export.finish("succeeded")
    return job_id, run


def _events(database, job_id):
    with database.transaction() as session:
        return [(event.kind, event.message)
                for event in job_queries.list_job_events(session=session, job_id=job_id)]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize("objective", ["sft", "dpo"])
def test_tensorboard_event_files_hold_every_train_steps_loss(database, tmp_path, objective):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job_id, run = _export(database, tmp_path, ["tensorboard"], objective)
    accumulator = EventAccumulator(str(run.tensorboard_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    losses = {event.step: event.value for event in accumulator.Scalars("train/loss")}
    assert losses == pytest.approx({step: 10.0 / step for step in range(1, STEPS + 1)})
    tags = set(accumulator.Tags()["scalars"])
    assert {"train/learning_rate", "train/grad_norm", "train/tokens_per_second",
            "memory/rank-0/allocated_mb", "gpu/h/0/used_mb"} <= tags
    # A preference job's figures under TRL's names; an SFT job has none of them.
    if objective == "dpo":
        assert PREFERENCE_TAGS <= tags
        for tag in PREFERENCE_TAGS:
            assert {event.step: event.value for event in accumulator.Scalars(tag)} == \
                pytest.approx(_preference_values(tag)), tag
    else:
        assert not PREFERENCE_TAGS & tags
    assert [event.step for event in accumulator.Scalars("gpu/h/0/used_mb")] == [3]
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    hparams = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    start = plugin_data_pb2.HParamsPluginData.FromString(
        hparams[metadata.SESSION_START_INFO_TAG]).session_start_info
    assert start.hparams["max_steps"].number_value == STEPS
    assert start.hparams["name"].string_value == "tracked"
    assert start.hparams["lora.r"].number_value == 16
    assert metadata.SESSION_END_INFO_TAG in hparams
    assert read_json(run.tracker_cursor_file("tensorboard"))["points"] == {"0": 2 * STEPS - 1}
    assert not [event for event in _events(database, job_id) if event[0] == "tracker"]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize("objective", ["sft", "dpo"])
def test_an_mlflow_file_store_run_has_the_params_and_the_loss_history(database, tmp_path,
                                                                      objective):
    from mlflow.tracking import MlflowClient

    job_id, run = _export(database, tmp_path, ["mlflow"], objective)
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    run_id = read_json(run.tracker_cursor_file("mlflow"))["tracker"]["run_id"]
    found = client.get_run(run_id)
    assert found.data.params["max_steps"] == str(STEPS)
    assert found.data.params["lora.r"] == "16" and found.data.params["report_to"] == "['mlflow']"
    assert found.data.tags["tunedeck.job_id"] == str(job_id)
    assert found.info.status == "FINISHED"
    history = client.get_metric_history(run_id, "train/loss")
    assert {metric.step: metric.value for metric in history} == pytest.approx(
        {step: 10.0 / step for step in range(1, STEPS + 1)})
    logged = set(found.data.metrics)
    if objective == "dpo":
        assert PREFERENCE_TAGS <= logged
        for tag in PREFERENCE_TAGS:
            assert {metric.step: metric.value for metric in client.get_metric_history(
                run_id, tag)} == pytest.approx(_preference_values(tag)), tag
    else:
        assert "train/loss" in logged and not PREFERENCE_TAGS & logged


try:
    from google.protobuf.message import DecodeError
except ImportError:  # no protobuf, no wandb: its tests skip
    DecodeError = ValueError


def _wandb_records(path, *, timeout_seconds: float = 30.0):
    """The records of a closed W&B run file; wandb's own process writes it, and its last
    records land a moment after `finish()` returns, so wait for the exit record."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            records = _wandb_file_records(path) if path.is_file() else []
        except DecodeError:  # read while wandb's process was writing a record: read again
            if time.monotonic() > deadline:
                raise
            records = []
        if any(record.WhichOneof("record_type") == "exit" for record in records) \
                or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _wandb_file_records(path):
    """The records of a W&B run file (a LevelDB-style log of 32 KiB blocks: a 7-byte file
    header, then chunks of crc32, length, type (1 full, 2 first, 3 middle, 4 last))."""
    from wandb.proto import wandb_internal_pb2

    data, records, offset, pending = path.read_bytes(), [], 7, b""
    while offset + 7 <= len(data):
        if 32768 - offset % 32768 < 7:
            offset += 32768 - offset % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset:offset + 7])
        if offset + 7 + length > len(data):
            break  # a chunk still being written: the records before it are whole
        chunk = data[offset + 7:offset + 7 + length]
        offset += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize("objective", ["sft", "dpo"])
def test_a_wandb_offline_run_folder_holds_the_history(database, tmp_path, objective):
    import json

    job_id, run = _export(database, tmp_path, ["wandb"], objective)
    run_id = read_json(run.tracker_cursor_file("wandb"))["tracker"]["run_id"]
    folders = list((tmp_path / "wandb-runs" / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(folders) == 1, folders
    records = _wandb_records(folders[0] / f"run-{run_id}.wandb")
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item}
               for record in records if record.WhichOneof("record_type") == "history"]
    losses = {row["train/step"]: row["train/loss"] for row in history if "train/loss" in row}
    assert history, [record.WhichOneof("record_type") for record in records]
    assert losses == pytest.approx({step: 10.0 / step for step in range(1, STEPS + 1)})
    logged = {key for row in history for key in row}
    if objective == "dpo":
        for tag in PREFERENCE_TAGS:
            assert {row["train/step"]: row[tag] for row in history if tag in row} == \
                pytest.approx(_preference_values(tag)), tag
    else:
        assert not PREFERENCE_TAGS & logged
    config = {item.key: json.loads(item.value_json) for record in records
              if record.WhichOneof("record_type") == "run" for item in record.run.config.update}
    assert (config["name"], config["max_steps"]) == ("tracked", STEPS)


class RaisingTracker:
    name = "raising"

    def start(self, spec, saved):
        return {}

    def write(self, scalars):
        raise ConnectionError("tracking server is down")

    def finish(self, outcome):
        raise ConnectionError("still down")


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_tracker_that_raises_is_a_job_event_and_the_others_go_on(database, tmp_path):
    job_id, spec, run = _job_with_rows(database, tmp_path, ["tensorboard"])
    from worker.trackers.tensorboard_writer import TensorBoardTracker

    export = TrackerExport(job_id, spec, run, database=database,
                           trackers=[RaisingTracker(), TensorBoardTracker(run)]).start()
    export.finish("succeeded")
    messages = [message for kind, message in _events(database, job_id) if kind == "tracker"]
    assert any("raising: write failed: ConnectionError: tracking server is down" in message
               for message in messages), messages
    assert any("raising: finish failed" in message for message in messages)
    assert read_json(run.tracker_cursor_file("tensorboard"))["points"] == {"0": 2 * STEPS - 1}
    assert not run.tracker_cursor_file("raising").exists() or \
        read_json(run.tracker_cursor_file("raising"))["points"] == {}


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_restarted_export_catches_up_from_its_cursor(database, tmp_path):
    from mlflow.tracking import MlflowClient

    job_id, run = _export(database, tmp_path, ["mlflow"])
    now = time.time()
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=[
            (100, decode_event(encode_event("step", rank=0, time=now + 100, step=STEPS + 1,
                                            loss=0.5)))])
    spec = JobSpec(max_steps=STEPS, report_to=["mlflow"], name="tracked")
    TrackerExport.for_job(job_id, spec, run, settings=_settings(tmp_path),
                          database=database).start().finish("succeeded")
    cursor = read_json(run.tracker_cursor_file("mlflow"))
    history = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri()).get_metric_history(
        cursor["tracker"]["run_id"], "train/loss")
    assert sorted(metric.step for metric in history) == list(range(1, STEPS + 2))


def test_report_to_names_each_tracker_once():
    with pytest.raises(ValueError, match="wandb named more than once"):
        JobSpec(max_steps=1, report_to=["wandb", "mlflow", "wandb"])
    with pytest.raises(ValueError):
        JobSpec(max_steps=1, report_to=["comet"])
    assert JobSpec(max_steps=1).report_to == []


class TrackerWithoutItsPackage:
    name = "missing"

    def start(self, spec, saved):
        from worker.trackers.tracker import import_or_refuse

        import_or_refuse("no_such_tracker_library", "no-such-tracker")

    def write(self, scalars):
        raise AssertionError("never started, never written")

    def finish(self, outcome):
        pass


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_missing_package_is_one_event_naming_it_and_the_tracker_is_left_off(database, tmp_path):
    job_id, spec, run = _job_with_rows(database, tmp_path, [])
    TrackerExport(job_id, spec, run, database=database,
                  trackers=[TrackerWithoutItsPackage()]).start().finish("failed")
    messages = [message for kind, message in _events(database, job_id) if kind == "tracker"]
    assert len(messages) == 1, messages
    assert "'no-such-tracker' package is not installed" in messages[0]
    assert "pip install no-such-tracker" in messages[0] and "left off" in messages[0]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_an_unreadable_cursor_starts_the_tracker_over_instead_of_failing(database, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job_id, spec, run = _job_with_rows(database, tmp_path, ["tensorboard"])
    run.tracker_cursor_file("tensorboard").parent.mkdir(parents=True)
    run.tracker_cursor_file("tensorboard").write_text("{torn", encoding="utf-8")
    TrackerExport.for_job(job_id, spec, run, settings=_settings(tmp_path),
                          database=database).start().finish("succeeded")
    accumulator = EventAccumulator(str(run.tensorboard_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert len(accumulator.Scalars("train/loss")) == STEPS


def test_a_grpo_steps_figures_go_out_under_trls_names():
    from worker.trackers.tracker import ExportRows, scalars_of

    values = {"loss": 0.01, "reward": 0.75, "kl": 0.02, "clip_ratio_low": 0.0,
              "completion_length": 5.5, "sampling_seconds": 0.3,
              "reward_means": {"numeric_match": 0.5, "length": -0.25}}
    scalars, last_step = scalars_of(ExportRows(points=[("step", 0, 0, 7, 100.0, values)]),
                                    last_step=0)
    named = {scalar.tag: scalar.value for scalar in scalars}
    assert last_step == 7 and all(scalar.step == 7 for scalar in scalars)
    assert named == {"train/loss": 0.01, "train/reward": 0.75, "train/kl": 0.02,
                     "train/clip_ratio/low_mean": 0.0, "train/completions/mean_length": 5.5,
                     "train/sampling_seconds": 0.3, "train/rewards/numeric_match/mean": 0.5,
                     "train/rewards/length/mean": -0.25}
