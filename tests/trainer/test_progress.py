"""Phase progress before step 1 (trainer/startup/progress.py), each phase driven on local files:
a download through huggingface_hub's own http_get from a local HTTP server (the hub is not
reachable in tests), a sharded checkpoint's load (bytes as transformers' loading pass puts
each weight in place), a dataset's tokenization."""
import functools
import http.server
import threading

import pytest
import torch

from trainer.model.model_source import checkpoint_tensor_bytes, load_base_model, weight_files
from trainer.startup.progress import (LOADING_WEIGHTS_DESC, Phase, download_progress_class,
                                      loading_weights_progress)
from trainer.telemetry import FileTelemetry
from trainer.data.tokenized_data import tokenize_example_splits
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics.events import PHASE_FIELDS, decode_event, phase_text
from tunedeck.units import GB, format_size


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


@pytest.fixture(scope="module")
def sharded_model(tmp_path_factory):
    """A tiny random Llama saved in several shards, and its checkpoint's bytes by
    safetensors itself (not our header reader)."""
    from safetensors import safe_open
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("sharded") / "model"
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4)
    LlamaForCausalLM(config).save_pretrained(folder, max_shard_size="100KB")
    sizes = {}
    for path in weight_files(folder):
        with safe_open(str(path), framework="pt") as file:
            for name in file.keys():
                tensor = file.get_tensor(name)
                sizes[name] = tensor.numel() * tensor.element_size()
    assert len(weight_files(folder)) > 2
    return folder, sizes


@pytest.fixture
def every_progress_line(monkeypatch):
    monkeypatch.setattr("trainer.startup.progress.MIN_INTERVAL_SECONDS", 0.0)


def loaded_phases(path):
    return [(e["state"], e["done"], e["total"], e["unit"]) for e in phase_events(path)
            if e["phase"] == "load_shards"]


def test_a_sharded_checkpoint_loads_as_bytes_of_the_total(tmp_path, telemetry, sharded_model,
                                                          every_progress_line):
    folder, sizes = sharded_model
    total = sum(sizes.values())
    load_base_model(str(folder), telemetry=telemetry)
    events = phase_events(tmp_path / "metrics" / "rank-0.jsonl")
    phases = loaded_phases(tmp_path / "metrics" / "rank-0.jsonl")
    assert phases[0] == ("start", 0, total, "bytes")
    assert phases[-1] == ("end", total, total, "bytes")
    progress = phases[1:-1]
    assert [state for state, *_ in progress] == ["progress"] * len(sizes)  # one a tensor
    done = [done for _, done, *_ in progress]
    assert done == sorted(set(done)) and done[-1] == total  # rising to the total
    assert {(total_, unit) for _, _, total_, unit in progress} == {(total, "bytes")}
    assert phase_text(events[1]).startswith("loading weights · ")
    assert phase_text(events[-1]).startswith(
        f"loading weights · {format_size(total / GB)} / {format_size(total / GB)} · done")


def test_with_progress_bars_off_the_load_still_counts(tmp_path, telemetry, sharded_model,
                                                      every_progress_line):
    # The warm start's ranks run with HF_HUB_DISABLE_PROGRESS_BARS: transformers hands the
    # hook its do-nothing bar, which still iterates the counted weights.
    from transformers.utils import logging

    folder, sizes = sharded_model
    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        load_base_model(str(folder), telemetry=telemetry)
    finally:
        if was_enabled:
            logging.enable_progress_bar()
    phases = loaded_phases(tmp_path / "metrics" / "rank-0.jsonl")
    assert len(phases) == len(sizes) + 2
    assert phases[-1] == ("end", sum(sizes.values()), sum(sizes.values()), "bytes")


def test_without_the_checkpoint_sizes_the_load_counts_tensors(tmp_path, telemetry, sharded_model,
                                                              every_progress_line, monkeypatch):
    # A hub id before its download, or weights in another format: no headers to read.
    folder, sizes = sharded_model
    monkeypatch.setattr("trainer.model.model_source.checkpoint_tensor_bytes", lambda source: {})
    load_base_model(str(folder), telemetry=telemetry)
    phases = loaded_phases(tmp_path / "metrics" / "rank-0.jsonl")
    tensors = len(sizes)
    assert phases[0] == ("start", None, None, None)  # nothing to count yet
    assert phases[1:] == [("progress", done, tensors, "tensors")
                          for done in range(1, tensors + 1)] + [
        ("end", tensors, tensors, "tensors")]
    assert phase_text({"phase": "load_shards", "state": "progress", "done": 120,
                       "total": 290, "unit": "tensors"}) == "loading weights · 120 / 290 tensors"


