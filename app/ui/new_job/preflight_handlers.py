"""The New job form's "Check data": the form's data fields as a preflight request, run by
the API's own policy (app/actions/preflight.py), and its answer as HTML under the dataset
field: the summary, a token-length histogram against seq_len, and examples with the
trained tokens marked (and what seq_len cuts struck through)."""
from __future__ import annotations

import html
from typing import Any

from pydantic import ValidationError

from app.actions.errors import Invalid, NotFound
from app.actions.preflight import WAIT_SECONDS, await_preflight, start_preflight
from app.auth.principal import Principal
from app.ui.new_job.form_handlers import form_to_spec_data
from app.ui.new_job.form_labels import label_fields
from tunedeck.data.preflight_request import PreflightRequest
from tunedeck.data.preflight_text import bin_label, summary_lines
from tunedeck.spec.text import format_validation_error
from tunedeck.settings import Settings

PART_TAGS = {"prompt": ("<span>", "</span>"), "trained": ("<mark>", "</mark>"),
             "cut": ("<del>", "</del>")}


def form_to_preflight_request(form: dict[str, Any]) -> tuple[PreflightRequest | None, str]:
    """(the request, "") or (None, one readable line per bad data field)."""
    try:
        return PreflightRequest.from_spec_data(form_to_spec_data(form)), ""
    except ValidationError as error:
        return None, label_fields(format_validation_error(error))


def check_form_data(form: dict[str, Any], pending: dict | None, *, database, celery_app,
                    settings: Settings, principal: Principal,
                    wait_seconds: float = WAIT_SECONDS) -> tuple[str, dict | None]:
    """(the panel's HTML, the preflight still running, if any). A second click on an
    unchanged form waits on that one rather than starting another."""
    request, problems = form_to_preflight_request(form)
    if request is None:
        return _notice("Not checked. Please fix:", problems.splitlines()), None
    asked = request.model_dump(mode="json")
    preflight_id = pending["id"] if pending and pending.get("request") == asked else None
    try:
        if preflight_id is None:
            preflight_id = start_preflight(database=database, celery_app=celery_app,
                                           settings=settings, principal=principal, request=request)
        answer = await_preflight(database=database, settings=settings, principal=principal,
                                 preflight_id=preflight_id, wait_seconds=wait_seconds)
    except Invalid as refused:
        return _notice("Not checked:", refused.messages), None
    except NotFound as missing:
        return _notice("Not checked:", [str(missing)]), None
    still_running = None if answer.finished else {"id": preflight_id, "request": asked}
    return preflight_html(answer.to_json()), still_running


def poll_data_check(pending: dict, *, database, settings: Settings,
                    principal: Principal) -> tuple[str, dict | None]:
    """The page's poll of a data check still running: its answer as it stands, at once."""
    try:
        answer = await_preflight(database=database, settings=settings, principal=principal,
                                 preflight_id=pending["id"], wait_seconds=0)
    except NotFound as missing:
        return _notice("Not checked:", [str(missing)]), None
    return preflight_html(answer.to_json()), None if answer.finished else pending


def preflight_html(answer: dict[str, Any]) -> str:
    if answer["status"] == "failed":
        return _notice(f"Data check {answer['id']} failed:", [answer["error"] or ""])
    if answer["status"] != "done":
        return _notice(f"Data check {answer['id']} is {answer['status']}:",
                       [answer.get("waiting") or "", "Press Check data again to see it."])
    report = answer["report"]
    parts = [f"<p><strong>Data check {answer['id']}</strong> (worker "
             f"{html.escape(answer['worker_name'] or '')}, {report['seconds']['total']:.1f} s)</p>",
             _list(summary_lines(report))]
    if report["warnings"]:
        parts.append(_list([f"⚠ {warning}" for warning in report["warnings"]]))
    parts.append(histogram_html(report["histogram"], caption=HISTOGRAM_CAPTIONS.get(
        report.get("objective"), HISTOGRAM_CAPTIONS["sft"])))
    parts += [example_html(example) for example in report["examples"]]
    return f'<div id="preflight-report">{"".join(parts)}</div>'


HISTOGRAM_CAPTIONS = {
    "sft": "prompt + answer tokens (red: over seq_len)",
    "dpo": "prompt + answer tokens of each side (red: over seq_len)",
    "grpo": "prompt tokens (red: past the room seq_len leaves beside max_completion_length)"}


def histogram_html(histogram: list[dict[str, Any]], *,
                   caption: str = HISTOGRAM_CAPTIONS["sft"]) -> str:
    """Every bin up to seq_len, and those over it up to the last that holds an example (a
    dataset well inside seq_len is not followed by a column of empty rows)."""
    largest = max((bin_["count"] for bin_ in histogram), default=0) or 1
    last_used_over = max((index for index, bin_ in enumerate(histogram)
                          if bin_["over_seq_len"] and bin_["count"]), default=-1)
    histogram = [bin_ for index, bin_ in enumerate(histogram)
                 if not bin_["over_seq_len"] or index <= last_used_over]
    rows = "".join(
        f"<tr><td>{bin_label(bin_)}</td><td>{bin_['count']}</td><td><div style=\"width:"
        f"{200 * bin_['count'] // largest}px;height:0.8em;background:"
        f"{'#d9534f' if bin_['over_seq_len'] else '#5b8def'}\"></div></td></tr>"
        for bin_ in histogram)
    return (f"<table><caption>{html.escape(caption)}</caption>"
            f"<tr><th>tokens</th><th>records</th><th></th></tr>{rows}</table>")


def example_html(example: dict[str, Any]) -> str:
    text = "".join(f"{PART_TAGS[segment['part']][0]}{html.escape(segment['text'])}"
                   f"{PART_TAGS[segment['part']][1]}" for segment in example["segments"])
    return (f"<p>Record {example['record']} ({html.escape(example['why'])}): "
            f"{example['tokens']} tokens, {example['trained_tokens']} trained (highlighted), "
            f"{example['cut_tokens']} cut by seq_len (struck through)</p>"
            f'<pre style="white-space:pre-wrap">{text}</pre>')


def _notice(title: str, lines: list[str]) -> str:
    return f"<p><strong>{html.escape(title)}</strong></p>{_list(lines)}"


def _list(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines if line) + "</ul>"
