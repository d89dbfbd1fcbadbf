"""The job page's handlers: a job id (or nothing) in, plain data out."""
from __future__ import annotations

import html
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import ValidationError

from app.auth.job_access import visible_job
from app.auth.principal import Principal
from app.ui.figure_text import format_number, format_time, step_progress
from app.ui.job_ids import parse_job_id
from app.ui.job_page.job_actions import checkpoints_frame, is_resumable
from app.ui.job_page.live_charts import LiveCharts, live_charts
from app.ui.job_page.planned_memory import memory_comparison_markdown
from app.ui.job_page.step_charts import (MAX_POINTS_PER_LINE, ChartView, loss_frame,
                                         throughput_frame)
from app.views.artifacts import ARTIFACT_KINDS, artifact_summary, summary_text
from app.views.failure import FailureView, failure_view
from app.views.jobs import job_config, job_run_folder, read_job_log_tail
from app.views.log_noise import quiet_log_tail
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs.lineage import base_model, lineage
from tunedeck.db.models import Job
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.states import CANCELLED, FAILED, FINISHED_STATUSES, QUEUED, RUNNING, SUCCEEDED
from tunedeck.metrics.figures import EVAL_LOSS, LOSS, TOKENS_PER_SECOND
from tunedeck.metrics import store as metric_store
from tunedeck.metrics.series import read_job_series

LOG_TAIL_LINES = 200
ROLLOUTS_SHOWN = 5  # a GRPO job's newest kept rollouts on its page
# Lines read to find LOG_TAIL_LINES that are not library noise (app/views/log_noise.py):
# ranks' warnings can outnumber a short job's own lines many times over.
LOG_READ_LINES = 10 * LOG_TAIL_LINES
EVENT_COLUMNS = ["time", "kind", "message"]
NO_JOB_HEADLINE = "Pick a job: type its id, or click it in the Jobs tab."


@dataclass(frozen=True)
class JobPage:
    """Everything the job page shows, for one job (or the empty page when status is None)."""

    job_id: int | None
    status: str | None
    headline: str
    error: str | None = None
    loss: pd.DataFrame = field(default_factory=lambda: loss_frame([]))
    throughput: pd.DataFrame = field(default_factory=lambda: throughput_frame([]))
    log_tail: str = ""
    log_link_html: str = ""  # the whole log, once there is one
    log_hidden_lines: int = 0  # library noise left out of log_tail (the full log has it)
    events: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EVENT_COLUMNS))
    config_json: str = ""
    command_line: str = ""
    downloads_html: str = ""
    checkpoints: pd.DataFrame = field(default_factory=lambda: checkpoints_frame(None))
    memory_comparison: str = ""
    resume_hint: str = ""
    log_scale: bool = False  # the loss chart's axis
    failure: FailureView = field(default_factory=FailureView)
    live: LiveCharts = field(default_factory=LiveCharts)

    @property
    def finished(self) -> bool:
        return self.status is None or self.status in FINISHED_STATUSES

    def charts_shown(self, frame: pd.DataFrame) -> bool:
        """Whether a chart of `frame` is worth its space: while the job may still report,
        or once it has a point."""
        return not self.finished or not frame.dropna().empty

    @property
    def cancellable(self) -> bool:
        return self.status in (QUEUED, RUNNING)

    @property
    def resumable(self) -> bool:
        return is_resumable(self.status, self.checkpoints)


