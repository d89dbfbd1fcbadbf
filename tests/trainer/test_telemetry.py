import torch

from trainer.telemetry import FileTelemetry, NullTelemetry, open_telemetry
from tunedeck.metrics.events import (EVAL_FIELDS, MEMORY_FIELDS, NOTICE_FIELDS,
                                     OBJECTIVE_FIELDS, STEP_FIELDS, decode_event)


def test_file_telemetry_writes_schema_events(tmp_path):
    path = tmp_path / "metrics" / "rank-1.jsonl"
    telemetry = open_telemetry(enabled=True, path=path, rank=1, device=torch.device("cpu"))
    assert isinstance(telemetry, FileTelemetry)
    telemetry.notice("loading model")
    telemetry.step(step=1, loss=2.5, learning_rate=1e-3, grad_norm=0.5, tokens_per_second=100.0,
                   step_seconds=0.2, tokens=20)
    telemetry.memory(step=1)
    telemetry.eval(step=1, eval_loss=1.75, eval_tokens=300)
    # Flushed line by line: a reader sees every event before close().
    notice, step, memory, evaluation = [decode_event(line) for line in path.read_text().splitlines()]
    telemetry.close()
    assert notice["kind"] == "notice" and set(NOTICE_FIELDS) <= notice.keys()
    assert notice["level"] == "info" and notice["rank"] == 1
    # The MFUs come only from a GPU rank (trainer/mfu.py); a CPU step carries none; the
    # preference and RL figures only a DPO or GRPO job's step.
    assert step["kind"] == "step" and \
        set(STEP_FIELDS) - {"mfu", "mfu_6n", *OBJECTIVE_FIELDS} <= step.keys()
    assert step["tokens"] == 20 and "mfu" not in step and "mfu_6n" not in step
    assert memory["kind"] == "memory" and set(MEMORY_FIELDS) <= memory.keys()
    assert memory["device"] == "cpu" and memory["allocated_mb"] is None and memory["rss_mb"] > 0
    assert evaluation["kind"] == "eval" and set(EVAL_FIELDS) <= evaluation.keys()
    assert (evaluation["step"], evaluation["eval_loss"], evaluation["eval_tokens"]) == (1, 1.75, 300)


def test_metrics_off_writes_nothing(tmp_path):
    path = tmp_path / "metrics" / "rank-0.jsonl"
    telemetry = open_telemetry(enabled=False, path=path, rank=0, device=torch.device("cpu"))
    assert isinstance(telemetry, NullTelemetry)
    telemetry.notice("x", level="error")
    telemetry.step(step=1, loss=1.0, learning_rate=1.0, grad_norm=1.0, tokens_per_second=1.0,
                   step_seconds=1.0, tokens=1)
    telemetry.memory(step=1)
    telemetry.eval(step=1, eval_loss=1.0, eval_tokens=1)
    telemetry.close()
    assert not path.parent.exists()
