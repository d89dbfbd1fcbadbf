"""What a rank reports while it sits before step 1: a download, the weights loading, records
tokenizing, DeepSpeed's ops compiling. Each is one "phase" (tunedeck.metrics.events): a
start line, progress lines, an end line, in the rank's metrics file.

Progress lines are throttled (at most one every `MIN_INTERVAL_SECONDS`): a download calls
`advance` once a chunk, thousands of times a second, and the worker stores every line.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

from tunedeck.metrics.events import PHASE_END, PHASE_FAILED, PHASE_PROGRESS, PHASE_START

MIN_INTERVAL_SECONDS = 0.5


class Phase:
    """`with Phase(telemetry, "tokenize", total=n, unit="records") as phase: phase.advance(k)`.
    The last line is written however the block leaves: "end", or "failed" when it raised
    (the error notice follows), so the events never show a phase still going."""

    def __init__(self, telemetry, name: str, *, total: float | None = None,
                 unit: str | None = None, message: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 min_interval: float | None = None):
        self._telemetry, self.name, self.total, self.unit = telemetry, name, total, unit
        self.message, self._clock = message, clock
        self._min_interval = MIN_INTERVAL_SECONDS if min_interval is None else min_interval
        self.done = 0
        self._started = self._last_write = None
        # huggingface_hub downloads files from a thread pool: their bars write at once.
        self._lock = threading.Lock()

    def __enter__(self) -> Phase:
        self._started = self._last_write = self._clock()
        self._write(PHASE_START)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._write(PHASE_END if exc_type is None else PHASE_FAILED)

    def advance(self, amount: float) -> None:
        self.update(self.done + amount)

    def update(self, done: float) -> None:
        self.done = done
        if self._clock() - self._last_write >= self._min_interval:
            self._write(PHASE_PROGRESS)

    def _write(self, state: str) -> None:
        with self._lock:
            now = self._clock()
            self._last_write = now
            counted = self.unit is not None
            self._telemetry.phase(phase=self.name, state=state,
                                  done=self.done if counted else None, total=self.total,
                                  unit=self.unit, elapsed=round(now - self._started, 3),
                                  message=self.message)


COMPILE_TICK_SECONDS = 5.0


@contextlib.contextmanager
def compiling_ops(telemetry, *, compiling: bool,
                  tick_seconds: float = COMPILE_TICK_SECONDS) -> Iterator[None]:
    """A "compile_ops" phase around a call that may build DeepSpeed's ops (`compiling`:
    the backend said some are missing), with a line every `tick_seconds` so the page's
    "compiling ops · 42 s" keeps counting: the build reports nothing of its own while the
    compiler runs. Nothing is written when nothing compiles."""
    if not compiling:
        yield
        return
    stopped = threading.Event()
    with Phase(telemetry, "compile_ops", min_interval=0.0) as phase:
        def tick() -> None:
            while not stopped.wait(tick_seconds):
                phase.update(0)

        ticker = threading.Thread(target=tick, name="compile-ops-ticker", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stopped.set()
            ticker.join()


def download_progress_class(telemetry):
    """A tqdm class for huggingface_hub's `tqdm_class` (which `from_pretrained` passes to
    each file's download): each file it downloads becomes a "download" phase of its bytes."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    class DownloadProgress(hub_tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # huggingface_hub names the bar after the file ("model.safetensors", or
            # "Downloading 'model.safetensors'" in some versions).
            name = str(kwargs.get("desc") or "").strip() or None
            self._phase = Phase(telemetry, "download", total=kwargs.get("total"), unit="bytes",
                                message=name)
            self._phase.__enter__()
            if kwargs.get("initial"):
                self._phase.update(kwargs["initial"])

        def update(self, n=1):
            self._phase.advance(n or 0)
            return super().update(n)

        def close(self):
            phase = self.__dict__.pop("_phase", None)
            if phase is not None:
                phase.total = self.total or phase.total
                phase.__exit__(None, None, None)
            super().close()

    return DownloadProgress


# The bar transformers 5 draws over the one pass that materialises every weight
# (core_model_loading.py: `tqdm(param_name_to_load.items(), desc="Loading weights")`), made
# through `transformers.utils.logging.tqdm`, whose `set_tqdm_hook` lets a caller build it.
LOADING_WEIGHTS_DESC = "Loading weights"


@dataclass
class _Load:
    phase: Phase
    tensor_bytes: Callable[[], dict[str, int]]
    counted: bool = False  # its pass is counted: a second bar (a sub-model's) is not


def _set_tqdm_hook():
    try:
        from transformers.utils import logging
    except ImportError:
        return None
    return getattr(logging, "set_tqdm_hook", None)


def weight_amounts(weights: list[tuple[str, object]],
                   tensor_bytes: dict[str, int]) -> tuple[list[int], str]:
    """What each weight of the loading pass counts for: the bytes of the checkpoint tensors
    it is made from (a mapping's `layer_targets` name them; a fused weight has several),
    when every one of them is in `tensor_bytes`; else 1 each, in "tensors"."""
    amounts = []
    for _, mapping in weights:
        sources = [name for names in getattr(mapping, "layer_targets", {}).values()
                   for name in names]
        if not sources or any(name not in tensor_bytes for name in sources):
            return [1] * len(weights), "tensors"
        amounts.append(sum(tensor_bytes[name] for name in sources))
    return amounts, "bytes"


def _counted(weights: list, amounts: list[int], phase: Phase) -> Iterator:
    # The loop asks for the next weight once the last is in place: count it then.
    for weight, amount in zip(weights, amounts):
        yield weight
        phase.advance(amount)


@contextlib.contextmanager
def loading_weights_progress(phase: Phase, tensor_bytes: Callable[[], dict[str, int]]
                             ) -> Iterator[None]:
    """Around `from_pretrained`: `phase` counts the weights as they land, in bytes of the
    checkpoint (`tensor_bytes()`, asked once the files are here: each tensor's size by name),
    or in tensors when those sizes are unknown. The total is set when the pass starts.

    transformers has one tqdm hook a process; it is this load's for the load's duration and
    whatever was there before is put back after. Every other bar goes to that previous hook
    (or to transformers' own bar). A rank loads one model at a time, in its own process."""
    set_tqdm_hook = _set_tqdm_hook()
    if set_tqdm_hook is None:  # another transformers: the phase says only start and end
        yield
        return
    load = _Load(phase, tensor_bytes)
    previous = None

    def bar(factory, args: tuple, kwargs: dict):
        make = previous or (lambda factory, args, kwargs: factory(*args, **kwargs))
        if load.counted or not args or kwargs.get("desc") != LOADING_WEIGHTS_DESC:
            return make(factory, args, kwargs)
        load.counted = True
        weights = list(args[0])
        amounts, unit = weight_amounts(weights, load.tensor_bytes())
        load.phase.total, load.phase.unit = sum(amounts), unit
        return make(factory, (_counted(weights, amounts, load.phase), *args[1:]),
                    {"total": len(weights), **kwargs})

    previous = set_tqdm_hook(bar)
    try:
        yield
    finally:
        set_tqdm_hook(previous)
