"""Where a job may run, as pure functions: the broker queue its id is sent to, which
workers serve it, and which GPUs of a worker it gets.

Routing: every worker consumes one broker queue per job queue it serves
(`tunedeck.queue.<name>`), one for its host (`tunedeck.host.<host>`) and one of its own
(`tunedeck.worker.<name>`, for a job another worker hands on to it). A job naming a host
goes to that host's queue; otherwise to its job queue ("default" unless it names one).
The broker only carries the id: the worker that receives it checks free GPUs against
the database and claims the row, or hands the id on to a worker that has room.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Sequence

from tunedeck.spec.job_spec import JobSpec

DEFAULT_QUEUE = "default"


class Placement(Protocol):
    """Where something runs: a queue or one host (a JobSpec, a PreflightRequest)."""

    @property
    def queue(self) -> str | None: ...

    @property
    def host(self) -> str | None: ...


def job_queue(placement: Placement) -> str:
    return placement.queue or DEFAULT_QUEUE


def broker_queue_for(placement: Placement) -> str:
    """The broker queue a job's (or a preflight's) id is sent to."""
    host = placement.host
    return host_broker_queue(host) if host else queue_broker_queue(job_queue(placement))


def queue_broker_queue(queue: str) -> str:
    return f"tunedeck.queue.{queue}"


def host_broker_queue(host: str) -> str:
    return f"tunedeck.host.{host}"


def worker_broker_queue(worker_name: str) -> str:
    return f"tunedeck.worker.{worker_name}"


def broker_queues_of_worker(*, name: str, host: str, queues: Sequence[str]) -> list[str]:
    """Every broker queue a worker consumes."""
    return [*(queue_broker_queue(queue) for queue in queues), host_broker_queue(host),
            worker_broker_queue(name)]


@dataclass(frozen=True)
class WorkerView:
    """What placement needs of a worker: its name, host, queues and GPUs (None on a host
    without GPUs, where ranks run on the CPU and only `concurrency` limits it)."""

    name: str
    host: str
    queues: tuple[str, ...]
    gpu_indices: tuple[int, ...] | None
    concurrency: int
    # A Slurm executor's partition (what its heartbeat read from sinfo); None: a local worker.
    slurm: "SlurmPartitionView | None" = None
    # The speed options' packages (tunedeck.spec.job_spec.SPEED_PACKAGES) its Python environment
    # has, by import name; None: not said (a Slurm executor's nodes, an older worker).
    speed_packages: frozenset[str] | None = None
    # The host's RAM in MiB, as its heartbeat read it; None: not said (an older worker).
    memory_total_mb: float | None = None


@dataclass(frozen=True)
class SlurmPartitionView:
    """A Slurm executor's partition: its nodes and what each has."""

    name: str
    nodes: int
    gpus_per_node: int
    cpus_per_node: int

    @classmethod
    def of(cls, described: dict | None) -> "SlurmPartitionView | None":
        if not described:
            return None
        return cls(name=str(described["name"]), nodes=int(described["nodes"]),
                   gpus_per_node=int(described["gpus_per_node"]),
                   cpus_per_node=int(described["cpus_per_node"]))


def serves(worker: WorkerView, placement: Placement) -> bool:
    host = placement.host
    return worker.host == host if host else job_queue(placement) in worker.queues


def free_gpus(worker: WorkerView, held: Iterable[Sequence[int] | None]) -> list[int] | None:
    """The worker's GPUs no running job holds (None: a host without GPUs)."""
    if worker.gpu_indices is None:
        return None
    taken = {index for indices in held for index in (indices or ())}
    return [index for index in worker.gpu_indices if index not in taken]


def choose_gpus(free: Sequence[int] | None, count: int) -> list[int] | None:
    """The GPUs a job needing `count` gets (the lowest free ones), [] on a host without
    GPUs, or None when too few are free now."""
    if free is None:
        return []
    return sorted(free)[:count] if len(free) >= count else None


