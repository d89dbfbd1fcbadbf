"""What Slurm says of a job, read from `squeue` (while Slurm holds it) and `sacct` (after,
where accounting is on), and what that means for the job's row: still queued (with the
pending reason in words), running, ended (then judged from its run folder as a local job
is), failed with a kind, or requeued (a preemption: back to queued, resumed from its latest
checkpoint).

One call each for all the jobs an executor follows, never one a job: `squeue_argv` and
`sacct_argv` take every Slurm id, the parsers answer a state for each id they name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

from tunedeck.jobs.failure_kinds import NODE_FAIL, OUT_OF_MEMORY, TIMEOUT

# `|`-separated, one line a job: id, state, reason, nodes (squeue: %r %N), exit code (sacct).
SQUEUE_FORMAT = "%i|%T|%r|%N"
SACCT_FIELDS = "JobID,State,Reason,NodeList,ExitCode"

Phase = Literal["queued", "running", "ended", "failed", "requeued", "cancelled"]


@dataclass(frozen=True)
class SlurmState:
    """One job's line: its id, base state (CANCELLED of "CANCELLED by 1000"), Slurm's
    reason word (None for "None"), its nodes ("gpu-[1-2]"; None before it has any) and
    exit code ("0:0", sacct only)."""

    slurm_id: str
    state: str
    reason: str | None = None
    exit_code: str | None = None
    nodes: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What a SlurmState means for the row: its phase, the words shown (the queued
    reason, the failure's text) and, for a failure, its kind (tunedeck.jobs.failure_kinds)."""

    phase: Phase
    words: str = ""
    failure_kind: str | None = None


def squeue_argv(slurm_ids: Iterable[str]) -> list[str]:
    # Every state: a job that just ended is listed (as COMPLETED, TIMEOUT...) for
    # MinJobAge, so an executor without accounting still learns how it ended.
    return ["squeue", "-h", "--states=all", "-o", SQUEUE_FORMAT, "-j", ",".join(slurm_ids)]


def sacct_argv(slurm_ids: Iterable[str]) -> list[str]:
    # -X: the allocation's line only, not each step's.
    return ["sacct", "-n", "-P", "-X", "-o", SACCT_FIELDS, "-j", ",".join(slurm_ids)]


def parse_squeue(text: str) -> dict[str, SlurmState]:
    states = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0]:
            states[parts[0]] = SlurmState(parts[0], _base_state(parts[1]), _reason(parts[2]),
                                          nodes=_nodes(parts[3]))
    return states


def parse_sacct(text: str) -> dict[str, SlurmState]:
    states = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0] and "." not in parts[0]:
            states[parts[0]] = SlurmState(parts[0], _base_state(parts[1]), _reason(parts[2]),
                                          parts[4] or None, _nodes(parts[3]))
    return states


# Slurm's pending reasons (squeue(1) "JOB REASON CODES") in the words of the job page.
_PENDING_WORDS = {
    "Resources": "waiting for resources on partition {partition}",
    "Priority": "waiting behind higher-priority jobs on partition {partition}",
    "Dependency": "waiting for the jobs it depends on",
    "BeginTime": "waiting for its start time",
    "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "PartitionTimeLimit": "its time limit is over partition {partition}'s",
    "PartitionNodeLimit": "it asks for more nodes than partition {partition} allows",
    "PartitionDown": "partition {partition} is down",
    "PartitionInactive": "partition {partition} is inactive",
    "ReqNodeNotAvail": "a node it needs is unavailable (down, drained or reserved)",
    "Reservation": "waiting for its reservation",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "no node has what it asks for (CPUs, memory, GPUs or features)",
    "launch failed requeued held": "its launch failed; held by Slurm",
}


def pending_words(reason: str | None, partition: str | None = None) -> str:
    """"waiting for resources on partition gpu"; a QOS or account limit says which."""
    where = partition or "default"
    if reason is None:
        return f"waiting in Slurm's queue on partition {where}"
    if reason in _PENDING_WORDS:
        return _PENDING_WORDS[reason].format(partition=where)
    if reason.startswith("QOS"):
        return f"QOS limit ({reason})"
    if reason.startswith("Assoc"):
        return f"account limit ({reason})"
    return f"waiting in Slurm's queue: {reason}"


_RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING"}
_PENDING = {"PENDING", "SUSPENDED", "REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD"}
_REQUEUED = {"PREEMPTED", "REQUEUED", "REQUEUE_FED"}
_FAILURES = {
    "TIMEOUT": (TIMEOUT, "Slurm stopped the job at its time limit (TIMEOUT)"),
    "OUT_OF_MEMORY": (OUT_OF_MEMORY, "Slurm killed the job: out of memory (OUT_OF_MEMORY)"),
    "NODE_FAIL": (NODE_FAIL, "a node of the job failed (NODE_FAIL)"),
    "BOOT_FAIL": (NODE_FAIL, "a node of the job failed to boot (BOOT_FAIL)"),
    "DEADLINE": (TIMEOUT, "the job reached its deadline (DEADLINE)"),
}


def verdict(state: SlurmState, partition: str | None = None) -> Verdict:
    name = state.state
    if name in _PENDING:
        return Verdict("queued", pending_words(state.reason, partition))
    if name in _RUNNING:
        return Verdict("running")
    if name in _REQUEUED:
        return Verdict("requeued", f"Slurm requeued the job ({name})")
    if name == "CANCELLED":
        return Verdict("cancelled", "Slurm cancelled the job")
    if name == "COMPLETED":
        return Verdict("ended")
    if name in _FAILURES:
        kind, words = _FAILURES[name]
        return Verdict("failed", words, kind)
    # FAILED (a non-zero exit) and anything newer: judged from the run folder's evidence,
    # as a local job is; Slurm's words go with it.
    exit_words = f", exit code {state.exit_code}" if state.exit_code else ""
    return Verdict("ended", f"Slurm: {name}{exit_words}")


def _base_state(text: str) -> str:
    """"CANCELLED by 1000" -> "CANCELLED"; squeue's and sacct's spellings agree otherwise."""
    return text.strip().split(" ")[0].rstrip("+").upper()


def _nodes(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "None assigned", "(null)") else text


def _reason(text: str) -> str | None:
    text = text.strip()
    if text in ("", "None", "(null)"):
        return None
    return text.strip("()")
