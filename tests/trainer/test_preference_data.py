"""The trainer's preference pairs (trainer/data/preference_data.py): `builtin:arithmetic-
preference`, or any source `load_source_pairs` reads, with the spec's split and columns; a
built-in of the other objective's kind refused as the worker's input check refuses it."""
from __future__ import annotations

import json

import pytest

from trainer.data.builtin_dataset import ARITHMETIC_PREFERENCE_SIZE
from trainer.data.preference_data import load_pairs, load_spec_pairs
from tunedeck.spec.job_spec import JobSpec


def dpo_spec(**fields) -> JobSpec:
    return JobSpec(objective="dpo", max_steps=1, **fields)


def test_the_built_in_preference_dataset_is_read_as_pairs():
    pairs = load_spec_pairs(dpo_spec(dataset="builtin:arithmetic-preference"))
    assert len(pairs) == ARITHMETIC_PREFERENCE_SIZE
    first = pairs[0]
    assert first.prompt_messages[0]["role"] == "user"
    assert first.prompt_messages[0]["content"].startswith("What is ")
    assert first.chosen.endswith(".") and first.rejected.isdigit() and not first.same_answers
    assert len(load_pairs("builtin:arithmetic-preference", limit=3)) == 3


def test_an_sft_built_in_or_an_unknown_one_is_refused():
    with pytest.raises(ValueError, match=r"^dataset builtin:arithmetic: its records are supervised "
                                         r"examples .* use builtin:arithmetic-preference$"):
        load_spec_pairs(dpo_spec())
    with pytest.raises(ValueError, match="eval_dataset builtin:poetry: unknown built-in dataset"):
        load_pairs("builtin:poetry", field="eval_dataset")


def test_a_files_pairs_are_read_with_the_spec_columns_for_either_field(tmp_path):
    train, held_out = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    for path, count in ((train, 3), (held_out, 2)):
        path.write_text("".join(json.dumps({"q": f"{n} + 1?", "good": str(n + 1), "bad": "0"}) + "\n"
                                for n in range(count)))
    spec = dpo_spec(dataset=str(train), eval_dataset=str(held_out),
                    columns={"prompt": "q", "chosen": "good", "rejected": "bad"})
    assert [pair.chosen for pair in load_spec_pairs(spec)] == ["1", "2", "3"]
    assert len(load_spec_pairs(spec, field="eval_dataset")) == 2
    unmapped = dpo_spec(dataset=str(train))
    with pytest.raises(ValueError, match=rf"^dataset {train}: record 1 has no column 'chosen'"):
        load_spec_pairs(unmapped)
