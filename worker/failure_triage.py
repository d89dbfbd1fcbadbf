"""Why a job ended, decided from what the worker knows: the cancel flag, a shutdown, the
preflight's problems, torchrun's return code, the ranks' error notices, torchrun's log, and
the free space left under the run folder.

Pure: text and numbers in, a `FailureReason` out, so every rule is tested on real texts.
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field, replace

from tunedeck.jobs.failure_kinds import (CANCELLED, COMM_TIMEOUT, DISK_FULL, ERROR, INPUT_ERROR,
                                     KILLED_BY_SIGNAL, NAN_LOSS, NODE_FAIL, NOT_CACHED_OFFLINE,
                                     OUT_OF_MEMORY, TIMEOUT, WORKER_LOST, disk_full_words,
                                     failure_label)
from tunedeck.units import MB

# Patterns per kind, checked in this order: a rank that ran out of memory makes its peers
# time out, so the timeout is the symptom and the memory the cause.
_PATTERNS = {
    # First: its traceback is an OSError naming a path, which would read as an input error.
    # Python's and Rust's (safetensors) words for ENOSPC and EDQUOT, and torch's own when its
    # zip writer (torch.save, each torch.distributed.checkpoint shard) meets a full disk:
    # "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", or
    # "PytorchStreamWriter failed writing file data/0: file write failed".
    DISK_FULL: re.compile(r"No space left on device|\bENOSPC\b|\[Errno 28\]|os error 28|"
                          r"Disk quota exceeded|\bEDQUOT\b|\[Errno 122\]|"
                          r"PytorchStreamWriter failed writing|unexpected pos \d+ vs \d+"),
    OUT_OF_MEMORY: re.compile(r"OutOfMemoryError|CUDA out of memory|\bMemoryError\b|"
                              r"Cannot allocate memory|out of memory on rank", re.IGNORECASE),
    NAN_LOSS: re.compile(r"loss became (nan|inf|-inf)\b"),
    # Before input errors: the worker's check and the dataset reader say it of a hub id the
    # cache lacks offline; transformers' and huggingface_hub's own words when a rank meets one.
    NOT_CACHED_OFFLINE: re.compile(r"HF_HUB_OFFLINE=1 forbids downloading|"
                                   r"couldn't find them in the cached files|"
                                   r"outgoing traffic has been disabled"),
    # An error that names a path or a data file: not every ValueError is the input's fault.
    INPUT_ERROR: re.compile(r"(?:^|\]:\s*)(FileNotFoundError|ValueError|IsADirectoryError|"
                            r"NotADirectoryError|OSError|JSONDecodeError)\b.*"
                            r"(/\S+|\S+\.(jsonl|json|csv|parquet|safetensors|bin|yaml)\b)",
                            re.MULTILINE),
    COMM_TIMEOUT: re.compile(r"Watchdog caught collective operation timeout|NCCL timeout|"
                             r"Timed out waiting|Connection closed by peer|"
                             r"DistBackendError|ProcessGroupNCCL.*[Tt]imeout"),
}
_RANK_IN_MESSAGE = re.compile(r"\brank (\d+)\b")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:", re.MULTILINE)
# "GPU 0 has a total capacity of 79.15 GiB of which 1.2 GiB is free" and the trainer's own
# "(allocated 3.20 GB, reserved 4.00 GB)".
_MEMORY_FIGURES = re.compile(r"\((allocated [\d.]+ GB, reserved [\d.]+ GB)\)|"
                             r"(Tried to allocate [\d.]+ [GMK]iB)|"
                             r"(total capacity of [\d.]+ [GMK]iB of which [\d.]+ [GMK]iB is free)|"
                             r"(you tried to allocate \d+ bytes)")
# torchrun's failure report, one block a failed rank:
#   rank      : 1 (local_rank: 1)
#   exitcode  : -9 (pid: 30936)  (SIGKILL)
_RANK_EXIT = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_ROOT_CAUSE_MARK = "Root Cause (first observed failure)"
_KILL_SIGNALS = (signal.SIGKILL, signal.SIGTERM)
# Free space under the run folder after a failure below which the disk is taken to be why,
# whatever the texts say: the ranks' notices and torchrun's log are written on that disk,
# so a full one may have kept them from saying it.
DISK_FULL_FREE_BYTES = 32 * MB
# The kinds a notice names as the cause, over a peer's timeout or a broken connection.
_ROOT_CAUSE_KINDS = (DISK_FULL, OUT_OF_MEMORY, NAN_LOSS, INPUT_ERROR, NOT_CACHED_OFFLINE)


@dataclass(frozen=True)
class FailureEvidence:
    cancelled: bool = False
    stopped_by_shutdown: bool = False
    input_problems: tuple[str, ...] = ()
    returncode: int | None = None
    # (time, rank, message) of each error notice the ranks wrote.
    error_notices: tuple[tuple[float, int, str], ...] = ()
    log_tail: str = ""
    # The run folder, and the bytes still free on its disk once the job ended (None: not
    # measured).
    run_dir: str = ""
    free_bytes: int | None = None


@dataclass(frozen=True)
class FailureReason:
    kind: str
    rank: int | None = None
    detail: str = ""  # e.g. the memory the rank had, the signal's name

    @property
    def label(self) -> str:
        """"out of memory (rank 1)": what the jobs table shows."""
        return failure_label(self.kind, self.rank)


@dataclass(frozen=True)
class RankExit:
    rank: int
    exitcode: int
    root_cause: bool = False
    signal_name: str | None = field(default=None)


def classify_failure(evidence: FailureEvidence) -> FailureReason:
    reason = _classify(evidence)
    if reason.kind == DISK_FULL:  # the folder and the room left say more than torch's words
        return replace(reason, detail=disk_full_words(evidence.run_dir or "the run folder",
                                                      evidence.free_bytes))
    return reason


def _classify(evidence: FailureEvidence) -> FailureReason:
    if evidence.cancelled:
        return FailureReason(CANCELLED)
    if evidence.stopped_by_shutdown:
        return FailureReason(WORKER_LOST, detail="the worker was shut down while the job ran")
    if evidence.input_problems:
        problem = evidence.input_problems[0]
        offline = _PATTERNS[NOT_CACHED_OFFLINE].search(problem)
        return FailureReason(NOT_CACHED_OFFLINE if offline else INPUT_ERROR, detail=problem)
    reasons = [_from_notice(notice) for notice in sorted(evidence.error_notices)]
    root_causes = [reason for reason in reasons if reason.kind in _ROOT_CAUSE_KINDS]
    if root_causes:
        return root_causes[0]
    if _disk_filled(evidence):
        return FailureReason(DISK_FULL)
    notice_reason = reasons[0] if reasons else None
    # A rank killed outright writes no notice; its peers then report a broken connection.
    killed = _killed(evidence.returncode, parse_rank_exits(evidence.log_tail))
    if killed:
        return killed
    if notice_reason and notice_reason.kind != ERROR:
        return notice_reason
    from_log = _from_log(evidence.log_tail)
    if from_log:
        return from_log
    if notice_reason:
        return notice_reason
    return FailureReason(ERROR, _root_cause_rank(parse_rank_exits(evidence.log_tail)))


def _disk_filled(evidence: FailureEvidence) -> bool:
    """torchrun's log says so (a rank that could not write its notice still printed its
    traceback), or the disk is all but full now."""
    low = evidence.free_bytes is not None and evidence.free_bytes < DISK_FULL_FREE_BYTES
    return low or bool(_PATTERNS[DISK_FULL].search(evidence.log_tail))


def _from_notice(notice: tuple[float, int, str]) -> FailureReason:
    _time, rank, message = notice
    kind = _kind_of(message) or ERROR
    return FailureReason(kind, rank, _detail(kind, message))


def _from_log(log_tail: str) -> FailureReason | None:
    kind = _kind_of(log_tail)
    if kind is None:
        return None
    line = next(line for line in log_tail.splitlines() if _PATTERNS[kind].search(line))
    prefix = _RANK_PREFIX.search(line) or _RANK_IN_MESSAGE.search(line)
    return FailureReason(kind, int(prefix.group(1)) if prefix else None, _detail(kind, line))


def _kind_of(text: str) -> str | None:
    return next((kind for kind, pattern in _PATTERNS.items() if pattern.search(text)), None)


def _detail(kind: str, message: str) -> str:
    if kind == OUT_OF_MEMORY:
        figures = [next(group for group in match.groups() if group)
                   for match in _MEMORY_FIGURES.finditer(message)]
        return "; ".join(figures)
    return message.strip().splitlines()[0][:200] if message.strip() else ""


def parse_rank_exits(log_tail: str) -> list[RankExit]:
    """The failed ranks of torchrun's report, the root cause marked."""
    root_at = log_tail.rfind(_ROOT_CAUSE_MARK)
    exits = []
    for match in _RANK_EXIT.finditer(log_tail):
        exitcode = int(match.group(2))
        exits.append(RankExit(int(match.group(1)), exitcode,
                              root_cause=root_at != -1 and match.start() > root_at,
                              signal_name=_signal_name(-exitcode) if exitcode < 0 else None))
    return exits


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _killed(returncode: int | None, exits: list[RankExit]) -> FailureReason | None:
    """A rank killed by SIGKILL, or the root cause killed by SIGTERM (torchrun itself sends
    SIGTERM to the survivors, so a SIGTERM elsewhere is only the clean-up)."""
    for rank_exit in sorted(exits, key=lambda exit_: not exit_.root_cause):
        kills = (signal.SIGKILL.name,) if not rank_exit.root_cause else \
            tuple(sig.name for sig in _KILL_SIGNALS)
        if rank_exit.signal_name in kills:
            return FailureReason(KILLED_BY_SIGNAL, rank_exit.rank, rank_exit.signal_name)
    if returncode is not None and -returncode in _KILL_SIGNALS:
        return FailureReason(KILLED_BY_SIGNAL, None, f"{_signal_name(-returncode)} (the launcher)")
    return None


def _root_cause_rank(exits: list[RankExit]) -> int | None:
    return next((rank_exit.rank for rank_exit in exits if rank_exit.root_cause), None)


def describe_failure(reason: FailureReason) -> str:
    """One line for the job's events: what happened, where, and the figures we have."""
    where = f" on rank {reason.rank}" if reason.rank is not None else ""
    words = {OUT_OF_MEMORY: "out of memory", COMM_TIMEOUT: "a collective timed out",
             NAN_LOSS: "the loss became NaN", INPUT_ERROR: "a model or dataset file is "
             "missing or malformed", NOT_CACHED_OFFLINE: "a Hugging Face model or dataset is "
             "not in the host's cache and HF_HUB_OFFLINE=1 forbids downloading it",
             DISK_FULL: "the disk filled up",
             KILLED_BY_SIGNAL: "killed by a signal",
             CANCELLED: "cancelled", WORKER_LOST: "the worker was lost",
             TIMEOUT: "the time limit was reached", NODE_FAIL: "a node failed", ERROR: "an error"}
    detail = f": {reason.detail}" if reason.detail else ""
    return f"failure: {words[reason.kind]}{where}{detail}"
