"""Preference pairs as the model sees them: each side tokenized as a supervised example of the
same prompt (trainer/data/datasets.py: the training chat template, the answer after the
generation prompt, prompt labels masked), and a micro-batch of pairs laid out as one padded
batch of rows [chosen..., rejected...], so both sides go through one forward."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tunedeck.data.preference_records import PreferencePair
from tunedeck.data.records import Example

from trainer.data.datasets import TokenizedExample, tokenize_all, collate, has_answer_tokens


@dataclass(frozen=True)
class TokenizedPair:
    chosen: TokenizedExample
    rejected: TokenizedExample


def tokenize_pairs(tokenizer, pairs: list[PreferencePair], seq_len: int | None, *,
                   source: str = "dataset") -> list[TokenizedPair]:
    """Every pair, both sides truncated to `seq_len` (None: whole, for the preflight)."""
    sides = [Example(pair.prompt_messages, answer)
             for pair in pairs for answer in (pair.chosen, pair.rejected)]
    tokenized = tokenize_all(tokenizer, sides, seq_len, source=source)
    return [TokenizedPair(tokenized[i], tokenized[i + 1]) for i in range(0, len(tokenized), 2)]


def trainable_pairs(tokenized: list[TokenizedPair], *, seq_len: int,
                    source: str = "dataset") -> list[TokenizedPair]:
    """The pairs whose both sides keep answer tokens after truncation (a side without any
    compares nothing); an error naming `source` when none is left."""
    kept = [pair for pair in tokenized
            if has_answer_tokens(pair.chosen) and has_answer_tokens(pair.rejected)]
    if not kept:
        raise ValueError(f"{source}: every pair loses a side's answer to seq_len={seq_len}; "
                         "no pair is left to compare")
    return kept


def collate_pairs(batch: list[TokenizedPair], pad_token_id: int) -> dict[str, Any]:
    """One padded batch: the chosen rows, then the rejected rows in the same order
    (trainer/objectives/preference_loss.py's split_pairs reads them back as pairs)."""
    return collate([pair.chosen for pair in batch] + [pair.rejected for pair in batch],
                   pad_token_id)
