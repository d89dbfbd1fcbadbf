"""The run folder's names, spelled once: the worker writes it, the trainer reads it."""
from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunedeck.backends import BACKENDS

SPEC_FILE = "spec.json"
LAUNCH_FILE = "launch.json"
METRICS_DIR = "metrics"
LOGS_DIR = "logs"
LAUNCHER_LOG_FILE = "torchrun.log"
# torchrun --log-dir: <rdzv id>_<random>/attempt_<N>/<local rank>/{stdout,stderr}.log, a new
# first folder for each launch (a resumed job has several).
RANK_LOGS_DIR = "ranks"
RANK_LOG_NAMES = ("stdout.log", "stderr.log")
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PREFIX = "step-"
# Written by rank 0 after every rank has saved its part: a checkpoint without it is partial.
CHECKPOINT_STATE_FILE = "trainer_state.json"
# A checkpoint is written as `.step-<N>.partial` beside its final name and renamed to it once
# complete, so a disk that fills (or a kill) mid-save never leaves a final name half-written.
PARTIAL_CHECKPOINT_SUFFIX = ".partial"
# The trainer's tokenized data, one folder a node (trainer/data/tokenized_data.py).
TOKENIZED_DIR = "tokenized"
ADAPTER_DIR = "adapter"
MERGED_DIR = "merged"
# The worker's trackers (worker/trackers/): TensorBoard's event files, and each tracker's
# cursor into the job's stored rows (trackers/<name>.json).
TENSORBOARD_DIR = "tensorboard"
TRACKERS_DIR = "trackers"


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def spec_file(self) -> Path:
        return self.path / SPEC_FILE

    def backend_config_file(self, backend: str) -> Path:
        """The generated config of `backend` (its file name is its module's)."""
        return self.path / BACKENDS[backend].config_file

    @property
    def launch_file(self) -> Path:
        return self.path / LAUNCH_FILE

    def node_launch_file(self, node_rank: int) -> Path:
        """Node 0's launch record is `launch.json`; node K's of a job on several nodes is
        `launch-node-K.json` (the folder may be one that every host shares)."""
        return self.launch_file if node_rank == 0 else self.path / f"launch-node-{node_rank}.json"

    def node_launcher_log_file(self, node_rank: int) -> Path:
        return (self.launcher_log_file if node_rank == 0
                else self.logs_dir / f"torchrun-node-{node_rank}.log")

    def tokenized_dir(self, *, node_rank: int) -> Path:
        return self.path / TOKENIZED_DIR / f"node-{node_rank}"

    @property
    def metrics_dir(self) -> Path:
        return self.path / METRICS_DIR

    def rank_metrics_file(self, rank: int) -> Path:
        return self.metrics_dir / f"rank-{rank}.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def launcher_log_file(self) -> Path:
        return self.logs_dir / LAUNCHER_LOG_FILE

    @property
    def rank_logs_dir(self) -> Path:
        return self.logs_dir / RANK_LOGS_DIR

    def rank_log_files(self, rank: int) -> list[Path]:
        """The rank's stdout and stderr logs of the newest launch and attempt (those that
        exist). The folder is the local rank's: on one node, the rank itself."""
        attempts = [path for path in self.rank_logs_dir.glob(f"*/attempt_*/{rank}") if path.is_dir()]
        if not attempts:
            return []
        newest = max(attempts, key=lambda path: (path.parent.parent.stat().st_mtime,
                                                 int(path.parent.name.removeprefix("attempt_"))))
        return [newest / name for name in RANK_LOG_NAMES if (newest / name).is_file()]

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / f"{CHECKPOINT_PREFIX}{step:08d}"

    def partial_checkpoint_dir(self, step: int) -> Path:
        """Where the checkpoint of `step` is written before it is renamed complete."""
        return self.checkpoints_dir / f".{CHECKPOINT_PREFIX}{step:08d}{PARTIAL_CHECKPOINT_SUFFIX}"

    def partial_checkpoints(self) -> list[Path]:
        """Checkpoint folders that never completed: those still under their temporary name,
        and a final name without the marker (what a save cut short left before checkpoints
        were renamed into place, or a removal cut short)."""
        temporary = self.checkpoints_dir.glob(f".{CHECKPOINT_PREFIX}*{PARTIAL_CHECKPOINT_SUFFIX}")
        unmarked = (path for path in self.checkpoints_dir.glob(f"{CHECKPOINT_PREFIX}*")
                    if not (path / CHECKPOINT_STATE_FILE).is_file())
        return sorted(path for path in (*temporary, *unmarked) if path.is_dir())

    def completed_checkpoints(self) -> list[tuple[int, Path]]:
        """(optimizer step, folder) of every complete checkpoint, oldest first."""
        found = []
        for path in self.checkpoints_dir.glob(f"{CHECKPOINT_PREFIX}*"):
            step_text = path.name.removeprefix(CHECKPOINT_PREFIX)
            if step_text.isdigit() and (path / CHECKPOINT_STATE_FILE).is_file():
                found.append((int(step_text), path))
        return sorted(found)

    @property
    def adapter_dir(self) -> Path:
        return self.path / ADAPTER_DIR

    @property
    def merged_dir(self) -> Path:
        return self.path / MERGED_DIR

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD_DIR

    def tracker_cursor_file(self, tracker: str) -> Path:
        return self.path / TRACKERS_DIR / f"{tracker}.json"

    def rank_metrics_files(self) -> list[tuple[int, Path]]:
        """(rank, path) for every rank file present, by rank."""
        found = []
        for path in self.metrics_dir.glob("rank-*.jsonl"):
            rank_text = path.stem.removeprefix("rank-")
            if rank_text.isdigit():
                found.append((int(rank_text), path))
        return sorted(found)


def write_json(path: Path, data: Any) -> None:
    """Write atomically so a reader never sees half a file.

    The temporary name is the writer's own: the nodes of a multi-node job share one
    run folder and each writes spec.json, so a shared temporary name lets one node
    rename the other's file away from under it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    try:
        partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def remove_partial_checkpoints(run: RunFolder) -> list[Path]:
    """Remove every checkpoint folder that never completed; the ones removed. Only while no
    rank writes one: the trainer's rank 0 before a save or a resume, the worker after the
    job's ranks are gone."""
    removed = []
    for path in run.partial_checkpoints():
        try:
            shutil.rmtree(path)
        except FileNotFoundError:  # gone meanwhile
            continue
        removed.append(path)
    return removed


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_run_folder(
    run: RunFolder, *, spec_json: dict[str, Any], backend: str, backend_config: dict[str, Any],
    launch: dict[str, Any], node_rank: int = 0,
) -> None:
    """The worker's one place that lays out a run before launch."""
    for folder in (run.path, run.metrics_dir, run.logs_dir, run.checkpoints_dir):
        folder.mkdir(parents=True, exist_ok=True)
    write_json(run.spec_file, spec_json)
    write_json(run.backend_config_file(backend), backend_config)
    write_json(run.node_launch_file(node_rank), launch)