def load_job_page(job_id: Any, *, database, principal: Principal,
                  view: ChartView = ChartView()) -> JobPage:
    job_id = parse_job_id(job_id)
    if job_id is None:
        return JobPage(None, None, NO_JOB_HEADLINE)
    with database.transaction() as session:
        try:
            job = visible_job(session=session, principal=principal, job_id=job_id)
        except job_queries.JobNotFound:
            return JobPage(job_id, None, f"There is no job {job_id}.")
        metrics = read_job_series(session=session, job_id=job_id,  # downsampled for the charts
                                  max_points=MAX_POINTS_PER_LINE)
        if job.spec_model.objective == "grpo":
            metrics["rollouts"] = metric_store.read_rollouts(session=session, job_id=job_id,
                                                             limit=ROLLOUTS_SHOWN)
        events = job_queries.list_job_events(session=session, job_id=job_id)
        chain = [ancestor for ancestor in lineage(session, job)
                 if principal.may_see_job_of(ancestor.owner)]
        # The memory plan of a job that started from another's weights is its chain's
        # first model's (merged weights have its shape).
        planned = job.spec_model.model_copy(update={
            "model": base_model(session, job.spec_model.model)})
    train, evaluations = metrics["train"], metrics["eval"]
    spec = job.spec_model
    config_json, command_line = _config_texts(job)
    checkpoints = checkpoints_frame(job)
    log_lines = read_job_log_tail(job, LOG_READ_LINES)
    tail = quiet_log_tail(log_lines, LOG_TAIL_LINES)
    return JobPage(
        job_id=job.id, status=job.status,
        headline=_headline(job, spec, train[-1] if train else None,
                           evaluations[-1] if evaluations else None, chain=chain),
        error=job.error,
        loss=loss_frame(train, evaluations, with_eval=spec.has_eval, view=view),
        log_scale=view.log_scale,
        throughput=throughput_frame(train, view=view),
        log_tail="\n".join(tail.lines), log_hidden_lines=tail.hidden,
        log_link_html=(f'<a href="/api/jobs/{job.id}/logs/full" '
                       f'download="job-{job.id}-torchrun.log" '
                       f'id="job-log-download">Download the full log</a>' if log_lines else ""),
        events=pd.DataFrame([[format_time(event.time), event.kind, event.message]
                             for event in events], columns=EVENT_COLUMNS),
        config_json=config_json, command_line=command_line, downloads_html=downloads_html(job),
        checkpoints=checkpoints,
        resume_hint=resume_hint(job.status, spec, checkpoints),
        memory_comparison=memory_comparison_markdown(planned, metrics),
        failure=failure_view(job),
        live=live_charts(spec=planned, series=metrics, status=job.status,
                         started_at=job.started_at, finished_at=job.finished_at, view=view),
    )


def _headline(job: Job, spec: JobSpec, latest_step: dict[str, Any] | None,
              latest_eval: dict[str, Any] | None = None, chain: list[Job] = ()) -> str:
    latest_step = latest_step or {}
    loss, eval_loss, throughput = LOSS.field, EVAL_LOSS.field, TOKENS_PER_SECOND.field
    figures = [f"step {step_progress(latest_step.get('step'), spec.max_steps)}"]
    if latest_step.get(loss) is not None:
        figures.append(f"loss {format_number(latest_step[loss], '{:.4f}')}")
    if latest_eval and latest_eval.get(eval_loss) is not None:
        figures.append(f"eval loss {format_number(latest_eval[eval_loss], '{:.4f}')} "
                       f"(step {latest_eval.get('step')})")
    if latest_step.get(throughput) is not None:
        figures.append(f"{format_number(latest_step[throughput], '{:,.0f}')} "
                       f"{TOKENS_PER_SECOND.unit}")
    cancel_note = " (cancel requested)" if job.cancel_requested and job.status == RUNNING else ""
    return (f"### Job {job.id} · {html.escape(job.name)}\n"
            f"{_what_ran(job, spec)}\n\n{_lineage_line(chain)}{_tags_line(spec)}"
            f"**Status:** `{job.status}`{cancel_note} · " + " · ".join(figures))


def _what_ran(job: Job, spec: JobSpec) -> str:
    """Model, dataset, method on backend, GPUs, who submitted it and when: one line."""
    gpus = f"{spec.num_gpus} GPU(s)" + (f" x {spec.num_nodes} nodes" if spec.num_nodes > 1 else "")
    who = f"by {html.escape(job.owner)}" if job.owner else "with open access"
    # Preference tuning says which loss and reference; supervised fine-tuning is the norm.
    objective = (f"DPO ({spec.dpo.loss}, beta {spec.dpo.beta:g}"
                 + (f", reference {spec.dpo.reference}" if spec.uses_reference_model else "")
                 + ") · ") if spec.objective == "dpo" else ""
    if spec.objective == "grpo":
        rewards = ", ".join(reward.name for reward in spec.grpo.rewards)
        objective = (f"GRPO (G {spec.grpo.num_generations}, {spec.grpo.loss_type}, "
                     f"rewards {rewards}) · ")
    return (f'<span id="job-what-ran">`{html.escape(spec.model)}` on '
            f"`{html.escape(spec.dataset)}` · {objective}{spec.method} on {spec.backend} · "
            f"{gpus} · submitted {who} at {format_time(job.created_at)} UTC</span>")


