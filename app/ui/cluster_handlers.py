"""The Cluster tab's tables, from `app.views.cluster.cluster_overview`: plain data out."""
from __future__ import annotations

from typing import Any

import pandas as pd

from app.views.cluster import cluster_overview
from tunedeck.units import GB, MIB

WORKER_COLUMNS = ["worker", "host", "queues", "state", "last heartbeat", "resources",
                  "jobs running"]
GPU_COLUMNS = ["worker", "GPU", "model", "free GB", "used / total GB", "utilisation %", "job"]
QUEUED_COLUMNS = ["id", "name", "queue or host", "GPUs", "waiting for"]
MIB_PER_GB = GB / MIB  # the readings' MB are MiB; the page says GB (10^9 bytes), as the planner


def cluster_tables(*, database, worker_lost_seconds: float
                   ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    overview = cluster_overview(database=database, worker_lost_seconds=worker_lost_seconds)
    workers = [_worker_row(worker) for worker in overview["workers"]]
    gpus = [_gpu_row(worker["name"], gpu) for worker in overview["workers"]
            if worker["state"] == "online" for gpu in worker["gpus"] or ()]
    queued = [[job["id"], job["name"], f"host {job['host']}" if job["host"] else job["queue"],
               job["num_gpus"], job["waiting"]]
              for job in overview["queued"]]
    return (pd.DataFrame(workers, columns=WORKER_COLUMNS), pd.DataFrame(gpus, columns=GPU_COLUMNS),
            pd.DataFrame(queued, columns=QUEUED_COLUMNS))


def _worker_row(worker: dict[str, Any]) -> list[Any]:
    return [worker["name"], worker["host"], ", ".join(worker["queues"]), worker["state"],
            f"{worker['seconds_since_heartbeat']:.0f} s ago", _resources(worker),
            ", ".join(_placement(job) for job in worker["jobs"]) or "idle"]


def _placement(job: dict[str, Any]) -> str:
    node = f" node {job['node_rank']} of {job['num_nodes']}" if job["num_nodes"] > 1 else ""
    gpus = f" (GPUs {_indices(job['gpu_indices'])})" if job["gpu_indices"] else ""
    return f"job {job['id']}{node}{gpus}"


def _resources(worker: dict[str, Any]) -> str:
    gpus = worker["gpus"]
    if gpus is None:
        memory = worker.get("memory_available_mb")
        ram = f", {_gb(memory)} GB RAM free" if memory is not None else ""
        return f"no GPU: {worker.get('cpu_count')} CPU cores{ram}"
    models = sorted({gpu.get("model") or "GPU" for gpu in gpus})
    free = sum(1 for gpu in gpus if gpu.get("job_id") is None)
    return f"{len(gpus)} x {' / '.join(models)}, {free} free"


def _gpu_row(worker_name: str, gpu: dict[str, Any]) -> list[Any]:
    used, total = gpu.get("used_mb"), gpu.get("total_mb")
    return [worker_name, f"{gpu['index']} (CUDA {gpu['id']})", gpu.get("model") or "",
            _gb(gpu.get("free_mb")),
            f"{_gb(used)} / {_gb(total)}" if used is not None and total is not None else "",
            gpu.get("utilization_percent") if gpu.get("utilization_percent") is not None else "",
            f"job {gpu['job_id']}" if gpu.get("job_id") is not None else "free"]


def _gb(megabytes: float | None) -> str:
    return "" if megabytes is None else f"{megabytes / MIB_PER_GB:.1f}"


def _indices(indices: list[int]) -> str:
    return ",".join(str(index) for index in indices)
