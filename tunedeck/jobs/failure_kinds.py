"""The words for why a job failed, stored in `jobs.failure_kind`: the worker's triage
writes them, the web shows them and picks the "Retry with…" change by them."""
from __future__ import annotations

from tunedeck.units import MB

OUT_OF_MEMORY = "out_of_memory"
COMM_TIMEOUT = "comm_timeout"
NAN_LOSS = "nan_loss"
INPUT_ERROR = "input_error"
# A Hugging Face model or dataset id the host's hub cache lacks, with HF_HUB_OFFLINE=1:
# nothing is wrong with the input, the cache is to be filled (`offline_cache_advice`).
NOT_CACHED_OFFLINE = "not_cached_offline"
# The disk under the run folder filled up: nothing is wrong with the spec; the same job
# runs once there is room (a resume too: no half checkpoint is ever the latest).
DISK_FULL = "disk_full"
KILLED_BY_SIGNAL = "killed_by_signal"
CANCELLED = "cancelled"
WORKER_LOST = "worker_lost"
# Slurm ended the job: its time limit, or a node it ran on.
TIMEOUT = "timeout"
NODE_FAIL = "node_fail"
ERROR = "error"
FAILURE_KINDS = (OUT_OF_MEMORY, COMM_TIMEOUT, NAN_LOSS, INPUT_ERROR, NOT_CACHED_OFFLINE,
                 DISK_FULL, KILLED_BY_SIGNAL, CANCELLED, WORKER_LOST, TIMEOUT, NODE_FAIL, ERROR)


def offline_cache_advice(reference: str, *, hub_cache: str, repo_type: str = "model") -> str:
    """What a host with HF_HUB_OFFLINE=1 says of a hub id its cache lacks: what it is and
    how to fill the cache (the worker's input check and the dataset reader say it alike)."""
    download = f"hf download {reference}" + ("" if repo_type == "model" else
                                              f" --repo-type {repo_type}")
    return (f"not in this host's Hugging Face cache ({hub_cache}), and HF_HUB_OFFLINE=1 "
            f"forbids downloading it: fill the cache first (`{download}` on this host with "
            "HF_HUB_OFFLINE unset, or on a machine with internet access and copy its cache "
            "here, or point HF_HOME at a filled cache), or unset HF_HUB_OFFLINE")


# What an operator can do about a full disk; a disk-full failure and a job held for room
# say it alike.
DISK_ADVICE = "free space, lower keep_checkpoints, or move TUNEDECK_HOME"
# What a job held for room on its disk waits with (worker/disk_room.py writes it as the
# job's placement note; the cluster page and the Jobs table show that note as its reason).
DISK_HOLD_WORDS = "is too small for this job"


def megabytes(byte_count: int) -> str:
    """"0.9 MB", "12,345.6 MB": free space as the disk words give it (one unit, so the
    failure's figure and the hold's compare at a glance)."""
    return f"{byte_count / MB:,.1f} MB"


def disk_full_words(folder: str, free_bytes: int | None) -> str:
    """"the disk under /runs/job-7 is full (0.9 MB free): free space, ...": the reason a
    disk-full job's row gives (`free_bytes` None: it could not be measured)."""
    free = f" ({megabytes(free_bytes)} free)" if free_bytes is not None else ""
    return f"the disk under {folder} is full{free}: {DISK_ADVICE}"


def failure_label(kind: str | None, rank: int | None) -> str:
    """"out of memory (rank 1)": what the jobs table and the job page show."""
    if not kind:
        return ""
    words = kind.replace("_", " ")
    return f"{words} (rank {rank})" if rank is not None else words
