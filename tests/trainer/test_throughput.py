"""The training loop's throughput summary: what `bench/overhead.py` and
`bench/telemetry_overhead.py` read back from a run's output."""
import importlib.util
import sys
from pathlib import Path

from trainer.throughput import Throughput

TRAINER_RUNS = Path(__file__).resolve().parents[2] / "bench" / "trainer_runs.py"


def test_the_first_step_is_left_out_and_telemetry_time_is_summed():
    throughput = Throughput(first_step=1)
    throughput.add(step=1, tokens=100, seconds=5.0, telemetry_seconds=0.5)  # one-off costs
    throughput.add(step=2, tokens=100, seconds=0.2, telemetry_seconds=0.001)
    throughput.add(step=3, tokens=100, seconds=0.4, telemetry_seconds=0.003)
    assert throughput.tokens == 200
    assert abs(throughput.seconds - 0.6) < 1e-12
    assert abs(throughput.telemetry_seconds - 0.004) < 1e-12
    assert throughput.as_text() == ("tokens=200 seconds=0.6000 tokens_per_second=333.33 "
                                    "median_step_seconds=0.300000 telemetry_seconds=0.004000")


def test_the_benches_read_the_summary_the_trainer_prints():
    spec = importlib.util.spec_from_file_location("trainer_runs", TRAINER_RUNS)
    trainer_runs = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, trainer_runs)  # its dataclasses look their module up
    spec.loader.exec_module(trainer_runs)
    throughput = Throughput(first_step=1)
    for step in (1, 2, 3):
        throughput.add(step=step, tokens=50, seconds=0.25, telemetry_seconds=0.0005)
    summary = trainer_runs.read_summary(f"step 3/3 ...\ntraining summary: {throughput.as_text()}\n")
    assert summary.tokens_per_second == 200.0
    assert summary.median_step_seconds == 0.25
    assert summary.seconds == 0.5 and summary.telemetry_seconds == 0.001
