"""Placement as pure functions: broker routing, who serves a job, which GPUs it gets."""
from tunedeck.cluster.placement import (WorkerView, broker_queue_for, broker_queues_of_worker,
                                        can_ever_fit, choose_gpus, free_gpus, room_for, serves,
                                        waiting_reason)
from tunedeck.spec.job_spec import JobSpec

EIGHT_GPUS = WorkerView(name="default@gpu-1", host="gpu-1", queues=("default",),
                        gpu_indices=tuple(range(8)), concurrency=8)
CPU_ONLY = WorkerView(name="cpu@box", host="box", queues=("cpu",), gpu_indices=None,
                      concurrency=1)


def spec(**fields) -> JobSpec:
    return JobSpec(max_steps=1, **fields)


def test_a_job_goes_to_its_host_or_its_queue_and_the_worker_consumes_both():
    assert broker_queue_for(spec()) == "tunedeck.queue.default"
    assert broker_queue_for(spec(queue="a100")) == "tunedeck.queue.a100"
    assert broker_queue_for(spec(queue="a100", host="gpu-7")) == "tunedeck.host.gpu-7"
    consumed = broker_queues_of_worker(name="w1", host="gpu-7", queues=["a100", "default"])
    assert consumed == ["tunedeck.queue.a100", "tunedeck.queue.default", "tunedeck.host.gpu-7",
                        "tunedeck.worker.w1"]


def test_serves_by_host_when_named_else_by_queue():
    assert serves(EIGHT_GPUS, spec()) and not serves(CPU_ONLY, spec())
    assert serves(CPU_ONLY, spec(queue="cpu")) and not serves(EIGHT_GPUS, spec(queue="cpu"))
    assert serves(CPU_ONLY, spec(host="box", queue="other"))
    assert not serves(EIGHT_GPUS, spec(host="box"))


def test_two_four_gpu_jobs_get_disjoint_gpus_and_a_third_waits():
    first = room_for(EIGHT_GPUS, spec(num_gpus=4), running_jobs=0, held=[])
    second = room_for(EIGHT_GPUS, spec(num_gpus=4), running_jobs=1, held=[first])
    assert first == [0, 1, 2, 3] and second == [4, 5, 6, 7]
    assert room_for(EIGHT_GPUS, spec(num_gpus=1), running_jobs=2, held=[first, second]) is None
    # A freed GPU in the middle is reused: the lowest free ones go first.
    assert room_for(EIGHT_GPUS, spec(num_gpus=2), running_jobs=1, held=[[0, 1, 4, 5]]) == [2, 3]


def test_a_host_without_gpus_is_limited_by_its_job_slots_only():
    assert free_gpus(CPU_ONLY, [[0]]) is None
    assert choose_gpus(None, 4) == []
    assert room_for(CPU_ONLY, spec(num_gpus=4), running_jobs=0, held=[]) == []
    assert room_for(CPU_ONLY, spec(num_gpus=1), running_jobs=1, held=[]) is None


def test_waiting_reason_says_what_is_missing():
    assert waiting_reason(spec(queue="h100"), [EIGHT_GPUS]) == \
        "waiting: no live worker serves queue 'h100'"
    assert not can_ever_fit(EIGHT_GPUS, spec(num_gpus=16))
    assert "needs 16 GPUs on one host, and the largest worker of queue 'default' has 8" in \
        waiting_reason(spec(num_gpus=16), [EIGHT_GPUS])
    assert waiting_reason(spec(num_gpus=4), [EIGHT_GPUS]) == \
        "waiting for 4 free GPU(s) on a worker of queue 'default'"
    assert waiting_reason(spec(num_gpus=4), [EIGHT_GPUS], ahead=[3]) == \
        "waiting for 4 free GPU(s) on a worker of queue 'default'; job 3, queued before it, " \
        "starts first"


def test_on_a_host_without_gpus_the_reason_names_the_job_slots_and_who_holds_them():
    cpu_job = spec(queue="cpu", num_gpus=2)
    assert waiting_reason(cpu_job, [CPU_ONLY], {"cpu@box": [5]}) == \
        "waiting: the worker runs one job at a time and job 5 is running"
    two_slots = WorkerView(name="cpu@box", host="box", queues=("cpu",), gpu_indices=None,
                           concurrency=2)
    assert waiting_reason(cpu_job, [two_slots], {"cpu@box": [5, 6]}, ahead=[7, 8]) == \
        "waiting: the worker runs 2 jobs at a time and jobs 5, 6 are running; jobs 7, 8, " \
        "queued before it, start first"
    assert waiting_reason(cpu_job, [CPU_ONLY]) == \
        "waiting for a free job slot: the worker runs one job at a time"
    other = WorkerView(name="cpu@other", host="other", queues=("cpu",), gpu_indices=None,
                       concurrency=1)
    assert waiting_reason(cpu_job, [CPU_ONLY, other], {"cpu@box": [5], "cpu@other": [4]}) == \
        "waiting: every worker of queue 'cpu' is busy (jobs 4, 5 running)"


def test_a_worker_without_a_speed_options_package_gives_it_no_room_and_the_wait_says_why():
    from dataclasses import replace

    with_liger = replace(EIGHT_GPUS, speed_packages=frozenset({"liger_kernel"}))
    without = replace(EIGHT_GPUS, name="plain@gpu-2", speed_packages=frozenset())
    liger = spec(kernels="liger")
    assert room_for(with_liger, liger, running_jobs=0, held=[]) == [0]
    assert room_for(without, liger, running_jobs=0, held=[]) is None
    assert room_for(without, spec(), running_jobs=0, held=[]) == [0]
    # A worker that does not say what it has (a Slurm executor, an older worker) may take it.
    assert room_for(EIGHT_GPUS, liger, running_jobs=0, held=[]) == [0]
    both = spec(kernels="liger", attention="flash")
    assert not can_ever_fit(with_liger, both)
    assert waiting_reason(both, [with_liger, without]) == (
        "waiting: no live worker of queue 'default' has liger-kernel and flash-attn installed, "
        "which the spec's speed options need")
    assert waiting_reason(liger, [with_liger, without]) == (
        "waiting for 1 free GPU(s) on a worker of queue 'default'")
