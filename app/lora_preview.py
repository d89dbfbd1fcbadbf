"""What LoRA adapts on a spec's model, for `POST /api/lora-targets` and the New job form.

The answer is the trainer's own: `python -m trainer.target_preview` builds the model on the
meta device from its config.json and applies the trainer's method to it. It runs in a
subprocess kept for the web process's life, so the web process never imports torch; a web host without torch (the web image)
says that it cannot answer, and the worker runs the same check before the job takes its GPUs.
Like the memory planner, it reads a hub model's config only from the Hugging Face cache
(offline), and it never builds a model that needs its own code (trust_remote_code).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from tunedeck.job_spec import JobSpec

# Importing torch, transformers and peft is most of it (seconds; more on a busy host), paid
# once: the resolver process then answers each spec in milliseconds.
PREVIEW_TIMEOUT_SECONDS = 180
# The spec fields the answer depends on: the rest (steps, data, batch) cannot change it.
PREVIEW_FIELDS = {"model", "method", "backend", "trust_remote_code", "lora"}


class PreviewUnavailable(RuntimeError):
    """This web host cannot build models (no torch), or the resolver did not answer."""


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
    answer = resolver_for(home).ask(request)
    if "error" in answer:
        raise ValueError(f"model {spec.model}: {answer['error']}")
    return answer


class ResolverProcess:
    """One `python -m trainer.target_preview --serve` for the web process: a spec's JSON a
    line in, its answer a line out. Started on the first question and kept, so only the
    first pays the imports; started again if it died. One question at a time."""

    def __init__(self, home: Path):
        self._home = home
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def ask(self, request: dict) -> dict:
        with self._lock:
            for attempt in (1, 2):  # a resolver that died since the last question: once more
                process = self._running()
                try:
                    process.stdin.write(json.dumps(request) + "\n")
                    process.stdin.flush()
                    line = self._read_line(process)
                except (BrokenPipeError, PreviewUnavailable):
                    self._stop()
                    if attempt == 2:
                        raise PreviewUnavailable("the target resolver stopped answering") from None
                    continue
                return json.loads(line)

    def _running(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "trainer.target_preview", "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                "TUNEDECK_HOME": str(self._home)})
        return self._process

    def _read_line(self, process: subprocess.Popen) -> str:
        reply: list[str] = []
        reader = threading.Thread(target=lambda: reply.append(process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(PREVIEW_TIMEOUT_SECONDS)
        if not reply or not reply[0].strip():
            raise PreviewUnavailable(f"the target resolver gave no answer within "
                                     f"{PREVIEW_TIMEOUT_SECONDS} s")
        return reply[0]

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


_RESOLVERS: dict[Path, ResolverProcess] = {}
_RESOLVERS_LOCK = threading.Lock()


def resolver_for(home: Path) -> ResolverProcess:
    """The resolver of a TuneDeck home (a web process has one; tests have several)."""
    with _RESOLVERS_LOCK:
        return _RESOLVERS.setdefault(Path(home), ResolverProcess(Path(home)))
