"""What keeps a rank's start-up short must not change what it computes: batched tokenizing
gives the same rows, unused libraries stay out only where the job cannot need them, and
the collector pause ends once the imports are done."""
import subprocess
import sys

import pytest

from trainer.token_loss import IGNORE_INDEX
from tunedeck.data.records import Example
from trainer.data.datasets import tokenize_examples
from tests.trainer.tokenizing import tokenize_example
from trainer.startup.startup_clock import StartupClock

EXAMPLES = [
    Example(prompt_messages=({"role": "user", "content": "What is 2 + 2?"},), response="4"),
    Example(prompt_messages=({"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello"},
                             {"role": "user", "content": "Name a colour " * 20}), response="red"),
    Example(prompt_messages=({"role": "user", "content": "Say nothing"},), response=""),
    Example(prompt_messages=({"role": "user", "content": "Count"},), response="one two three " * 5),
]


@pytest.mark.parametrize("chat_template", [True, False], ids=["chat-template", "plain-prompt"])
def test_batched_tokenizing_gives_the_rows_of_one_example_at_a_time(builtin_model_dir, chat_template):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(builtin_model_dir)
    if not chat_template:
        tokenizer.chat_template = None
    for seq_len in (256, 48):  # at 48 the long prompt leaves no answer and is dropped
        one_at_a_time = [tokenize_example(tokenizer, example, seq_len=seq_len) for example in EXAMPLES]
        kept = [row for row in one_at_a_time if any(label != IGNORE_INDEX for label in row.labels)]
        assert tokenize_examples(tokenizer, EXAMPLES, seq_len=seq_len, source="dataset") == kept
        assert len({len(row.input_ids) for row in kept}) > 1  # unequal rows: no padding crept in
    assert len(kept) == len(EXAMPLES) - 1


def run_python(script: str) -> str:
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=180)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout.strip().splitlines()[-1]


UNUSED_LIBRARIES_SCRIPT = """
import os, sys
from tunedeck.spec.job_spec import JobSpec
from trainer.startup.unused_libraries import keep_unused_libraries_out
spec = JobSpec.model_validate({{"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
                               "method": "{method}", "backend": "{backend}", "max_steps": 1,
                               "fsdp": {{"compile": {compile}}}}})
keep_unused_libraries_out(spec)
import peft, torch
compiled = torch.compile(len)
print(sys.modules.get("bitsandbytes") is not None, "torch._inductor.compile_fx" in sys.modules,
      os.environ.get("TORCHDYNAMO_DISABLE") == "1")
"""


@pytest.mark.parametrize(("method", "backend", "compile_layers", "expected"), [
    # LoRA never calls bitsandbytes or a compiled kernel: neither is loaded.
    ("lora", "zero2", False, "False False True"),
    ("full", "fsdp", False, "False False True"),
    # The FSDP compile knob needs torch.compile; QLoRA needs bitsandbytes and its kernels.
    ("lora", "fsdp", True, "False True False"),
    ("qlora", "zero2", False, "True True False"),
])
def test_unused_libraries_stay_out_only_where_the_job_cannot_need_them(method, backend,
                                                                       compile_layers, expected):
    script = UNUSED_LIBRARIES_SCRIPT.format(method=method, backend=backend, compile=compile_layers)
    assert run_python(script) == expected


def test_the_collector_resumes_after_the_imports_with_them_frozen():
    script = ("import gc; from trainer.startup.startup_gc import pause_collection, resume_collection_after_imports;"
              "pause_collection(); paused = gc.isenabled(); import json, email.parser;"
              "resume_collection_after_imports(); print(paused, gc.isenabled(), gc.get_freeze_count() > 1000)")
    assert run_python(script) == "False True True"


def test_an_unpaused_collector_is_left_as_it_was():
    script = ("import gc; from trainer.startup.startup_gc import resume_collection_after_imports;"
              "resume_collection_after_imports(); print(gc.isenabled(), gc.get_freeze_count())")
    assert run_python(script) == "True 0"


def test_startup_clock_reads_each_stage_from_the_previous_mark(monkeypatch):
    now = iter([102.5, 103.0, 103.0])
    monkeypatch.setattr("trainer.startup.startup_clock.time.time", lambda: next(now))
    clock = StartupClock(started=100.0)
    for stage in ("imports", "model build", "data"):
        clock.mark(stage)
    assert clock.stages() == [("imports", 2.5), ("model build", 0.5), ("data", 0.0)]
    assert clock.as_text() == "start-up seconds: imports 2.50, model build 0.50, data 0.00"
