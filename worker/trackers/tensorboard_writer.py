"""TensorBoard: event files under the run folder's tensorboard/ (a zip of it is the job
page's "TensorBoard" download), with the spec as hparams. Written with tensorboard's own
event writer and protos, neither torch nor TensorFlow: the worker stays free of torch."""
from __future__ import annotations

from typing import Any

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder
from worker.trackers.tracker import Scalar, flat_spec, import_or_refuse

HPARAMS_METRIC = "train/loss"  # the figure TensorBoard's hparams table shows for the run


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, run: RunFolder):
        self._run = run
        self._writer = None

    def start(self, spec: JobSpec, saved: dict[str, Any]) -> dict[str, Any]:
        writer_module = import_or_refuse("tensorboard.summary.writer.event_file_writer",
                                         "tensorboard")
        self._run.tensorboard_dir.mkdir(parents=True, exist_ok=True)
        self._writer = writer_module.EventFileWriter(str(self._run.tensorboard_dir),
                                                     flush_secs=5)
        if not saved.get("hparams_written"):
            for summary in _hparams_start(flat_spec(spec)):
                self._add(summary, step=0, wall_time=None)
        return {"hparams_written": True}

    def write(self, scalars: list[Scalar]) -> None:
        from tensorboard.compat.proto import summary_pb2

        for scalar in scalars:
            self._add(summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                tag=scalar.tag, simple_value=scalar.value)]), step=scalar.step,
                wall_time=scalar.time)
        self._writer.flush()

    def finish(self, outcome: str) -> None:
        if self._writer is not None:
            try:
                self._add(_hparams_end(outcome), step=0, wall_time=None)
            finally:
                self._writer.close()

    def _add(self, summary, *, step: int, wall_time: float | None) -> None:
        import time

        from tensorboard.compat.proto import event_pb2

        self._writer.add_event(event_pb2.Event(
            wall_time=time.time() if wall_time is None else wall_time, step=step,
            summary=summary))


def _hparams_start(hparams: dict[str, Any]) -> list:
    """The hparams plugin's experiment and session-start summaries for these values."""
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo()
    for key, value in hparams.items():
        if isinstance(value, bool):
            start.hparams[key].bool_value = value
        elif isinstance(value, (int, float)):
            start.hparams[key].number_value = value
        else:
            start.hparams[key].string_value = str(value)
    experiment = api_pb2.Experiment(
        hparam_infos=[api_pb2.HParamInfo(name=key) for key in hparams],
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=HPARAMS_METRIC))])
    return [_hparams_summary("experiment", plugin_data_pb2.HParamsPluginData(experiment=experiment)),
            _hparams_summary("session_start",
                             plugin_data_pb2.HParamsPluginData(session_start_info=start))]


def _hparams_end(outcome: str):
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    # The plugin has no "cancelled": it stays unknown.
    status = {"succeeded": api_pb2.STATUS_SUCCESS,
              "failed": api_pb2.STATUS_FAILURE}.get(outcome, api_pb2.STATUS_UNKNOWN)
    return _hparams_summary("session_end", plugin_data_pb2.HParamsPluginData(
        session_end_info=plugin_data_pb2.SessionEndInfo(status=status)))


def _hparams_summary(which: str, data):
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import metadata

    tag = {"experiment": metadata.EXPERIMENT_TAG, "session_start": metadata.SESSION_START_INFO_TAG,
           "session_end": metadata.SESSION_END_INFO_TAG}[which]
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR)])
