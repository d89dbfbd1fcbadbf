"""`tunedeck watch`'s line: the job page's progress, in a terminal."""
from __future__ import annotations

from cli.watch_command import progress_line

JOB = {"id": 7, "status": "running", "spec": {"max_steps": 100}}


def test_before_step_one_the_line_is_the_phase():
    phase = {"kind": "phase", "phase": "tokenize", "state": "progress", "done": 500,
             "total": 2000, "unit": "records", "elapsed": 3.2}
    # As GET /api/jobs/{id}/metrics answers it: the newest phase line, a list of one.
    assert progress_line(JOB, {"train": [], "phase": [phase]}) == \
        "job 7 running · tokenizing · 500 / 2,000 records · 3 s"
    download = {"kind": "phase", "phase": "download", "state": "progress",
                "message": "model.safetensors", "done": 1.2e9, "total": 3.4e9,
                "unit": "bytes", "elapsed": 12}
    line = progress_line(JOB, {"train": [], "phase": [download]})
    assert line.startswith("job 7 running · downloading model.safetensors · ") and "GB" in line


def test_once_it_steps_the_line_is_the_step_loss_and_throughput():
    series = {"train": [{"step": 12, "loss": 1.23456, "tokens_per_second": 2345.6}],
              "phase": [{"phase": "tokenize", "state": "end"}]}
    assert progress_line(JOB, series) == "job 7 running · step 12 / 100 · loss 1.2346 · " \
        "2,346 tokens/s"
    assert progress_line({**JOB, "status": "queued"}, {"train": [], "phase": []}) == \
        "job 7 queued"
