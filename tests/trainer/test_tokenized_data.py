"""trainer/data/tokenized_data.py: the rows every rank memory-maps are exactly the rows the one
tokenizing rank made (plain and packed, train and eval)."""
import json

import pytest

from tunedeck.spec.job_spec import JobSpec
from trainer.data.tokenized_data import MANIFEST_FILE, read_tokenized, tokenize_example_splits, write_tokenized


@pytest.mark.parametrize("packing", [False, True])
def test_the_memory_mapped_rows_are_the_tokenized_rows(packing, tmp_path, builtin_tokenizer):
    spec = JobSpec(max_steps=1, seq_len=64, packing=packing, eval_split=0.1)
    made = tokenize_example_splits(spec, builtin_tokenizer, ranks=2)
    write_tokenized(tmp_path / "node-0", lambda: made)
    data = read_tokenized(tmp_path / "node-0")
    assert list(data.train_rows) == made["rows"]["train"]
    assert list(data.eval_rows) == made["rows"]["eval"] and len(data.eval_rows) > 0
    assert data.eval_rows[1::2] == made["rows"]["eval"][1::2]  # an eval shard
    assert data.train_examples == made["train_examples"] and data.seconds >= 0
    assert (data.train_rows[0].position_ids is not None) == packing
    manifest = json.loads((tmp_path / "node-0" / MANIFEST_FILE).read_text())
    assert manifest["rows"] == {"train": len(made["rows"]["train"]), "eval": len(made["rows"]["eval"])}
    assert not list(tmp_path.glob(".node-0-staging"))


def test_a_job_without_an_eval_set_has_no_eval_rows(tmp_path, builtin_tokenizer):
    write_tokenized(tmp_path / "node-0",
                    lambda: tokenize_example_splits(JobSpec(max_steps=1, seq_len=64), builtin_tokenizer, ranks=2))
    data = read_tokenized(tmp_path / "node-0")
    assert len(data.eval_rows) == 0 and len(data.train_rows) > 0
    with pytest.raises(IndexError):
        data.train_rows[len(data.train_rows)]
