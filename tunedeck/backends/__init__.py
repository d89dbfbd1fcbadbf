"""The training backends, one module each (zero2.py, fsdp.py): its config, its run-folder
file, what a host needs to run it, what it refuses, the planner's offload switch and its
bytes per rank, and the trainer engine that runs it. Ask `backend_of(spec)` or `BACKENDS[name]`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tunedeck.backends.base import OFFLOAD_SUFFIX, Backend
from tunedeck.backends.fsdp import FSDP
from tunedeck.backends.zero2 import ZERO2

if TYPE_CHECKING:
    from tunedeck.spec.job_spec import JobSpec

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (ZERO2, FSDP)}


def backend_of(spec: JobSpec) -> Backend:
    return BACKENDS[spec.backend]


def backend_named(name: str | None) -> Backend | None:
    """None for a name that is not a backend's (the spec refuses it by its own rule)."""
    return BACKENDS.get(name)


def backend_of_strategy(strategy: str) -> Backend | None:
    """The backend of one of the planner's set-ups ("zero2", "fsdp_offload", ...); None for
    "ddp", the planner's reference, which TuneDeck does not run."""
    return BACKENDS.get(strategy.removesuffix(OFFLOAD_SUFFIX))
