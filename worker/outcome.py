"""What a worker's task for a job id ended as: how a run here ended, or why the id did not
run here. Not a job status (those are tunedeck/jobs/states.py, the row's state machine):
an outcome is what happened on this worker. Its values are the strings the worker logged
before it had a type for them, so several are spelled like the job status they mirror."""
from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    # A run of the job here ended so (node 0's worker records it on the row), or the job
    # had already ended so when its id arrived.
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # The sweep gave the job up while it ran here (this worker's heartbeats stopped
    # reaching the database): it is failed or queued for another worker, not ours to record.
    TAKEN_AWAY = "taken_away"
    # The id did not run here: no such job; the job waits for room, or went on to a
    # worker that has it; another worker runs it.
    MISSING = "missing"
    LEFT_QUEUED = "queued"
    RUNNING_ELSEWHERE = "running"
    # Node K > 0 of a job on several nodes: not started (the job no longer runs, or the
    # node is not this worker's), or its torchrun exited (node 0's worker judges the job).
    NOT_STARTED = "not started"
    EXITED = "exited"

    def __str__(self) -> str:
        return self.value

    @property
    def job_finished(self) -> bool:
        """The job has ended (here, or before its id arrived)."""
        return self in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.CANCELLED)

    @classmethod
    def of_unclaimed(cls, job_status: str | None) -> "Outcome":
        """Why an id this worker did not claim did not run here, from the job's status
        when the claim read it (None: no such job)."""
        return cls.MISSING if job_status is None else cls(job_status)
