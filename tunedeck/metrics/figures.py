"""The charted figures, each declared once: one row a figure.

A figure is a number that a rank's metric events (`tunedeck.metrics.events`, the one
spelling of their fields) or the worker's samples (`tunedeck.metrics.samples`) carry, and
a chart draws. What derives from this table: the Float columns of `metric_points` that the
store fills on insert and the charts read from covering indexes (their ORM declarations in
`tunedeck.db.models` are checked against it by a test), the figures whose extremes survive
downsampling, and the job page's step charts. Pure (no imports beyond the event schema):
the trainer may import it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tunedeck.metrics.events import EVAL, MEMORY, STEP

# The worker's sample sources (`tunedeck.metrics.samples` calls them GPU and PROCESS).
GPU_SAMPLE, PROCESS_SAMPLE = "gpu", "process"


@dataclass(frozen=True)
class Figure:
    field: str  # its key in the event (or sample) and in the API's rows
    kind: str  # the event kind (or sample source) that carries it
    title: str  # what its chart is called, and its value axis
    unit: str = ""  # what the number counts in ("" for a plain number)
    # Its Float column of metric_points (null when absent), or None: not copied out of
    # the row's JSON, so not read from a covering index, and its extremes are not kept.
    column: str | None = None
    # Drawn by step as a chart of its own in the job page's live panel.
    live_chart: bool = False


LOSS = Figure("loss", STEP, "Loss", column="loss")
TOKENS_PER_SECOND = Figure("tokens_per_second", STEP, "Throughput", unit="tokens/s",
                           column="tokens_per_second")
LEARNING_RATE = Figure("learning_rate", STEP, "Learning rate", column="learning_rate",
                       live_chart=True)
GRAD_NORM = Figure("grad_norm", STEP, "Gradient norm", column="grad_norm", live_chart=True)
STEP_SECONDS = Figure("step_seconds", STEP, "Step time (s)", unit="s", column="step_seconds",
                      live_chart=True)
MFU = Figure("mfu", STEP, "MFU (model FLOPs utilisation)", unit="fraction of peak",
             live_chart=True)
# A preference-tuning (DPO) step's figures (events.PREFERENCE_FIELDS): no columns, so no
# migration; charted by `PREFERENCE_CHARTS`, and only for a job whose steps carry them.
REWARD_UNIT = "β × log-ratio to the reference"
REWARDS_CHOSEN = Figure("rewards_chosen", STEP, "Reward of the chosen answers", unit=REWARD_UNIT)
REWARDS_REJECTED = Figure("rewards_rejected", STEP, "Reward of the rejected answers",
                          unit=REWARD_UNIT)
REWARD_MARGIN = Figure("reward_margin", STEP, "Reward margin", unit="chosen − rejected reward")
REWARD_ACCURACY = Figure("reward_accuracy", STEP, "Preference accuracy",
                         unit="share of pairs ranked right")
LOGPS_CHOSEN = Figure("logps_chosen", STEP, "Log-prob of the chosen answers", unit="log-prob")
LOGPS_REJECTED = Figure("logps_rejected", STEP, "Log-prob of the rejected answers",
                        unit="log-prob")
# An online RL (GRPO) step's figures (events.RL_FIELDS): no columns either; charted by
# `RL_CHARTS`, only for a job whose steps carry them.
REWARD = Figure("reward", STEP, "Reward", unit="weighted sum of the rewards")
REWARD_STD = Figure("reward_std", STEP, "Reward standard deviation", unit="reward")
REWARD_MEANS = Figure("reward_means", STEP, "Each reward's mean", unit="score")
KL = Figure("kl", STEP, "KL to the reference", unit="k3 estimate per token")
CLIP_RATIO_LOW = Figure("clip_ratio_low", STEP, "Clipped below", unit="share of tokens")
CLIP_RATIO_HIGH = Figure("clip_ratio_high", STEP, "Clipped above", unit="share of tokens")
COMPLETION_LENGTH = Figure("completion_length", STEP, "Completion length", unit="tokens")
COMPLETION_LENGTH_MIN = Figure("completion_length_min", STEP, "Shortest completion",
                               unit="tokens")
COMPLETION_LENGTH_MAX = Figure("completion_length_max", STEP, "Longest completion",
                               unit="tokens")
SAMPLING_SECONDS = Figure("sampling_seconds", STEP, "Sampling", unit="s")
SCORING_SECONDS = Figure("scoring_seconds", STEP, "Scoring", unit="s")
TRAINING_SECONDS = Figure("training_seconds", STEP, "Training", unit="s")
EVAL_LOSS = Figure("eval_loss", EVAL, "Eval loss", column="eval_loss")
ALLOCATED_MB = Figure("allocated_mb", MEMORY, "Accelerator memory allocated", unit="MiB",
                      column="allocated_mb")
RSS_MB = Figure("rss_mb", MEMORY, "Process RSS", unit="MiB", column="rss_mb")
PEAK_RESERVED_MB = Figure("peak_reserved_mb", MEMORY, "Peak reserved memory", unit="MiB",
                          column="peak_reserved_mb")
GPU_USED_MB = Figure("used_mb", GPU_SAMPLE, "Memory per GPU", unit="MiB")
GPU_UTILIZATION_PERCENT = Figure("utilization_percent", GPU_SAMPLE, "GPU utilisation", unit="%")
PROCESS_RSS_MB = Figure("rss_mb", PROCESS_SAMPLE, "Memory per rank process (RSS)", unit="MiB")
PROCESS_CPU_PERCENT = Figure("cpu_percent", PROCESS_SAMPLE, "CPU per rank process", unit="%")

# In this order: the columns of each kind are read (and indexed) in it.
FIGURES: tuple[Figure, ...] = (
    LOSS, TOKENS_PER_SECOND, LEARNING_RATE, GRAD_NORM, STEP_SECONDS, MFU,
    REWARDS_CHOSEN, REWARDS_REJECTED, REWARD_MARGIN, REWARD_ACCURACY, LOGPS_CHOSEN,
    LOGPS_REJECTED, REWARD, REWARD_STD, REWARD_MEANS, KL, CLIP_RATIO_LOW, CLIP_RATIO_HIGH,
    COMPLETION_LENGTH, COMPLETION_LENGTH_MIN, COMPLETION_LENGTH_MAX, SAMPLING_SECONDS,
    SCORING_SECONDS, TRAINING_SECONDS, EVAL_LOSS,
    ALLOCATED_MB, RSS_MB, PEAK_RESERVED_MB,
    GPU_USED_MB, GPU_UTILIZATION_PERCENT, PROCESS_RSS_MB, PROCESS_CPU_PERCENT,
)
LIVE_STEP_FIGURES: tuple[Figure, ...] = tuple(figure for figure in FIGURES if figure.live_chart)


@dataclass(frozen=True)
class FigureChart:
    """A chart of several figures of one event kind by step, a named line each (the chosen
    and the rejected answers' rewards on one chart)."""

    name: str  # its key: the page's element ids ("job-rewards-plot"), the Compare series
    title: str
    y_title: str
    lines: tuple[tuple[str, Figure], ...]  # (the line's name, the figure it draws)
    objective: str = "dpo"  # whose steps carry its figures
    # A figure holding {label: value}: a line each label, beside `lines` (grpo's each
    # reward). Drawn on the job page; Compare draws the fixed lines only.
    keyed: Figure | None = None
    # Drawn only for a job that holds a reference model (grpo's KL: beta above 0).
    reference_only: bool = False

    @property
    def figures(self) -> tuple[Figure, ...]:
        return tuple(figure for _name, figure in self.lines)


# The standard preference-tuning charts (TRL's rewards/chosen, rewards/rejected,
# rewards/margins, rewards/accuracies, logps/chosen, logps/rejected), in the page's order.
REWARDS_CHART = FigureChart("rewards", "Rewards", REWARD_UNIT,
                            (("chosen", REWARDS_CHOSEN), ("rejected", REWARDS_REJECTED)))
REWARD_MARGIN_CHART = FigureChart("reward_margin", REWARD_MARGIN.title, REWARD_MARGIN.unit,
                                  (("margin", REWARD_MARGIN),))
REWARD_ACCURACY_CHART = FigureChart("reward_accuracy", REWARD_ACCURACY.title,
                                    REWARD_ACCURACY.unit, (("accuracy", REWARD_ACCURACY),))
LOGPS_CHART = FigureChart("logps", "Log-probs", "summed log-prob of the answer",
                          (("chosen", LOGPS_CHOSEN), ("rejected", LOGPS_REJECTED)))
PREFERENCE_CHARTS: tuple[FigureChart, ...] = (REWARDS_CHART, REWARD_MARGIN_CHART,
                                              REWARD_ACCURACY_CHART, LOGPS_CHART)
# An online RL job's: the reward with each reward's mean, the KL to the reference (beta
# above 0), completion lengths, clip ratios, and where a step's time goes.
RL_CHARTS: tuple[FigureChart, ...] = (
    FigureChart("reward", REWARD.title, REWARD.unit, (("reward", REWARD),), objective="grpo",
                keyed=REWARD_MEANS),
    FigureChart("kl", KL.title, KL.unit, (("kl", KL),), objective="grpo", reference_only=True),
    FigureChart("completion_length", COMPLETION_LENGTH.title, COMPLETION_LENGTH.unit,
                (("mean", COMPLETION_LENGTH), ("min", COMPLETION_LENGTH_MIN),
                 ("max", COMPLETION_LENGTH_MAX)), objective="grpo"),
    FigureChart("clip_ratio", "Clip ratio", CLIP_RATIO_LOW.unit,
                (("below", CLIP_RATIO_LOW), ("above", CLIP_RATIO_HIGH)), objective="grpo"),
    FigureChart("step_time_split", "Step time: sampling, scoring, training", "s",
                (("sampling", SAMPLING_SECONDS), ("scoring", SCORING_SECONDS),
                 ("training", TRAINING_SECONDS)), objective="grpo"),
)
# Every objective's own charts, drawn for a job whose steps carry their figures (Compare
# draws each chart's fixed lines, not its keyed ones).
OBJECTIVE_CHARTS: tuple[FigureChart, ...] = PREFERENCE_CHARTS + RL_CHARTS


def figures_of(kind: str) -> tuple[Figure, ...]:
    return tuple(figure for figure in FIGURES if figure.kind == kind)


def columns_of(kind: str) -> tuple[str, ...]:
    """The metric_points Float columns of an event kind's figures, in table order."""
    return tuple(figure.column for figure in figures_of(kind) if figure.column is not None)


# Every Float column of metric_points, as the store fills them and migration 0005 made them.
FIGURE_COLUMNS: tuple[str, ...] = tuple(figure.column for figure in FIGURES
                                        if figure.column is not None)


def rank_memory_mb(row: dict[str, Any]) -> float | None:
    """What a memory chart draws for a rank's reading: the accelerator memory allocated,
    else (a CPU rank) the process RSS."""
    allocated = row.get(ALLOCATED_MB.field)
    return allocated if allocated is not None else row.get(RSS_MB.field)
