"""The words for why a job failed, stored in `jobs.failure_kind`: the worker's triage
writes them, the web shows them and picks the "Retry with…" change by them."""
from __future__ import annotations

OUT_OF_MEMORY = "out_of_memory"
COMM_TIMEOUT = "comm_timeout"
NAN_LOSS = "nan_loss"
INPUT_ERROR = "input_error"
KILLED_BY_SIGNAL = "killed_by_signal"
CANCELLED = "cancelled"
WORKER_LOST = "worker_lost"
# Slurm ended the job: its time limit, or a node it ran on.
TIMEOUT = "timeout"
NODE_FAIL = "node_fail"
ERROR = "error"
FAILURE_KINDS = (OUT_OF_MEMORY, COMM_TIMEOUT, NAN_LOSS, INPUT_ERROR, KILLED_BY_SIGNAL,
                 CANCELLED, WORKER_LOST, TIMEOUT, NODE_FAIL, ERROR)


def failure_label(kind: str | None, rank: int | None) -> str:
    """"out of memory (rank 1)": what the jobs table and the job page show."""
    if not kind:
        return ""
    words = kind.replace("_", " ")
    return f"{words} (rank {rank})" if rank is not None else words
