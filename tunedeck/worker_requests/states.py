"""The state table of a request a worker answers: the web stores it pending, one worker
claims it (running), then it is done (with its result) or failed (with the error)."""
from __future__ import annotations

PENDING = "pending"
RUNNING = "running"
DONE = "done"
FAILED = "failed"

STATUSES = (PENDING, RUNNING, DONE, FAILED)
FINISHED = (DONE, FAILED)

ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({RUNNING}),
    RUNNING: frozenset({DONE, FAILED}),
    DONE: frozenset(),
    FAILED: frozenset(),
}


def sources_of(target: str) -> tuple[str, ...]:
    """The statuses from which `target` may be reached (the store's conditional UPDATEs
    match only these, so a second delivery or a late worker changes nothing)."""
    return tuple(source for source, targets in ALLOWED_TRANSITIONS.items() if target in targets)
