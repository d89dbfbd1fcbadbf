"""Slurm's commands, as argv lists (never a shell): sbatch, scancel, sinfo, and one squeue and
one sacct a poll for every job the executor follows (`SlurmStates`)."""
from __future__ import annotations

import logging
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tunedeck.slurm.states import (SlurmState, parse_sacct, parse_squeue, sacct_argv,
                                   squeue_argv)

log = logging.getLogger(__name__)
COMMAND_TIMEOUT_SECONDS = 60


class SlurmError(Exception):
    """A Slurm command failed; the message is Slurm's own."""


def run_slurm(argv: list[str], *, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env,
                                timeout=COMMAND_TIMEOUT_SECONDS)
    except FileNotFoundError as error:
        raise SlurmError(f"{argv[0]} is not installed on this host ({error})") from error
    except subprocess.TimeoutExpired as error:
        raise SlurmError(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_SECONDS} s") from error
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
        # Slurm's commands name themselves ("sbatch: error: ..."); say who spoke once.
        raise SlurmError(message if message.startswith(argv[0]) else f"{argv[0]}: {message}")
    return result.stdout


def submit(script: Path, *, cwd: Path, env: dict[str, str]) -> str:
    """`sbatch --parsable SCRIPT`: the new job's id. The job starts in `cwd` with `env`
    (sbatch passes its own environment on to the job)."""
    out = run_slurm(["sbatch", "--parsable", str(script)], cwd=cwd, env=env).strip()
    return out.split(";")[0]  # "id;cluster" on a federation


def cancel(slurm_job_id: str) -> None:
    run_slurm(["scancel", slurm_job_id])


@dataclass(frozen=True)
class Partition:
    """What `sinfo` says of a partition: its nodes, CPUs and GPUs a node, node states."""

    name: str
    nodes: int
    cpus_per_node: int
    gpus_per_node: int
    idle_nodes: int
    allocated_nodes: int
    max_nodes: int | None = None


def partition_info(name: str | None) -> Partition:
    """The partition (None: the default one), from one `sinfo` call."""
    argv = ["sinfo", "-h", "-o", "%P|%D|%c|%G|%T"]
    if name:
        argv += ["-p", name]
    rows = [line.split("|") for line in run_slurm(argv).splitlines() if line.count("|") == 4]
    if not rows:
        raise SlurmError(f"sinfo: no partition {name!r}" if name else "sinfo: no partition")
    default = next((row for row in rows if row[0].endswith("*")), rows[0])
    partition = default[0].rstrip("*")
    mine = [row for row in rows if row[0].rstrip("*") == partition]
    by_state: dict[str, int] = {}
    for row in mine:
        by_state[row[4].rstrip("*~#")] = by_state.get(row[4].rstrip("*~#"), 0) + int(row[1])
    return Partition(
        name=partition, nodes=sum(int(row[1]) for row in mine),
        cpus_per_node=max(_leading_int(row[2]) for row in mine),
        gpus_per_node=max(_gpus_of(row[3]) for row in mine),
        idle_nodes=by_state.get("idle", 0),
        allocated_nodes=by_state.get("allocated", 0) + by_state.get("mixed", 0))


class PartitionReader:
    """What the executor's heartbeats report of Slurm (`describe`: its partition, from sinfo),
    read at most every `max_age_seconds`."""

    def __init__(self, describe, max_age_seconds: float = 30.0):
        self._describe, self._max_age = describe, max_age_seconds
        self._read_at, self._described = float("-inf"), None

    def __call__(self) -> dict | None:
        if time.monotonic() - self._read_at >= self._max_age:
            self._read_at = time.monotonic()
            self._described = self._describe()
        return self._described


def _leading_int(text: str) -> int:
    digits = ""
    for character in text:
        if not character.isdigit():
            break
        digits += character
    return int(digits or 0)


def _gpus_of(gres: str) -> int:
    """"gpu:h100:8(S:0-1),shard:4" -> 8; "(null)" -> 0."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2:
            total += _leading_int(parts[-1])
    return total


def _squeue(ids: list[str]) -> str:
    try:
        return run_slurm(squeue_argv(ids))
    except SlurmError as error:
        # Asked about one id only, squeue fails for a job it no longer lists (several
        # ids: it lists the ones it knows).
        if "Invalid job id" in str(error):
            return ""
        raise


class SlurmStates:
    """The newest state of every Slurm job the executor follows, from one `squeue` call
    (and one `sacct` call for the ids squeue no longer lists) at most every
    `poll_seconds`, whichever job thread asks first."""

    def __init__(self, poll_seconds: float, *, accounting: bool | None = None):
        self._poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._followed: set[str] = set()
        self._states: dict[str, SlurmState] = {}
        self._asked_at = float("-inf")
        self._accounting = accounting

    def follow(self, slurm_job_id: str) -> None:
        with self._lock:
            self._followed.add(slurm_job_id)
            self._asked_at = float("-inf")  # a new job is asked about at once

    def forget(self, slurm_job_id: str) -> None:
        with self._lock:
            self._followed.discard(slurm_job_id)
            self._states.pop(slurm_job_id, None)

    def state(self, slurm_job_id: str) -> SlurmState | None:
        """None: Slurm knows no such job (squeue does not list it and sacct has no line)."""
        with self._lock:
            if time.monotonic() - self._asked_at >= self._poll_seconds:
                self._refresh()
            return self._states.get(slurm_job_id)

    def _refresh(self) -> None:
        ids = sorted(self._followed)
        if not ids:
            return
        try:
            states = parse_squeue(_squeue(ids))
            gone = [slurm_id for slurm_id in ids if slurm_id not in states]
            if gone and self._uses_accounting():
                states.update(parse_sacct(run_slurm(sacct_argv(gone))))
        except SlurmError as error:
            # Slurm's controller may be restarting: keep the last states, ask again later.
            log.warning("asking Slurm about jobs %s: %s", ",".join(ids), error)
            self._asked_at = time.monotonic()
            return
        self._states = states
        self._asked_at = time.monotonic()

    def _uses_accounting(self) -> bool:
        if self._accounting is None:
            try:
                config = run_slurm(["scontrol", "show", "config"])
            except SlurmError:
                return False
            self._accounting = "accounting_storage/none" not in config
        return self._accounting
