"""The job state machine: the only transitions a job row may take; and the states of the
other nodes of a job on several nodes, which the writer and the readers of job rows share."""
from __future__ import annotations

QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"

STATUSES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
FINISHED_STATUSES = frozenset({SUCCEEDED, FAILED, CANCELLED})

# The states of node K > 0 of a job on several nodes (job_nodes.state).
NODE_ASSIGNED, NODE_STARTED, NODE_EXITED = "assigned", "started", "exited"

ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    QUEUED: frozenset({RUNNING, FAILED, CANCELLED}),
    # Running → queued only when its worker was lost and the spec allows a restart.
    RUNNING: frozenset({SUCCEEDED, FAILED, CANCELLED, QUEUED}),
    SUCCEEDED: frozenset(),
    # Only "Resume" takes these: the job runs again from its latest checkpoint.
    FAILED: frozenset({QUEUED}),
    CANCELLED: frozenset({QUEUED}),
}


def sources_of(target: str) -> list[str]:
    """The statuses from which `target` may be reached."""
    return [source for source, targets in ALLOWED_TRANSITIONS.items() if target in targets]


class InvalidTransition(Exception):
    def __init__(self, job_id: int, current: str, target: str):
        super().__init__(f"job {job_id} is {current}; it cannot become {target}")
        self.job_id, self.current, self.target = job_id, current, target
