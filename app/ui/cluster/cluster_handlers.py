"""The Cluster tab's tables, from `app.views.cluster.cluster_overview`: plain data out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.views.cluster import cluster_overview
from tunedeck.units import GB, MIB

WORKER_COLUMNS = ["worker", "host", "queues", "state", "last heartbeat", "resources",
                  "jobs running"]
GPU_COLUMNS = ["worker", "GPU", "model", "free GB", "used / total GB", "utilisation %", "job"]
QUEUED_COLUMNS = ["id", "name", "queue or host", "GPUs", "waiting for"]
MIB_PER_GB = GB / MIB  # the readings' MB are MiB; the page says GB (10^9 bytes), as the planner


@dataclass(frozen=True)
class ClusterTables:
    workers: pd.DataFrame
    gpus: pd.DataFrame  # empty when no online worker has a GPU: `cpu_hosts` says so instead
    queued: pd.DataFrame
    cpu_hosts: str  # Markdown: each online worker without GPUs, and what that means


def cluster_tables(*, database, worker_lost_seconds: float) -> ClusterTables:
    overview = cluster_overview(database=database, worker_lost_seconds=worker_lost_seconds)
    workers = [_worker_row(worker) for worker in overview["workers"]]
    online = [worker for worker in overview["workers"] if worker["state"] == "online"]
    gpus = [_gpu_row(worker["name"], gpu) for worker in online for gpu in worker["gpus"] or ()]
    queued = [[job["id"], job["name"], f"host {job['host']}" if job["host"] else job["queue"],
               job["num_gpus"], job["waiting"]]
              for job in overview["queued"]]
    return ClusterTables(pd.DataFrame(workers, columns=WORKER_COLUMNS),
                         pd.DataFrame(gpus, columns=GPU_COLUMNS),
                         pd.DataFrame(queued, columns=QUEUED_COLUMNS),
                         _cpu_hosts([worker for worker in online if worker["gpus"] is None]))


def _cpu_hosts(workers: list[dict[str, Any]]) -> str:
    lines = []
    for worker in workers:
        if worker["executor"] == "slurm":
            lines.append(f"- **{worker['name']}**: Slurm executor on {worker['host']}, "
                         + slurm_partition_text(worker["slurm"]))
            continue
        slots = worker["concurrency"]
        at_a_time = "one at a time" if slots == 1 else f"{slots} at a time"
        lines.append(f"- **{worker['host']}** ({worker['name']}): CPU host, "
                     f"{worker.get('cpu_count') or '?'} cores; jobs run on CPU ranks, "
                     f"{at_a_time}")
    return "\n".join(lines)


def _worker_row(worker: dict[str, Any]) -> list[Any]:
    return [worker["name"], worker["host"], ", ".join(worker["queues"]), worker["state"],
            f"{worker['seconds_since_heartbeat']:.0f} s ago", _resources(worker),
            ", ".join(_placement(job) for job in worker["jobs"]) or "idle"]


def _placement(job: dict[str, Any]) -> str:
    node = f" node {job['node_rank']} of {job['num_nodes']}" if job["num_nodes"] > 1 else ""
    gpus = f" (GPUs {_indices(job['gpu_indices'])})" if job["gpu_indices"] else ""
    return f"job {job['id']}{node}{gpus}"


def slurm_partition_text(partition: dict[str, Any] | None) -> str:
    """"partition gpu: 4 nodes of 8 GPUs and 64 CPUs, 1 idle, 3 allocated"."""
    if not partition:
        return "Slurm does not answer (sinfo)"
    per_node = (f"{partition['gpus_per_node']} GPUs and " if partition["gpus_per_node"]
                else "no GPU, ") + f"{partition['cpus_per_node']} CPUs"
    return (f"partition {partition['name']}: {partition['nodes']} node(s) of {per_node}, "
            f"{partition['idle_nodes']} idle, {partition['allocated_nodes']} allocated")


def _resources(worker: dict[str, Any]) -> str:
    gpus = worker["gpus"]
    if worker["executor"] == "slurm":
        return "Slurm " + slurm_partition_text(worker["slurm"])
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
