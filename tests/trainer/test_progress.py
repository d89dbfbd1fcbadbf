"""Phase progress before step 1 (trainer/progress.py), each phase driven on local files:
a download through huggingface_hub's own http_get from a local HTTP server (the hub is not
reachable in tests), a sharded checkpoint's load, a dataset's tokenization."""
import functools
import http.server
import threading

import pytest
import torch

from trainer.model_source import load_base_model, shard_count
from trainer.progress import Phase, download_progress_class
from trainer.telemetry import FileTelemetry
from trainer.tokenized_data import tokenize_splits
from tunedeck.job_spec import JobSpec
from tunedeck.metrics.events import PHASE_FIELDS, decode_event, phase_text


def phase_events(path):
    events = [decode_event(line) for line in path.read_text().splitlines()]
    assert all(event["kind"] == "phase" and set(PHASE_FIELDS) <= event.keys()
               for event in events)
    return events


@pytest.fixture
def telemetry(tmp_path):
    telemetry = FileTelemetry(tmp_path / "metrics" / "rank-0.jsonl", rank=0,
                              device=torch.device("cpu"))
    yield telemetry
    telemetry.close()


def test_progress_lines_are_throttled_but_start_and_end_always_written(tmp_path, telemetry):
    now = [0.0]
    with Phase(telemetry, "tokenize", total=1000, unit="records", clock=lambda: now[0],
               min_interval=0.5) as phase:
        for _ in range(500):  # all in one instant: no progress line
            phase.advance(1)
        now[0] = 0.6
        phase.advance(500)  # half a second later: one
        now[0] = 0.7
    events = phase_events(tmp_path / "metrics" / "rank-0.jsonl")
    assert [(e["state"], e["done"], e["elapsed"]) for e in events] == [
        ("start", 0, 0.0), ("progress", 1000, 0.6), ("end", 1000, 0.7)]
    assert events[0]["total"] == 1000 and events[0]["unit"] == "records"


def test_a_download_reports_its_bytes_of_the_total(tmp_path, telemetry):
    from huggingface_hub.file_download import http_get

    served = tmp_path / "served"
    served.mkdir()
    payload = bytes(range(256)) * 40_000  # 10 MB: many chunks
    (served / "model.safetensors").write_bytes(payload)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with (tmp_path / "download").open("wb") as target:
            http_get(f"http://127.0.0.1:{server.server_port}/model.safetensors", target,
                     expected_size=len(payload), displayed_filename="model.safetensors",
                     tqdm_class=download_progress_class(telemetry))
    finally:
        server.shutdown()
    assert (tmp_path / "download").read_bytes() == payload
    events = phase_events(tmp_path / "metrics" / "rank-0.jsonl")
    assert events[0]["state"] == "start" and events[-1]["state"] == "end"
    assert {e["phase"] for e in events} == {"download"}
    assert {e["unit"] for e in events} == {"bytes"}
    assert events[0]["total"] == len(payload) and events[-1]["done"] == len(payload)
    assert "model.safetensors" in events[0]["message"]
    done = [e["done"] for e in events]
    assert done == sorted(done)


def test_a_sharded_checkpoint_loads_as_shards_of_the_total(tmp_path, telemetry):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "model", max_shard_size="100KB")
    shards = shard_count(str(tmp_path / "model"))
    assert shards > 2
    load_base_model(str(tmp_path / "model"), telemetry=telemetry)
    events = phase_events(tmp_path / "metrics" / "rank-0.jsonl")
    assert [(e["phase"], e["state"], e["done"], e["total"], e["unit"]) for e in events] == [
        ("load_shards", "start", 0, shards, "shards"),
        ("load_shards", "end", shards, shards, "shards")]


def test_tokenizing_counts_the_records_train_and_eval(tmp_path, telemetry, builtin_tokenizer,
                                                      monkeypatch):
    import trainer.tokenized_data as tokenized_data

    monkeypatch.setattr(tokenized_data, "TOKENIZE_CHUNK_RECORDS", 16)
    monkeypatch.setattr("trainer.progress.MIN_INTERVAL_SECONDS", 0.0)
    spec = JobSpec(max_steps=1, seq_len=64, eval_split=0.1)
    made = tokenize_splits(spec, builtin_tokenizer, ranks=2, telemetry=telemetry)
    events = phase_events(tmp_path / "metrics" / "rank-0.jsonl")
    total = events[0]["total"]
    assert made["train_examples"] < total  # the eval records are counted too
    assert events[0]["state"] == "start" and events[-1]["state"] == "end"
    train = made["train_examples"]  # train's chunks, then eval's
    assert [e["done"] for e in events] == [0, *range(16, train, 16), train,
                                           *range(train + 16, total, 16), total, total]
    assert {(e["phase"], e["unit"], e["total"]) for e in events} == {
        ("tokenize", "records", total)}


def test_a_phase_that_raises_ends_failed(tmp_path, telemetry):
    with pytest.raises(ValueError):
        with Phase(telemetry, "tokenize", total=10, unit="records") as phase:
            phase.advance(3)
            raise ValueError("a bad record")
    events = phase_events(tmp_path / "metrics" / "rank-0.jsonl")
    assert [(e["state"], e["done"]) for e in events] == [("start", 0), ("failed", 3)]
    assert phase_text(events[-1]) == "tokenizing · 3 / 10 records · failed · 0 s"


def test_compiling_ops_ticks_its_elapsed_time_until_the_build_returns(tmp_path, telemetry):
    import time

    from trainer.progress import compiling_ops

    with compiling_ops(telemetry, compiling=True, tick_seconds=0.05):
        time.sleep(0.3)  # the build
    with compiling_ops(telemetry, compiling=False):
        pass  # nothing to build: no line
    telemetry.close()
    events = phase_events(tmp_path / "metrics" / "rank-0.jsonl")
    states = [event["state"] for event in events]
    assert states[0] == "start" and states[-1] == "end" and states.count("progress") >= 3
    assert {event["phase"] for event in events} == {"compile_ops"}
    elapsed = [event["elapsed"] for event in events]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= 0.3
    assert phase_text(events[-2]).startswith("compiling ops · ")
    assert phase_text(events[-2]).endswith(" s")


def test_a_failed_build_ends_its_phase_failed(tmp_path, telemetry):
    from trainer.progress import compiling_ops

    with pytest.raises(RuntimeError):
        with compiling_ops(telemetry, compiling=True, tick_seconds=10):
            raise RuntimeError("ninja: build stopped")
    telemetry.close()
    assert [event["state"] for event in phase_events(tmp_path / "metrics" / "rank-0.jsonl")] \
        == ["start", "failed"]