def test_a_fused_weight_counts_all_its_tensors_and_only_the_first_pass_counts(
        tmp_path, telemetry, every_progress_line):
    from types import SimpleNamespace

    from transformers.utils import logging

    # What transformers iterates: each model weight's mapping, naming its checkpoint tensors
    # (a fused MoE weight is made of several).
    weights = {"a": SimpleNamespace(layer_targets={"a": {"a"}}),
               "b": SimpleNamespace(layer_targets={"b": {"b.0", "b.1"}})}
    with Phase(telemetry, "load_shards") as phase, \
            loading_weights_progress(phase, lambda: {"a": 10, "b.0": 5, "b.1": 7}):
        for _ in logging.tqdm(weights.items(), desc=LOADING_WEIGHTS_DESC):
            pass
        for _ in logging.tqdm(weights.items(), desc=LOADING_WEIGHTS_DESC):
            pass  # a sub-model's own load inside this one: not counted again
        for _ in logging.tqdm(range(3), desc="Writing model shards"):
            pass  # not the loading pass
    assert loaded_phases(tmp_path / "metrics" / "rank-0.jsonl") == [
        ("start", None, None, None), ("progress", 10, 22, "bytes"),
        ("progress", 22, 22, "bytes"), ("end", 22, 22, "bytes")]


def test_transformers_still_draws_the_loading_weights_bar_through_its_hook():
    """The load's progress rests on two things in transformers (5.24): the hook, and the one
    pass over the weights drawn as a bar through it. If either moves, this fails first."""
    import inspect

    import transformers.core_model_loading as core_model_loading
    from transformers.utils import logging

    assert callable(getattr(logging, "set_tqdm_hook", None))
    assert core_model_loading.tqdm is logging.tqdm
    assert f'tqdm(param_name_to_load.items(), desc="{LOADING_WEIGHTS_DESC}")' in \
        inspect.getsource(core_model_loading)


def test_without_the_hook_the_load_says_start_and_end(tmp_path, telemetry, sharded_model,
                                                      every_progress_line, monkeypatch):
    from transformers.utils import logging

    folder, sizes = sharded_model
    total = sum(sizes.values())
    monkeypatch.delattr(logging, "set_tqdm_hook")  # a transformers without it
    load_base_model(str(folder), telemetry=telemetry)
    assert loaded_phases(tmp_path / "metrics" / "rank-0.jsonl") == [
        ("start", 0, total, "bytes"), ("end", total, total, "bytes")]


def test_a_hook_already_there_still_sees_the_bars_and_is_put_back(tmp_path, telemetry,
                                                                  sharded_model):
    from transformers.utils import logging

    seen = []

    def theirs(factory, args, kwargs):
        seen.append(kwargs.get("desc"))
        return factory(*args, **kwargs)

    folder, _ = sharded_model
    before = logging.set_tqdm_hook(theirs)
    try:
        load_base_model(str(folder), telemetry=telemetry)
    finally:
        assert logging.set_tqdm_hook(before) is theirs  # put back once the load is over
    assert LOADING_WEIGHTS_DESC in seen
    assert loaded_phases(tmp_path / "metrics" / "rank-0.jsonl")[-1][0] == "end"


def test_a_load_that_raises_ends_failed_and_puts_the_hook_back(tmp_path, telemetry, sharded_model,
                                                               monkeypatch):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    def broken(*args, **kwargs):
        raise OSError("disk gone")

    folder, _ = sharded_model
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", broken)
    with pytest.raises(OSError):
        load_base_model(str(folder), telemetry=telemetry)
    assert [state for state, *_ in loaded_phases(tmp_path / "metrics" / "rank-0.jsonl")] == [
        "start", "failed"]
    assert logging.set_tqdm_hook(None) is None


def test_a_hub_ids_checkpoint_sizes_come_from_the_hub_cache(tmp_path, sharded_model,
                                                            monkeypatch):
    import shutil

    from huggingface_hub import constants

    folder, sizes = sharded_model
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert checkpoint_tensor_bytes("acme/tiny") == {}  # not downloaded yet
    # The hub cache's layout: a ref naming the snapshot that holds the files.
    repo = tmp_path / "hub" / "models--acme--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    shutil.copytree(folder, repo / "snapshots" / ("0" * 40))
    assert checkpoint_tensor_bytes("acme/tiny") == sizes
    (repo / "snapshots" / ("0" * 40) / weight_files(folder)[0].name).unlink()
    assert checkpoint_tensor_bytes("acme/tiny") == {}  # a shard missing: tensors are counted


def test_tokenizing_counts_the_records_train_and_eval(tmp_path, telemetry, builtin_tokenizer,
                                                      monkeypatch):
    import trainer.data.tokenized_data as tokenized_data

    monkeypatch.setattr(tokenized_data, "TOKENIZE_CHUNK_RECORDS", 16)
    monkeypatch.setattr("trainer.startup.progress.MIN_INTERVAL_SECONDS", 0.0)
    spec = JobSpec(max_steps=1, seq_len=64, eval_split=0.1)
    made = tokenize_example_splits(spec, builtin_tokenizer, ranks=2, telemetry=telemetry)
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

    from trainer.startup.progress import compiling_ops

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
    from trainer.startup.progress import compiling_ops

    with pytest.raises(RuntimeError):
        with compiling_ops(telemetry, compiling=True, tick_seconds=10):
            raise RuntimeError("ninja: build stopped")
    telemetry.close()
    assert [event["state"] for event in phase_events(tmp_path / "metrics" / "rank-0.jsonl")] \
        == ["start", "failed"]
