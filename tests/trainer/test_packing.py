"""Packing on the real built-in model: a packed row computes exactly what its examples
compute alone (transformers turns the restarting position ids into a block-diagonal mask)."""
import pytest
import torch

from trainer.token_loss import IGNORE_INDEX
from tunedeck.data.records import Example
from trainer.data.datasets import TokenizedExample, collate
from tests.trainer.tokenizing import tokenize_example
from trainer.token_loss import summed_token_loss
from trainer.data.packing import pack_examples

QUESTIONS = [("What is 1 + 2?", "3"), ("Say hello to the world, in one short line.", "hello world"),
             ("What is 40 - 13?", "27"), ("Name a colour.", "red"), ("What is 7 + 7?", "14")]


def example(length: int, first_id: int = 10) -> TokenizedExample:
    ids = list(range(first_id, first_id + length))
    return TokenizedExample(input_ids=ids, labels=[IGNORE_INDEX] * 2 + ids[2:])


def test_rows_fill_greedily_in_order_and_restart_positions():
    examples = [example(5), example(4, 50), example(3, 90), example(8, 120)]
    rows = pack_examples(examples, seq_len=10)
    assert [len(row.input_ids) for row in rows] == [9, 3, 8]
    assert rows[0].input_ids == examples[0].input_ids + examples[1].input_ids
    assert rows[0].position_ids == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    # Response-only labels stay, and no example's first token is a target.
    assert rows[0].labels == [IGNORE_INDEX] * 2 + [12, 13, 14] + [IGNORE_INDEX] * 2 + [52, 53]
    assert sum(len(row.input_ids) for row in rows) == sum(len(e.input_ids) for e in examples)


def test_packed_batch_has_positions_and_no_attention_mask(builtin_tokenizer):
    rows = pack_examples([example(5), example(4, 50), example(6, 90)], seq_len=10)
    batch = collate(rows, pad_token_id=0)
    assert "attention_mask" not in batch
    assert batch["position_ids"][1].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2]  # padding: own run
    assert batch["labels"][1, 6:].tolist() == [IGNORE_INDEX] * 3


@pytest.fixture(scope="module")
def trainer_model(builtin_model_dir):
    """The model exactly as the trainer loads it (no KV cache)."""
    from trainer.model.model_source import load_base_model

    return load_base_model(str(builtin_model_dir)).eval()


@pytest.fixture(scope="module")
def tokenized_questions(builtin_tokenizer) -> list[TokenizedExample]:
    return [tokenize_example(builtin_tokenizer, Example(({"role": "user", "content": q},), a), seq_len=64)
            for q, a in QUESTIONS]


def packed_and_alone_logits(model, examples: list[TokenizedExample], pad_token_id: int):
    rows = pack_examples(examples, seq_len=64)
    assert len(rows) == 2 and len(rows[0].position_ids) != len(rows[1].position_ids)
    batch = collate(rows, pad_token_id)
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        alone = [model(input_ids=torch.tensor([e.input_ids])).logits[0] for e in examples]
    return rows, batch, packed, alone


def per_example_slices(rows):
    """(row, start, end) of every example, in packing order."""
    for row_index, row in enumerate(rows):
        starts = [i for i, position in enumerate(row.position_ids) if position == 0]
        for start, end in zip(starts, [*starts[1:], len(row.position_ids)]):
            yield row_index, start, end


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_packed_row_computes_what_each_example_computes_alone(
        attention, trainer_model, tokenized_questions, builtin_tokenizer):
    trainer_model.set_attn_implementation(attention)
    try:
        rows, batch, packed, alone = packed_and_alone_logits(
            trainer_model, tokenized_questions, builtin_tokenizer.pad_token_id)
    finally:
        trainer_model.set_attn_implementation("sdpa")
    slices = list(per_example_slices(rows))
    assert len(slices) == len(tokenized_questions)
    for (row, start, end), logits in zip(slices, alone):
        assert torch.allclose(packed[row, start:end], logits, atol=1e-5)
    # And the loss over the packed rows is the loss over the examples, token for token.
    packed_sum, packed_tokens = summed_token_loss(packed, batch["labels"])
    alone_sums = [summed_token_loss(logits[None], torch.tensor([e.labels]))
                  for logits, e in zip(alone, tokenized_questions)]
    assert packed_tokens == sum(tokens for _, tokens in alone_sums)
    assert torch.allclose(packed_sum, sum(loss for loss, _ in alone_sums), atol=1e-4)


def test_with_a_kv_cache_on_the_positions_are_ignored_and_examples_see_each_other(
        trainer_model, tokenized_questions, builtin_tokenizer):
    """Why load_base_model's `use_cache = False` matters to packing: with a cache,
    transformers skips the packed-sequence detection and applies one causal mask per row."""
    trainer_model.config.use_cache = True
    try:
        rows, _, packed, alone = packed_and_alone_logits(
            trainer_model, tokenized_questions, builtin_tokenizer.pad_token_id)
    finally:
        trainer_model.config.use_cache = False
    row, start, end = list(per_example_slices(rows))[1]  # the second example of the first row
    assert start > 0
    assert not torch.allclose(packed[row, start:end], alone[1], atol=1e-3)
