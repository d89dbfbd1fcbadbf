"""The memory plan as the New job form shows it: the HTML table and advice, a stacked bar per
backend in the table's order, a warning when the chosen backend will not fit, and the
set-ups the Apply buttons put into the form. Plain values in, plain values out."""
from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import psutil

from app.actions import plan as plan_action
from app.actions.errors import Invalid
from app.auth.principal import Principal
from app.ui.new_job.form_layout import form_key
from tunedeck.cluster.host_capability import cpu_workers_for, ram_per_rank_gb
from tunedeck.cluster.placement import WorkerView
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.memory_plan import STRATEGIES, spec_strategy
from tunedeck.planner.plan_request import GpuRequest, PlanRequest
from tunedeck.planner.plan_text import PART_NAMES, on_cpu, plan_as_html, rank_word, setups
from tunedeck.settings import Settings
from tunedeck.units import GB, MB

PLAN_PARTS = ("params", "grads", "optimizer", "activations", "other")
# "size" whatever the unit, so the chart's y stays one column; PlanView.unit says which.
PLAN_FRAME_COLUMNS = ["backend", "part", "size"]
DEFAULT_GPU_MEMORY_GB = 80.0
MB_PER_GB = GB // MB  # the plan's GB are 10^9 bytes


@dataclass(frozen=True)
class PlanView:
    html: str = ""
    frame: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PLAN_FRAME_COLUMNS))
    unit: str = "GB"  # of the frame's "size"
    per: str = "GPU"  # what the figures are per: "GPU", or "rank" for CPU ranks
    order: tuple[str, ...] = STRATEGIES  # the table's rows, top to bottom: the chart's bars
    warning: str = ""  # empty when the chosen backend fits
    setups: tuple[dict, ...] = ()  # the recommended set-up first, then the alternatives
    # Per set-up, its Apply button's label; "" where the form cannot make the change.
    apply_labels: tuple[str, ...] = ()
    plan: dict | None = None  # the plan's JSON, as POST /api/plan answers for the same spec


def plan_view(spec: JobSpec, form: Mapping[str, Any], *, principal: Principal,
              settings: Settings, workers: Sequence[WorkerView] = (),
              database=None) -> PlanView:
    """The plan for the spec's own GPU count on cards of the form's GPU memory, by the same
    action as POST /api/plan (so a model the principal may not read is never read). Where
    every live worker that could take the job has no GPU (`workers`), the plan is for the
    CPU ranks they run, each with its share of the host's RAM, and the GPU memory is unused."""
    cpu_workers = cpu_workers_for(spec, workers)
    gpu_memory_gb = form.get("gpu_memory_gb")
    if not cpu_workers and (not gpu_memory_gb or gpu_memory_gb <= 0):
        return PlanView(html="<p>Set the GPU memory to see the memory plan.</p>")
    try:
        gpus = (cpu_ranks(cpu_workers, spec.num_gpus) if cpu_workers
                else GpuRequest(memory_gb=gpu_memory_gb))
        plan = plan_action.plan(principal, PlanRequest(spec=spec, gpus=gpus), settings=settings,
                                database=database)
    except (Invalid, ValueError) as error:  # ValueError: a GPU request out of range
        return PlanView(html=f"<p>No memory plan: {html.escape(str(error))}</p>")
    offered = tuple(setups(plan))
    notes = [_form_cannot(form, setup) for setup in offered]
    frame, unit = plan_frame(plan)
    return PlanView(html=plan_as_html(plan, notes), frame=frame, unit=unit, per=rank_word(plan),
                    order=tuple(plan["strategies"]), warning=fit_warning(spec, plan),
                    setups=offered,
                    apply_labels=tuple(_apply_label(form, setup) for setup in offered),
                    plan=plan)


def cpu_ranks(cpu_workers: Sequence[WorkerView], ranks_per_node: int) -> GpuRequest:
    """CPU ranks with the RAM each may use: the smallest host's (as its heartbeat says) shared
    by the ranks of a node; this host's where a heartbeat does not say."""
    ram_gb = (ram_per_rank_gb(cpu_workers, ranks_per_node)
              or psutil.virtual_memory().total / GB / ranks_per_node)
    return GpuRequest(memory_gb=float(f"{ram_gb:.3g}"), device="cpu")


def plan_frame(plan: dict) -> tuple[pd.DataFrame, str]:
    """The chart's rows, in plan["strategies"] order, and their unit: MB when even the largest
    total is under 1 GB (a tiny model's bars would be too short to see in GB), else GB."""
    largest = max(plan[name]["per_gpu_gb"]["total"] for name in plan["strategies"])
    unit, scale = ("MB", MB_PER_GB) if largest < 1 else ("GB", 1)
    rows = [[name, PART_NAMES[part], plan[name]["per_gpu_gb"][part] * scale]
            for name in plan["strategies"] for part in PLAN_PARTS]
    return pd.DataFrame(rows, columns=PLAN_FRAME_COLUMNS), unit


def fit_warning(spec: JobSpec, plan: dict) -> str:
    """A warning when the spec's own backend (with its offload setting) will not fit."""
    chosen = spec_strategy(spec)
    verdict = plan[chosen]["fits"]
    if verdict in ("fits", "tight"):
        return ""
    needed, per = plan[chosen]["per_gpu_gb"]["total"], rank_word(plan)
    memory = f"{plan['gpus']['memory_gb']:g} GB" + (" of RAM" if on_cpu(plan) else "")
    advice = (f"the plan recommends {plan['recommended']['label']}" if plan["recommended"]
              else "nothing fits as it stands; see the alternatives")
    if verdict == "not supported":
        return f"⚠ {chosen} is not supported for this job; {advice}."
    return (f"⚠ {chosen} will not fit: it needs about {needed:.1f} GB per {per} of {memory}; "
            f"{advice}.")


def missing_fields(form: Mapping[str, Any], setup: dict) -> list[str]:
    """The spec fields a set-up changes that the form has no field for (e.g. num_nodes)."""
    return [key for key in setup["spec_changes"] if form_key(key) not in form]


def apply_setup(form: Mapping[str, Any], setup: dict) -> dict[str, Any]:
    """The form's field updates that make a set-up's spec changes (those the form can make;
    missing_fields names the rest)."""
    return {form_key(key): value for key, value in setup["spec_changes"].items()
            if form_key(key) in form}


def _apply_label(form: Mapping[str, Any], setup: dict) -> str:
    """No button for a set-up the form cannot make, nor for one it already has."""
    updates = apply_setup(form, setup)
    if missing_fields(form, setup) or all(form[name] == value for name, value in updates.items()):
        return ""
    return f"Apply: {setup['label']}"


def _form_cannot(form: Mapping[str, Any], setup: dict) -> str:
    missing = missing_fields(form, setup)
    if not missing:
        return ""
    values = ", ".join(f"{key} = {setup['spec_changes'][key]}" for key in missing)
    return f"The form has no field for this: set {', '.join(missing)} in the spec ({values})."
