"""The memory plan as the New job form shows it: a table, a stacked bar per backend, and a
warning when the chosen backend will not fit. Plain values in, plain values out."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from tunedeck.job_spec import JobSpec
from tunedeck.planner.memory_plan import STRATEGIES
from tunedeck.planner.plan_request import GpuRequest, plan_json
from tunedeck.planner.plan_text import plan_as_markdown

PLAN_PARTS = ("params", "grads", "optimizer", "activations", "other")
PLAN_FRAME_COLUMNS = ["backend", "part", "GB"]
DEFAULT_GPU_MEMORY_GB = 80.0


@dataclass(frozen=True)
class PlanView:
    markdown: str = ""
    frame: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PLAN_FRAME_COLUMNS))
    warning: str = ""  # empty when the chosen backend fits


def plan_view(spec: JobSpec, gpu_memory_gb: float | None) -> PlanView:
    """The plan for the spec's own GPU count on cards of `gpu_memory_gb`."""
    if not gpu_memory_gb or gpu_memory_gb <= 0:
        return PlanView(markdown="Set the GPU memory to see the memory plan.")
    try:
        plan = plan_json(spec, GpuRequest(memory_gb=gpu_memory_gb))
    except ValueError as error:
        return PlanView(markdown=f"No memory plan: {error}")
    rows = [[name, part, plan[name]["per_gpu_gb"][part]]
            for name in STRATEGIES for part in PLAN_PARTS]
    return PlanView(markdown=plan_as_markdown(plan),
                    frame=pd.DataFrame(rows, columns=PLAN_FRAME_COLUMNS),
                    warning=fit_warning(spec, plan))


def fit_warning(spec: JobSpec, plan: dict) -> str:
    """A warning when the spec's own backend (with its offload setting) will not fit."""
    offloaded = spec.zero2.offload_optimizer if spec.backend == "zero2" else spec.fsdp.cpu_offload
    chosen = f"{spec.backend}_offload" if offloaded else spec.backend
    verdict = plan[chosen]["fits"]
    if verdict in ("fits", "tight"):
        return ""
    needed = plan[chosen]["per_gpu_gb"]["total"]
    advice = (f"the plan recommends {plan['recommended']}" if plan["recommended"]
              else "nothing fits as it stands; see the suggested changes")
    if verdict == "not supported":
        return f"⚠ {chosen} is not supported for this job; {advice}."
    return (f"⚠ {chosen} will not fit: it needs about {needed:.1f} GB per GPU of "
            f"{plan['gpus']['memory_gb']:g} GB; {advice}.")
