"""worker/generation.py's WarmGenerator: its generation process outlives a request by
TUNEDECK_GENERATION_WARM_SECONDS and no more, a request keeps it warm, and a process on a
GPU is stopped when a job claims that GPU (one on the CPU, or on another GPU, is kept)."""
from __future__ import annotations

import time

from tests.trainer.conftest import builtin_model_dir, tunedeck_home  # noqa: F401 (fixtures)
from tunedeck.settings import Settings
from worker.generation import WarmGenerator

QUESTION = {"messages": [{"role": "user", "content": "2 plus 2?"}], "max_new_tokens": 2,
            "temperature": 0.0, "top_p": 1.0, "variant": "base",
            "model_source": "builtin:tiny-llama", "adapter_dir": None, "device": "cpu"}


def test_the_process_stops_once_idle_for_the_warm_seconds(tunedeck_home, builtin_model_dir):  # noqa: F811
    generator = WarmGenerator(settings=Settings(home=tunedeck_home, generation_warm_seconds=3))
    try:
        assert generator.ask(QUESTION, visible_devices="")["warm"] is False
        pid = generator.pid
        time.sleep(1.5)
        assert generator.ask(QUESTION, visible_devices="")["warm"] is True  # re-arms the timer
        time.sleep(2.0)  # 3.5 s after the first question, 2 s after the second
        assert generator.pid == pid
        generator.release_gpus()  # on the CPU: nothing a job could want
        assert generator.pid == pid
        time.sleep(2.0)
        assert generator.pid is None
        assert generator.ask(QUESTION, visible_devices="")["warm"] is False  # a fresh one
    finally:
        generator.stop()
    assert generator.pid is None


def test_a_process_on_a_gpu_is_released_for_a_job(tunedeck_home, builtin_model_dir):  # noqa: F811
    generator = WarmGenerator(settings=Settings(home=tunedeck_home))
    try:
        # No GPU here: the process sees none, and answers on the CPU as asked.
        generator.ask(QUESTION, visible_devices="0")
        pid = generator.pid
        generator.release_gpus("1,2")  # a job took other GPUs: the prompt's stays warm
        assert generator.pid == pid
        generator.release_gpus("2,0")
        assert generator.pid is None
        generator.ask(QUESTION, visible_devices="0")
        generator.release_gpus()  # any GPU (a node of a job on several nodes)
        assert generator.pid is None
    finally:
        generator.stop()


def test_a_job_claiming_the_gpu_mid_answer_stops_it_at_once(tunedeck_home, builtin_model_dir):  # noqa: F811
    import threading

    from tunedeck.services.line_server import LineServerError

    generator = WarmGenerator(settings=Settings(home=tunedeck_home))
    long_question = {**QUESTION, "max_new_tokens": 4000}
    failures: list[str] = []

    def ask_long() -> None:
        try:
            generator.ask(long_question, visible_devices="0")
        except LineServerError as error:
            failures.append(str(error))

    try:
        generator.ask(QUESTION, visible_devices="0")  # loaded: the next answer is generating
        asking = threading.Thread(target=ask_long)
        asking.start()
        time.sleep(0.5)
        started = time.monotonic()
        generator.release_gpus("0")
        asking.join(timeout=30)
        assert time.monotonic() - started < 5  # the job never waits for the answer
        assert failures == ["a training job claimed its GPU while it answered; ask again"]
        assert generator.ask(QUESTION, visible_devices="")["warm"] is False  # a fresh process
    finally:
        generator.stop()


def test_the_worker_fails_the_row_naming_weights_gone_since_the_request(database, tmp_path):
    from tunedeck.jobs import store as job_store
    from tunedeck.generation.store import GENERATIONS
    from tunedeck.generation.request import GenerationRequest
    from tunedeck.spec.job_spec import JobSpec
    from worker.generation import run_generation
    from worker.worker_identity import WorkerIdentity

    identity = WorkerIdentity(name="w1", host="box", queues=("default",), gpu_ids=None,
                              concurrency=1)
    run_dir = tmp_path / "job-1"
    run_dir.mkdir()
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run_dir),
                                   worker_host="box", worker_name="w1")
        job_store.mark_job_succeeded(session=session, job_id=job_id)
        generation_id = GENERATIONS.create(
            session=session, job_id=job_id, request=GenerationRequest.of_prompt("hi"),
            owner=None, worker_name="w1").id
    generator = WarmGenerator(settings=Settings(home=tmp_path))
    outcome = run_generation(generation_id, settings=Settings(home=tmp_path), database=database,
                             identity=identity, generator=generator)
    assert outcome == "failed" and generator.pid is None  # nothing was loaded
    with database.transaction() as session:
        row = GENERATIONS.get(session=session, request_id=generation_id)
        assert row.status == "failed" and "merged weights" in row.error
        assert str(run_dir / "merged") in row.error
