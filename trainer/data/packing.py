"""Packing: several tokenized examples in one row of up to `seq_len` tokens, fewer pad tokens.

Examples in a row must not see each other. Each row carries position ids that restart at 0
for every example, and the batch carries no 2D attention mask (`datasets.collate`). From
those, transformers 5 (`masking_utils.find_packed_sequence_indices`) builds a
block-diagonal causal mask for sdpa and eager attention, the implementations the trainer
loads. It does so only when the attention mask is None and no KV cache is in use:
`load_base_model` turns the cache off (`config.use_cache = False`); with a cache on, the
positions are ignored and attention crosses the examples (tests/trainer/test_packing.py
shows both). (Flash attention would find the boundaries only in a batch of one row.)

Each example keeps its response-only labels, and its first token is never a target, so no
loss is taken across a boundary either.
"""
from __future__ import annotations

from trainer.token_loss import IGNORE_INDEX
from trainer.data.datasets import TokenizedExample


def pack_examples(examples: list[TokenizedExample], seq_len: int) -> list[TokenizedExample]:
    """Rows filled greedily in the given order: an example that no longer fits starts the
    next row (every example is at most `seq_len` long, truncated when tokenized)."""
    rows: list[list[TokenizedExample]] = []
    row_length = seq_len  # so that the first example opens a row
    for example in examples:
        if row_length + len(example.input_ids) > seq_len:
            rows.append([])
            row_length = 0
        rows[-1].append(example)
        row_length += len(example.input_ids)
    return [_join(row) for row in rows]


def _join(row: list[TokenizedExample]) -> TokenizedExample:
    input_ids, labels, position_ids = [], [], []
    for example in row:
        input_ids += example.input_ids
        # The first token follows the previous example, which must not learn to predict it.
        labels += [IGNORE_INDEX, *example.labels[1:]]
        position_ids += range(len(example.input_ids))
    return TokenizedExample(input_ids=input_ids, labels=labels, position_ids=position_ids)
