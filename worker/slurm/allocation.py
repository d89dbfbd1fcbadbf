"""A Slurm job as the supervision sees a launch (worker/supervision.py): `launcher.poll()`,
`stop()`, `known_pids()` of a job whose processes run on the cluster's nodes, answered from
what Slurm says of it (worker/slurm/client.py SlurmStates)."""
from __future__ import annotations

import logging
import time
from typing import Callable

from tunedeck.slurm.states import SlurmState, Verdict, verdict
from worker.slurm import client
from worker.slurm.client import SlurmError, SlurmStates

log = logging.getLogger(__name__)
# After scancel, how long to wait for Slurm to say the job ended (KillWait and the epilog
# come first) before giving up; the job is cancelled only once it has.
CANCEL_WAIT_SECONDS = 300.0


class SlurmAllocation:
    """A Slurm job as `supervise` watches a launch: `launcher.poll()` is None while Slurm
    runs it and its exit code once it ended; `stop()` is scancel, returning once Slurm
    says the job ended. It owns no local process (`known_pids` is empty)."""

    def __init__(self, slurm_job_id: str, states: SlurmStates,
                 shutdown_requested: Callable[[], bool]):
        self.slurm_job_id = slurm_job_id
        self.launcher = self
        self.returncode: int | None = None
        self.verdict: Verdict | None = None
        self.requeued = False
        self.lost = False
        self.detached = False
        self._states = states
        self._shutdown_requested = shutdown_requested

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._shutdown_requested():
            # The executor stops, the job does not: the next executor follows it again.
            self.detached = True
            self.returncode = -1
            return self.returncode
        state = self._states.state(self.slurm_job_id)
        if state is None:
            self.lost, self.returncode = True, -1
            return self.returncode
        judged = verdict(state)
        if judged.phase == "running":
            return None
        self.verdict = judged
        self.requeued = judged.phase in ("requeued", "queued")
        self.returncode = _exit_code(state) if judged.phase == "ended" else 1
        return self.returncode

    def refresh(self) -> None:
        pass

    def known_pids(self) -> list[int]:
        return []

    def stop(self, *, grace_seconds: float) -> None:
        """scancel (Slurm signals the ranks and kills them after its KillWait), then wait
        until Slurm says the job ended."""
        cancel_quietly(self.slurm_job_id)
        deadline = time.monotonic() + max(grace_seconds, CANCEL_WAIT_SECONDS)
        while time.monotonic() < deadline and self.poll() is None:
            time.sleep(0.5)
        if self.verdict is not None and self.verdict.phase in ("requeued", "queued"):
            self.requeued = False  # cancelled while requeued: it ends here

    def kill(self) -> None:
        pass


def _exit_code(state: SlurmState) -> int:
    """sacct's "1:0" (exit code : signal); squeue gives none, and 0 then means COMPLETED."""
    if not state.exit_code:
        return 0 if state.state == "COMPLETED" else 1
    code, _, signal_number = state.exit_code.partition(":")
    if signal_number not in ("", "0"):
        return -int(signal_number)
    return int(code or 0)


def cancel_quietly(slurm_job_id: str) -> None:
    try:
        client.cancel(slurm_job_id)
    except SlurmError as error:
        log.warning("scancel %s: %s", slurm_job_id, error)