def has_speed_packages(worker: WorkerView, spec: JobSpec) -> bool:
    """Whether the worker's environment has every package the spec's speed options need;
    a worker that does not say (a Slurm executor, an older worker) is given the benefit, and
    its ranks refuse what they cannot run."""
    return worker.speed_packages is None or all(
        package.import_name in worker.speed_packages for package in spec.speed_packages)


def can_ever_fit(worker: WorkerView, spec: JobSpec) -> bool:
    """Whether the job would fit on this worker with every GPU free."""
    return has_speed_packages(worker, spec) and (
        worker.gpu_indices is None or len(worker.gpu_indices) >= spec.num_gpus)


def room_for(worker: WorkerView, spec: JobSpec, *, running_jobs: int,
             held: Iterable[Sequence[int] | None]) -> list[int] | None:
    """The GPUs this worker can give the job now, or None when it has no room (all its
    job slots busy, or too few GPUs free)."""
    if running_jobs >= worker.concurrency or not has_speed_packages(worker, spec):
        return None
    return choose_gpus(free_gpus(worker, held), spec.num_gpus)


def waiting_reason(spec: JobSpec, workers: Sequence[WorkerView],
                   running: Mapping[str, Sequence[int]] | None = None,
                   ahead: Sequence[int] = ()) -> str:
    """Why a queued job is not running yet, in words for its page. `running`: the jobs each
    worker runs, by worker name; `ahead`: older queued jobs that start first."""
    wanted, nodes = spec.num_gpus, spec.num_nodes
    where = f"host {spec.host}" if spec.host else f"queue {job_queue(spec)!r}"
    serving = [worker for worker in workers if serves(worker, spec)]
    if not serving:
        return f"waiting: no live worker serves {where}"
    fitting = [worker for worker in serving if can_ever_fit(worker, spec)]
    if not fitting and not any(has_speed_packages(worker, spec) for worker in serving):
        packages = " and ".join(package.pip_name for package in spec.speed_packages)
        return (f"waiting: no live worker of {where} has {packages} installed, which the "
                f"spec's speed options need")
    if not fitting:
        largest = max(len(worker.gpu_indices or ()) for worker in serving)
        return (f"waiting: the job needs {wanted} GPUs on one host, and the largest worker of "
                f"{where} has {largest}; lower num_gpus or add a bigger worker")
    if nodes > 1 and len(fitting) < nodes:
        return (f"waiting: the job runs on {nodes} nodes, one worker each, and {len(fitting)} "
                f"live worker(s) of {where} can hold a node of {wanted} GPU(s)")
    if nodes > 1:
        return f"waiting for {nodes} workers of {where} with {wanted} free GPU(s) each"
    first = f"; {_jobs(ahead)}, queued before it, {_verb(ahead, 'start')} first" if ahead else ""
    if all(worker.gpu_indices is None for worker in fitting):  # CPU hosts: slots, not GPUs
        return _busy_slots(fitting, running or {}, where) + first
    return f"waiting for {wanted} free GPU(s) on a worker of {where}" + first


def _busy_slots(workers: Sequence[WorkerView], running: Mapping[str, Sequence[int]],
                where: str) -> str:
    """A host without GPUs runs `concurrency` jobs at once: which of them hold it."""
    busy = sorted(job for worker in workers for job in running.get(worker.name, ()))
    if len(workers) == 1:
        slots = workers[0].concurrency
        at_a_time = "one job at a time" if slots == 1 else f"{slots} jobs at a time"
        if not busy:
            return f"waiting for a free job slot: the worker runs {at_a_time}"
        return f"waiting: the worker runs {at_a_time} and {_jobs(busy)} {_verb(busy, 'is')} running"
    if not busy:
        return f"waiting for a free job slot on a worker of {where}"
    return f"waiting: every worker of {where} is busy ({_jobs(busy)} running)"


def _jobs(ids: Sequence[int]) -> str:
    return f"job {ids[0]}" if len(ids) == 1 else "jobs " + ", ".join(str(i) for i in ids)


def _verb(ids: Sequence[int], verb: str) -> str:
    if len(ids) == 1:
        return "is" if verb == "is" else verb + "s"
    return "are" if verb == "is" else verb
