"""What LoRA adapts on a spec's model, for `POST /api/lora-targets` and the New job form:
one action, `preview_lora_targets`, that checks the model is one the principal could train.

The answer is the trainer's own: `python -m trainer.model.target_preview` builds the model on the
meta device from its config.json and applies the trainer's method to it. It runs in a
subprocess kept for the web process's life, so the web process never imports torch; a web
host without torch (the web image) says that it cannot answer, and the worker runs the
same check before the job takes its GPUs.
Like the memory planner, it reads a hub model's config only from the Hugging Face cache
(offline), and it never builds a model that needs its own code (trust_remote_code).
"""
from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

from app.actions.errors import Invalid, Unavailable
from app.auth.principal import Principal
from app.auth.spec_access import model_access_problems
from tunedeck.spec.job_spec import JobSpec
from tunedeck.services.line_server import LineServer, LineServerError, installed_module
from tunedeck.settings import Settings

# Importing torch, transformers and peft is most of it (seconds; more on a busy host), paid
# once: the resolver process then answers each spec in milliseconds.
PREVIEW_TIMEOUT_SECONDS = 180
# The spec fields the answer depends on: the rest (steps, data, batch) cannot change it.
PREVIEW_FIELDS = {"model", "method", "backend", "trust_remote_code", "lora"}


class PreviewUnavailable(Unavailable):
    """This web host cannot build models (no torch), or the resolver did not answer."""


class ModelNotAdaptable(Invalid):
    """The trainer could not adapt the model; the message names it."""


def preview_lora_targets(principal: Principal, spec: JobSpec, *, settings: Settings) -> dict:
    """lora_targets_preview's answer for a model the principal may read: Invalid naming the
    model otherwise (nothing is read), ModelNotAdaptable when the trainer could not adapt
    it, PreviewUnavailable when this host cannot answer."""
    problems = model_access_problems(spec, principal=principal, settings=settings)
    if problems:
        raise Invalid.of_fields(problems)
    try:
        return lora_targets_preview(spec, home=settings.home_dir)
    except ValueError as error:
        raise ModelNotAdaptable([(("model",), str(error))]) from error


def lora_targets_preview(spec: JobSpec, *, home: Path) -> dict:
    """The adapted modules, expert weights, routers and trainable parameter count; a
    ValueError naming the model when the trainer could not adapt it. `home` is the
    TUNEDECK_HOME whose builtin:tiny-llama the resolver builds on."""
    if importlib.util.find_spec("torch") is None:
        raise PreviewUnavailable("this web host has no torch to build the model with; the "
                                 "worker resolves the targets before the job takes its GPUs")
    if spec.trust_remote_code:
        # Building such a model runs its own Python code: never on the web host.
        raise PreviewUnavailable("a model with trust_remote_code is resolved by the worker "
                                 "only, before the job takes its GPUs")
    # The spec needs a training length to validate; one step changes no target.
    request = {**spec.model_dump(mode="json", include=PREVIEW_FIELDS), "max_steps": 1}
    try:
        answer = resolver_for(home).ask(request)
    except LineServerError as error:
        raise PreviewUnavailable(f"the target resolver did not answer: {error}") from None
    if "error" in answer:
        raise ValueError(f"model {spec.model}: {answer['error']}")
    return answer


def _resolver_server(home: Path) -> LineServer:
    """`python -m trainer.model.target_preview --serve` for one TuneDeck home (whose
    builtin:tiny-llama it builds on), offline like the planner."""
    return LineServer(installed_module("trainer.model.target_preview", "--serve"),
                      env={**os.environ, "HF_HUB_OFFLINE": "1", "TUNEDECK_HOME": str(home)},
                      timeout_seconds=PREVIEW_TIMEOUT_SECONDS)


_RESOLVERS: dict[Path, LineServer] = {}
_RESOLVERS_LOCK = threading.Lock()


def resolver_for(home: Path) -> LineServer:
    """The resolver of a TuneDeck home, kept for the web process's life (a web process has
    one home; tests have several): only its first answer pays the imports."""
    with _RESOLVERS_LOCK:
        if Path(home) not in _RESOLVERS:
            _RESOLVERS[Path(home)] = _resolver_server(Path(home))
        return _RESOLVERS[Path(home)]
