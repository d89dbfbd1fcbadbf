"""TensorBoard: event files under the run folder's tensorboard/ (a zip of it is the job
page's "TensorBoard" download), with the spec as hparams."""
from __future__ import annotations

import json
from typing import Any

from tunedeck.job_spec import JobSpec, spec_to_json
from tunedeck.run_folder import RunFolder
from worker.trackers.tracker import Scalar, flat_spec, import_or_refuse


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, run: RunFolder):
        self._run = run
        self._writer = None

    def start(self, spec: JobSpec, saved: dict[str, Any]) -> dict[str, Any]:
        # torch's writer: the worker's environment has torch, and it writes tensorboard's
        # own protos (hparams too) without TensorFlow.
        import_or_refuse("tensorboard", "tensorboard")
        tensorboard = import_or_refuse("torch.utils.tensorboard", "tensorboard")
        from torch.utils.tensorboard.summary import hparams

        self._writer = tensorboard.SummaryWriter(log_dir=str(self._run.tensorboard_dir),
                                                 flush_secs=5)
        if not saved.get("hparams_written"):
            experiment, start, end = hparams(flat_spec(spec), {"train/loss": 0.0})
            for summary in (experiment, start, end):
                self._writer.file_writer.add_summary(summary)
            self._writer.add_text("spec", "```\n" + spec_to_json(spec) + "\n```")
        return {"hparams_written": True}

    def write(self, scalars: list[Scalar]) -> None:
        for scalar in scalars:
            self._writer.add_scalar(scalar.tag, scalar.value, scalar.step, walltime=scalar.time)
        self._writer.flush()

    def finish(self, outcome: str) -> None:
        if self._writer is not None:
            self._writer.add_text("outcome", json.dumps(outcome))
            self._writer.close()
