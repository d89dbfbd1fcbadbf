"""trainer/generation.py on the built-in model, through its line server as the worker runs
it: greedy answers repeat, the prompt is the trainer's own rendering, the shelf keeps two
models warm, and a bad folder is an answer with an error rather than a dead server."""
from __future__ import annotations

import os
import sys

from tunedeck.services.line_server import LineServer
from trainer.data.datasets import prompt_token_ids
from tests.trainer.tokenizing import tokenize_example
from tunedeck.data.records import single_turn

QUESTION = {"messages": [{"role": "user", "content": "What is 2 plus 3?"}],
            "max_new_tokens": 12, "temperature": 0.0, "top_p": 0.9, "variant": "base",
            "model_source": "builtin:tiny-llama", "adapter_dir": None, "device": "cpu"}


def test_the_prompt_is_tokenized_as_training_tokenized_it(builtin_tokenizer):
    example = single_turn("What is 2 plus 3?", "5")
    trained = tokenize_example(builtin_tokenizer, example, seq_len=256)
    prompt_length = sum(1 for label in trained.labels if label == -100)
    assert prompt_token_ids(builtin_tokenizer, example.prompt_messages) == \
        trained.input_ids[:prompt_length]


def test_greedy_answers_repeat_and_the_second_is_warm(tunedeck_home, builtin_model_dir):
    server = LineServer([sys.executable, "-m", "trainer.generation", "--serve"],
                        env={**os.environ, "TUNEDECK_HOME": str(tunedeck_home),
                             "CUDA_VISIBLE_DEVICES": ""}, timeout_seconds=120)
    try:
        first = server.ask(QUESTION)
        second = server.ask(QUESTION)
        sampled = server.ask({**QUESTION, "temperature": 1.0, "top_p": 1.0})
        seeded = [server.ask({**QUESTION, "temperature": 1.5, "top_p": 1.0, "seed": 7})["text"]
                  for _ in range(2)]
        other_seed = server.ask({**QUESTION, "temperature": 1.5, "top_p": 1.0, "seed": 8})
        missing = server.ask({**QUESTION, "model_source": str(tunedeck_home / "no-such-model"),
                              "variant": "merged"})
        after_error = server.ask(QUESTION)
    finally:
        server.stop()
    assert first["text"] == second["text"] and first["tokens"] == second["tokens"] == 12
    assert (first["warm"], second["warm"]) == (False, True)
    assert first["load_seconds"] > 0 and second["load_seconds"] == 0
    assert first["device"] == "cpu" and first["prompt_tokens"] > 5
    assert sampled["tokens"] >= 1
    assert seeded[0] == seeded[1] != other_seed["text"]  # sampling from a seed repeats
    assert "error" in missing and "merged" in missing["error"]
    assert after_error["text"] == first["text"]
