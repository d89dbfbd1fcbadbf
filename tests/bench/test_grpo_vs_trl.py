"""bench/grpo_vs_trl.py runs TRL's GRPOTrainer and TuneDeck's trainer side by side and
prints each side's seconds a step, split into sampling and training, with the ratios."""
import json
import subprocess
import sys

import pytest

from tests.bench.bench_modules import REPO

pytestmark = pytest.mark.torchrun


def test_the_bench_times_both_trainers_and_prints_the_ratios():
    result = subprocess.run([sys.executable, "bench/grpo_vs_trl.py", "--steps", "3"], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert any(line.startswith("seconds a step") and "TRL 1.16" in line for line in lines)
    figures = json.loads(lines[-1])
    for side in ("trl", "tunedeck"):
        assert set(figures[side]) == {"step", "sampling", "training"}
        assert all(value > 0 for value in figures[side].values()), figures
    assert figures["ratio"]["step"] == pytest.approx(
        figures["tunedeck"]["step"] / figures["trl"]["step"])
