"""One example tokenized as the trainer tokenizes its batches (`tokenize_all`): what the
tests that look at a single example's ids and labels call."""
from __future__ import annotations

from tunedeck.data.records import Example
from trainer.data.datasets import TokenizedExample, tokenize_all


def tokenize_example(tokenizer, example: Example, seq_len: int, *,
                     source: str = "dataset") -> TokenizedExample:
    return tokenize_all(tokenizer, [example], seq_len, source=source)[0]
