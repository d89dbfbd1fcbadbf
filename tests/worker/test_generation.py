"""worker/generation.py's WarmGenerator: its generation process outlives a request by
TUNEDECK_GENERATION_WARM_SECONDS and no more, a request keeps it warm, and a process on a
GPU is stopped when a job may claim it (one on the CPU is kept)."""
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
        assert generator.pid is not None
        generator.release_gpus()
        assert generator.pid is None
    finally:
        generator.stop()
