"""What the job page's "Try it" panel does: plain values in, plain values out, through the
API's own action (app/actions/generation.py). With "Compare with base", the same prompt
goes to the base model too, both stored before either is awaited, so the job's worker
answers them back to back."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from app.actions.errors import ActionError
from app.actions.generation import await_generation, start_generation
from app.actions.worker_requests import RequestAnswer
from app.auth.principal import Principal
from app.ui.job_ids import parse_job_id
from tunedeck.generation.answer_text import short_seconds, speed_text
from tunedeck.generation.request import GenerationRequest
from tunedeck.settings import Settings

VARIANT_LABELS = {"merged": "Fine-tuned (merged)", "adapter": "Fine-tuned (base + adapter)",
                  "base": "Base model"}


@dataclass(frozen=True)
class TryItAnswers:
    tuned_html: str  # the chosen variant's answer, or why there is none
    base_html: str = ""  # the base model's, with "Compare with base"
    # The generations asked for, while any has no answer yet (the panel polls them).
    waiting_ids: tuple[int, ...] = ()

    @property
    def compared(self) -> bool:
        return bool(self.base_html)


def try_prompt(job_id: Any, prompt: str, variant: str, max_new_tokens: Any, temperature: Any,
               top_p: Any, compare_with_base: bool, *, database, celery_app, settings: Settings,
               principal: Principal) -> TryItAnswers:
    job_id = parse_job_id(job_id)
    if job_id is None:
        return TryItAnswers(_note("Pick a job first."))
    try:
        request = GenerationRequest.of_prompt(
            prompt or "", variant=variant, max_new_tokens=int(max_new_tokens or 0),
            temperature=float(temperature or 0), top_p=float(top_p or 1.0))
    except ValueError as error:
        return TryItAnswers(_note(_first_problem(error)))
    variants = [request.variant]
    if compare_with_base and request.variant != "base":
        variants.append("base")
    try:
        generation_ids = [start_generation(database=database, celery_app=celery_app,
                                           settings=settings, principal=principal, job_id=job_id,
                                           request=request.model_copy(update={"variant": name}))
                          for name in variants]
    except ActionError as error:
        return TryItAnswers(_note(str(error)))
    return answers_of(generation_ids, database=database, settings=settings, principal=principal)


def answers_of(generation_ids: Any, *, database, settings: Settings, principal: Principal,
               wait_seconds: float | None = None) -> TryItAnswers:
    """The generations' answers, each awaited up to `wait_seconds` (default the setting;
    0 for the panel's poll of answers still coming)."""
    ids = tuple(generation_ids or ())
    if not ids:
        return TryItAnswers("")
    try:
        answers = [await_generation(database=database, settings=settings, principal=principal,
                                    generation_id=generation_id, wait_seconds=wait_seconds)
                   for generation_id in ids]
    except ActionError as error:
        return TryItAnswers(_note(str(error)))
    waiting = () if all(answer.finished for answer in answers) else ids
    return TryItAnswers(*(answer_html(answer) for answer in answers), waiting_ids=waiting)


def answer_html(answer: RequestAnswer) -> str:
    generation = answer.row
    title = VARIANT_LABELS[generation["variant"]]
    if generation["status"] == "done":
        body = f'<pre class="try-it-text">{html.escape(generation["text"]) or "(no text)"}</pre>'
        facts = (f'{speed_text(generation["tokens"], generation["seconds"])} '
                 f'on {generation["device"]}')
        if not generation["warm"]:
            facts += f' (model loaded in {short_seconds(generation["load_seconds"])})'
    elif generation["status"] == "failed":
        body = f'<p class="try-it-error">{html.escape(generation["error"] or "failed")}</p>'
        facts = f'generation {generation["id"]} failed'
    else:
        body = f'<p class="try-it-waiting">{html.escape(answer.waiting or "")}</p>'
        facts = (f'generation {generation["id"]} is {generation["status"]}; its answer shows '
                 f'here once the worker has it (GET /api/generations/{generation["id"]})')
    return (f'<div class="try-it-answer" data-variant="{generation["variant"]}" '
            f'data-status="{generation["status"]}"><h4>{title}</h4>{body}'
            f'<p class="try-it-facts">{html.escape(facts)}</p></div>')


def _note(message: str) -> str:
    return f'<div class="try-it-answer"><p class="try-it-error">{html.escape(message)}</p></div>'


def _first_problem(error: ValueError) -> str:
    """A pydantic error as one line naming its field ("messages: an empty message...")."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return str(error)
    problem = errors()[0]
    field = "prompt" if problem["loc"][:1] == ("messages",) else ".".join(
        str(part) for part in problem["loc"])
    return f"{field}: {problem['msg'].removeprefix('Value error, ')}"