def _lineage_line(chain: list[Job]) -> str:
    """The jobs whose weights this one started from, each a link to its page: "Lineage:
    #3 sft lora → #7 dpo lora → #9 grpo lora"; nothing for a job that started from a model."""
    if len(chain) < 2:
        return ""
    links = " → ".join(
        f'<a href="/?job={ancestor.id}" class="job-link">#{ancestor.id}</a> '
        f"{html.escape(ancestor.spec_model.objective)} {html.escape(ancestor.spec_model.method)}"
        for ancestor in chain)
    return f'<span id="job-lineage">Lineage: {links}</span>\n\n'


def _tags_line(spec: JobSpec) -> str:
    """The spec's tags, each as code, on a line of their own; nothing without any."""
    if not spec.tags:
        return ""
    shown = " ".join(f"`{html.escape(tag)}`" for tag in spec.tags)
    return f'<span id="job-tags">Tags: {shown}</span>\n\n'


def resume_hint(status: str | None, spec: JobSpec | None, checkpoints: pd.DataFrame) -> str:
    """Why Resume is greyed out on a job that stopped, and what makes the next one resumable."""
    if status not in (FAILED, CANCELLED) or not checkpoints.empty or spec is None:
        return ""
    if spec.checkpoint_every_steps == 0:
        return ("Resume needs a checkpoint, and this job saved none: set **checkpoint every N "
                "steps** (`checkpoint_every_steps`) for a job you may want to resume.")
    return (f"Resume needs a checkpoint: this job saves one every {spec.checkpoint_every_steps} "
            "steps and stopped before its first.")


def _config_texts(job: Job) -> tuple[str, str]:
    try:
        config = job_config(job)
    except (ValidationError, OSError, ValueError, KeyError) as error:
        return "", f"(cannot show the config: {error})"
    command = shlex.join(config["argv"])
    if "sbatch_script" in config:
        command += "\n\n" + config["sbatch_script"]
    return json.dumps(config["config"], indent=2), command


def downloads_html(job: Job) -> str:
    """Links to the artifacts a succeeded job left, each with its dtype and size (e.g.
    "BF16, 1.2 GB (9 files)"), and to the TensorBoard files of a job that reports to
    TensorBoard, whatever its status (a failed run's curves are worth reading too)."""
    run = job_run_folder(job)
    if run is None:
        return ""
    kinds = ARTIFACT_KINDS if job.status == SUCCEEDED else ("tensorboard",)
    summaries = {kind: artifact_summary(run, kind) for kind in kinds}
    if job.status != SUCCEEDED and summaries["tensorboard"] is None:
        return ""
    links = [f'<a href="/api/jobs/{job.id}/artifacts/{kind}" download="job-{job.id}-{kind}.zip" '
             f'id="job-download-{kind}">Download {_ARTIFACT_TITLES[kind]} (zip)</a> '
             f'<span id="job-download-{kind}-size">{html.escape(summary_text(summary))}</span>'
             for kind, summary in summaries.items() if summary is not None]
    if not links:
        return "<p>This job left no merged weights or adapter.</p>"
    return "<p>" + " &nbsp;·&nbsp; ".join(links) + "</p>"


_ARTIFACT_TITLES = {"merged": "merged weights", "adapter": "LoRA adapter",
                    "tensorboard": "TensorBoard files"}


def error_html(error: str | None) -> str:
    if not error:
        return ""
    return ('<div style="border:2px solid #dc2626;background:#fef2f2;color:#7f1d1d;'
            'padding:12px 16px;border-radius:8px"><strong>This job failed</strong>'
            f'<pre style="white-space:pre-wrap;margin:8px 0 0">{html.escape(error)}</pre></div>')
