"""Preference pairs tokenized with the training chat template (each side the same prompt
tokens, only its answer labelled) and collated chosen-then-rejected, through to the pair
loss: a model that puts more probability on the chosen answers has the lower DPO loss."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.trainer.conftest import builtin_model_dir  # noqa: E402,F401 (fixture)
from trainer.data.preference_pairs import collate_pairs, tokenize_pairs, trainable_pairs  # noqa: E402
from trainer.model.model_source import load_tokenizer  # noqa: E402
from trainer.objectives.preference_loss import answer_logps, pair_loss, split_pairs  # noqa: E402
from trainer.token_loss import IGNORE_INDEX  # noqa: E402
from tunedeck.data.preference_records import PreferencePair  # noqa: E402

PAIRS = [PreferencePair(({"role": "user", "content": f"{n} + 1 = ?"},), str(n + 1), f"{n} {n}")
         for n in range(4)]


def test_each_side_shares_the_prompt_tokens_and_labels_only_its_answer(builtin_model_dir):  # noqa: F811
    tokenizer = load_tokenizer(str(builtin_model_dir))
    pairs = tokenize_pairs(tokenizer, PAIRS, seq_len=64)
    for tokenized in pairs:
        chosen, rejected = tokenized.chosen, tokenized.rejected
        prompt = chosen.labels.index(next(label for label in chosen.labels if label != IGNORE_INDEX))
        assert chosen.input_ids[:prompt] == rejected.input_ids[:prompt]
        assert all(label == IGNORE_INDEX for label in rejected.labels[:prompt])
        assert rejected.labels[prompt:] == rejected.input_ids[prompt:]
    inputs = collate_pairs(pairs, tokenizer.pad_token_id)
    assert inputs["input_ids"].shape[0] == 2 * len(PAIRS)
    assert inputs["input_ids"][0].tolist()[:len(pairs[0].chosen.input_ids)] == pairs[0].chosen.input_ids
    assert inputs["input_ids"][len(PAIRS)].tolist()[:len(pairs[0].rejected.input_ids)] == \
        pairs[0].rejected.input_ids


def test_a_pair_that_loses_a_sides_answer_is_dropped_and_none_left_is_an_error(builtin_model_dir):  # noqa: F811
    tokenizer = load_tokenizer(str(builtin_model_dir))
    whole = tokenize_pairs(tokenizer, PAIRS, seq_len=None)
    prompt_length = whole[0].chosen.labels.count(IGNORE_INDEX)
    cut = tokenize_pairs(tokenizer, PAIRS, seq_len=prompt_length)
    with pytest.raises(ValueError, match="dataset: every pair loses a side's answer to seq_len="):
        trainable_pairs(cut, seq_len=prompt_length)
    assert len(trainable_pairs(whole, seq_len=999)) == len(PAIRS)


def test_a_model_that_prefers_the_chosen_answers_has_the_lower_loss(builtin_model_dir):  # noqa: F811
    tokenizer = load_tokenizer(str(builtin_model_dir))
    inputs = collate_pairs(tokenize_pairs(tokenizer, PAIRS, seq_len=64), tokenizer.pad_token_id)
    rows, length = inputs["input_ids"].shape
    vocab = len(tokenizer)
    neutral = torch.zeros(rows, length, vocab)
    leaning = neutral.clone()
    # One more logit on each chosen row's own next tokens: its answer becomes likelier.
    for row in range(rows // 2):
        for position in range(length - 1):
            leaning[row, position, inputs["input_ids"][row, position + 1]] += 1.0
    reference = split_pairs(*answer_logps(neutral, inputs["labels"]))
    neutral_loss = pair_loss(reference, reference, loss="sigmoid", beta=0.1)
    leaning_loss = pair_loss(split_pairs(*answer_logps(leaning, inputs["labels"])), reference,
                             loss="sigmoid", beta=0.1)
    assert float(neutral_loss.per_pair.mean()) == pytest.approx(0.6931, abs=1e-4)  # log 2
    assert float(leaning_loss.per_pair.mean()) < 0.69
    assert leaning_loss.accuracies.tolist() == [1.0] * len(PAIRS)
