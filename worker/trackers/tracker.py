"""What a tracker is to the export (worker/trackers/export.py): start it with the job's
spec, hand it batches of stored rows, finish it with the job's outcome. Also the one
naming of the figures every tracker logs, so TensorBoard, MLflow and W&B agree."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import events as metrics_event, samples as sample_source
from tunedeck.metrics.store import TRAIN_SERIES_RANK


@dataclass(frozen=True)
class Scalar:
    tag: str  # "train/loss", "memory/rank-1/peak_mb", "gpu/host-a/0/used_mb"
    value: float
    step: int
    time: float  # Unix seconds


@dataclass
class ExportRows:
    """One batch of a job's stored rows, oldest first: metric points as (kind, rank, seq,
    step, time, values), samples as (id, time, host, source, index, values)."""

    points: list[tuple] = field(default_factory=list)
    samples: list[tuple] = field(default_factory=list)


class Tracker(Protocol):
    name: str

    def start(self, spec: JobSpec, saved: dict[str, Any]) -> dict[str, Any]:
        """Open (or, with what an earlier start returned as `saved`, reopen) the job's run;
        returns what to keep for a restart (a run id)."""

    def write(self, scalars: list[Scalar]) -> None: ...

    def finish(self, outcome: str) -> None: ...


class MissingPackage(RuntimeError):
    """The tracker's library is not installed on this worker."""


def import_or_refuse(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingPackage(f"the {package!r} package is not installed on this worker "
                             f"(pip install {package}): {error}") from error


TRAIN_TAGS = {"loss": "train/loss", "learning_rate": "train/learning_rate",
              "grad_norm": "train/grad_norm", "tokens_per_second": "train/tokens_per_second",
              "step_seconds": "train/step_seconds", "mfu": "train/mfu",
              "mfu_6n": "train/mfu_6n",
              # A preference (DPO) job's steps only: TRL's names, under train/, so its runs
              # chart beside TRL's.
              "rewards_chosen": "train/rewards/chosen",
              "rewards_rejected": "train/rewards/rejected",
              "reward_margin": "train/rewards/margins",
              "reward_accuracy": "train/rewards/accuracies",
              "logps_chosen": "train/logps/chosen", "logps_rejected": "train/logps/rejected",
              # An online RL (GRPO) job's steps only, under TRL's GRPOTrainer's names.
              "reward": "train/reward", "reward_std": "train/reward_std",
              "frac_reward_zero_std": "train/frac_reward_zero_std", "kl": "train/kl",
              "clip_ratio_low": "train/clip_ratio/low_mean",
              "clip_ratio_high": "train/clip_ratio/high_mean", "entropy": "train/entropy",
              "completion_length": "train/completions/mean_length",
              "completion_length_min": "train/completions/min_length",
              "completion_length_max": "train/completions/max_length",
              "clipped_ratio": "train/completions/clipped_ratio",
              "sampling_seconds": "train/sampling_seconds",
              "scoring_seconds": "train/scoring_seconds",
              "training_seconds": "train/training_seconds"}
# Each reward's own mean (a GRPO step's `reward_means`), as TRL names it.
REWARD_MEAN_TAG = "train/rewards/{label}/mean"
EVAL_TAGS = {"eval_loss": "eval/loss"}
MEMORY_TAGS = ("allocated_mb", "reserved_mb", "peak_mb", "peak_reserved_mb", "rss_mb")
SAMPLE_TAGS = {sample_source.GPU: ("used_mb", "utilization_percent", "power_w", "temperature_c"),
               sample_source.PROCESS: ("rss_mb", "cpu_percent")}


def scalars_of(rows: ExportRows, *, last_step: int) -> tuple[list[Scalar], int]:
    """The figures of a batch, in time order, and the newest train step after it. A sample
    has no step of its own: it gets the newest train step stored before it (`last_step`
    carries that across batches)."""
    timed: list[tuple[float, int, Any]] = [(point[4], 0, point) for point in rows.points]
    timed += [(sample[1], 1, sample) for sample in rows.samples]
    scalars: list[Scalar] = []
    for _time, is_sample, row in sorted(timed, key=lambda item: (item[0], item[1])):
        if is_sample:
            scalars += _sample_scalars(row, last_step)
            continue
        kind, rank, _seq, step, time, values = row
        step = step if step is not None else last_step
        if kind == metrics_event.STEP and rank == TRAIN_SERIES_RANK:
            last_step = max(last_step, step)
            scalars += _named(values, TRAIN_TAGS, step, time)
        elif kind == metrics_event.EVAL and rank == TRAIN_SERIES_RANK:
            scalars += _named(values, EVAL_TAGS, step, time)
        elif kind == metrics_event.MEMORY:
            scalars += _named(values, {name: f"memory/rank-{rank}/{name}" for name in MEMORY_TAGS},
                              step, time)
    return scalars, last_step


def _sample_scalars(sample: tuple, step: int) -> list[Scalar]:
    _id, time, host, source, index, values = sample
    line = f"gpu/{host}/{index}" if source == sample_source.GPU else f"process/{host}/rank-{index}"
    return _named(values, {name: f"{line}/{name}" for name in SAMPLE_TAGS.get(source, ())},
                  step, time)


def _named(values: dict[str, Any], tags: dict[str, str], step: int, time: float) -> list[Scalar]:
    scalars = [Scalar(tag, float(value), step, time) for field_name, tag in tags.items()
               if isinstance(value := values.get(field_name), (int, float))
               and not isinstance(value, bool)]
    means = values.get("reward_means")
    if isinstance(means, dict):
        scalars += [Scalar(REWARD_MEAN_TAG.format(label=label), float(value), step, time)
                    for label, value in means.items() if isinstance(value, (int, float))]
    return scalars


def flat_spec(spec: JobSpec) -> dict[str, str | int | float | bool]:
    """The spec as one level of keys ("lora.r": 16): what MLflow takes as params and
    TensorBoard as hparams. Lists and nulls become text."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        elif isinstance(value, (str, int, float, bool)):
            flat[prefix] = value
        else:
            flat[prefix] = "null" if value is None else str(value)

    walk("", spec.model_dump(mode="json"))
    return flat
