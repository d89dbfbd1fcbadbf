"""Spec choices no registered worker can run are refused by field, with what to pick."""
from tunedeck.cluster.host_capability import host_problems
from tunedeck.cluster.placement import WorkerView
from tunedeck.spec.job_spec import JobSpec

CPU = WorkerView(name="cpu@box", host="box", queues=("default",), gpu_indices=None,
                 concurrency=1)
GPU = WorkerView(name="gpu@g", host="g", queues=("default",), gpu_indices=(0, 1),
                 concurrency=1)
FP16_ZERO2 = JobSpec(max_steps=5, backend="zero2", precision="fp16")


def test_fp16_under_zero2_is_refused_on_cpu_only_workers_naming_what_to_pick():
    [(field, message)] = host_problems(FP16_ZERO2, [CPU])
    assert field == "precision"
    assert "no GPU" in message and "pick bf16 or fp32" in message


def test_nothing_is_refused_with_a_gpu_worker_or_with_no_worker_at_all():
    assert host_problems(FP16_ZERO2, [CPU, GPU]) == []
    assert host_problems(FP16_ZERO2, []) == []


def test_only_workers_that_could_place_the_job_count():
    other_queue_gpu = WorkerView(name="gpu@g", host="g", queues=("big",), gpu_indices=(0,),
                                 concurrency=1)
    assert [field for field, _ in host_problems(FP16_ZERO2, [CPU, other_queue_gpu])] \
        == ["precision"]
    # A job for a queue no worker serves may wait for one: nothing to judge.
    assert host_problems(FP16_ZERO2.model_copy(update={"queue": "big"}), [CPU]) == []


def test_choices_the_cpu_runs_pass():
    for precision in ("bf16", "fp32"):
        assert host_problems(JobSpec(max_steps=5, precision=precision), [CPU]) == []
    assert host_problems(JobSpec(max_steps=5, backend="fsdp", precision="fp16"), [CPU]) == []
