"""The sampler on real processes (two ranks, one with a helper child) and on a hand-written
fake NVML where no GPU exists."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from worker.sampler import JobSampler, visible_gpu_ids

MB = 1024 * 1024
# A rank holding ~60 MB, which starts a helper (inheriting RANK), then sleeps.
RANK_SCRIPT = """
import subprocess, sys, time
ballast = bytearray(60 * 1024 * 1024)
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def two_ranks():
    processes = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        processes.append(subprocess.Popen([sys.executable, "-c", RANK_SCRIPT], env=env,
                                          stdout=subprocess.PIPE, text=True))
    for process in processes:
        assert process.stdout.readline().strip() == "ready"
    yield processes
    import psutil
    for process in processes:
        try:
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
        except psutil.NoSuchProcess:
            pass
        process.kill()
        process.wait()


def _family_pids(processes) -> list[int]:
    import psutil
    pids = []
    for process in processes:
        pids += [process.pid, *(child.pid for child in psutil.Process(process.pid).children())]
    return pids


def test_each_rank_is_sampled_once_with_its_rss_and_cpu(two_ranks):
    sampler = JobSampler(host="here", gpu_ids=None, nvml=None)
    pids = [os.getpid(), *_family_pids(two_ranks)]  # ourselves: no RANK, so not a rank
    samples = sampler.sample_if_due(pids)
    assert [(sample["source"], sample["index"]) for sample in samples] == [("process", 0),
                                                                           ("process", 1)]
    for sample, rank in zip(samples, two_ranks):
        assert sample["host"] == "here"
        assert sample["values"]["pid"] == rank.pid  # the rank, not its helper
        assert sample["values"]["rss_mb"] > 60
        assert sample["values"]["cpu_percent"] >= 0


def test_samples_at_most_once_an_interval(two_ranks):
    now = [100.0]
    sampler = JobSampler(host="here", gpu_ids=None, nvml=None, interval_seconds=1.0,
                         clock=lambda: now[0])
    pids = _family_pids(two_ranks)
    assert len(sampler.sample_if_due(pids)) == 2
    now[0] += 0.5
    assert sampler.sample_if_due(pids) == []
    now[0] += 0.6
    assert len(sampler.sample_if_due(pids)) == 2


def test_a_process_that_ended_is_skipped(two_ranks):
    sampler = JobSampler(host="here", gpu_ids=None, nvml=None)
    import psutil
    pids = _family_pids(two_ranks)
    for child in psutil.Process(two_ranks[1].pid).children():
        child.kill()
    two_ranks[1].kill()
    two_ranks[1].wait()
    time.sleep(0.05)
    assert [sample["index"] for sample in sampler.sample_if_due(pids)] == [0]


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """Two 80 GB cards; the second does not report power."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self):
        self.cards = {0: SimpleNamespace(uuid="GPU-aaa", used=10 * 1024 * MB, power_mw=250_000),
                      1: SimpleNamespace(uuid="GPU-bbb", used=20 * 1024 * MB, power_mw=None)}

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index not in self.cards:
            raise FakeNvmlError("Invalid Argument")
        return self.cards[index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return next(card for card in self.cards.values() if card.uuid == uuid)

    def nvmlDeviceGetMemoryInfo(self, card):
        return SimpleNamespace(used=card.used, total=80 * 1024 * MB, free=0)

    def nvmlDeviceGetUtilizationRates(self, card):
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetPowerUsage(self, card):
        if card.power_mw is None:
            raise FakeNvmlError("Not Supported")
        return card.power_mw

    def nvmlDeviceGetTemperature(self, card, sensor):
        return 61


def test_every_gpu_is_sampled_through_nvml_when_none_is_named():
    samples = JobSampler(host="gpu-host", gpu_ids=None, nvml=FakeNvml()).sample_if_due([])
    assert [(sample["source"], sample["index"]) for sample in samples] == [("gpu", 0), ("gpu", 1)]
    assert samples[0]["values"] == {"used_mb": 10240.0, "total_mb": 81920.0,
                                    "utilization_percent": 87, "power_w": 250.0,
                                    "temperature_c": 61}
    assert samples[1]["values"]["power_w"] is None  # not supported: no figure, no failure


def test_only_the_visible_gpus_are_sampled():
    sampler = JobSampler(host="h", gpu_ids=visible_gpu_ids("1"), nvml=FakeNvml())
    assert [sample["index"] for sample in sampler.sample_if_due([])] == [1]
    by_uuid = JobSampler(host="h", gpu_ids=visible_gpu_ids("GPU-bbb"), nvml=FakeNvml())
    assert [s["values"]["used_mb"] for s in by_uuid.sample_if_due([])] == [20480.0]


def test_a_missing_gpu_means_no_gpu_samples_not_a_crash():
    sampler = JobSampler(host="h", gpu_ids=[5], nvml=FakeNvml())
    assert sampler.sample_if_due([]) == []


def test_visible_gpu_ids():
    assert visible_gpu_ids(None) is None
    assert visible_gpu_ids("") == []
    assert visible_gpu_ids("0, 2") == [0, 2]
    assert visible_gpu_ids("1,-1,2") == [1]
    assert visible_gpu_ids("GPU-abc,MIG-def") == ["GPU-abc", "MIG-def"]
