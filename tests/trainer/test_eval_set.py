"""The eval set (trainer/data/eval_set.py): what is held out, and each rank's share of it."""
import pytest

from tunedeck.data.records import Example
from tunedeck.spec.job_spec import JobSpec
from trainer.data.builtin_dataset import ARITHMETIC_SIZE
from trainer.data.datasets import TokenizedExample
from trainer.data.eval_set import load_train_and_eval_records, rank_eval_batches
from trainer.token_loss import IGNORE_INDEX


def spec(**fields) -> JobSpec:
    return JobSpec(max_steps=1, **fields)


def test_eval_split_holds_out_a_seeded_share_of_the_dataset():
    train, held_out = load_train_and_eval_records(spec(eval_split=0.1), ranks=2)
    assert len(held_out) == ARITHMETIC_SIZE // 10 and len(train) == ARITHMETIC_SIZE - len(held_out)
    assert load_train_and_eval_records(spec(eval_split=0.1), ranks=2) == (train, held_out)
    assert load_train_and_eval_records(spec(eval_split=0.1, seed=1), ranks=2)[1] != held_out
    assert load_train_and_eval_records(spec(), ranks=2)[1] == []


def test_eval_dataset_is_read_whole_and_the_dataset_kept_whole(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text('{"prompt": "What is 1 + 1?", "response": "2"}\n')
    train, held_out = load_train_and_eval_records(spec(eval_dataset=str(path)), ranks=2)
    assert len(train) == ARITHMETIC_SIZE
    assert held_out == [Example(({"role": "user", "content": "What is 1 + 1?"},), "2")]


def test_a_split_that_starves_training_names_eval_split(tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text('{"prompt": "a", "response": "b"}\n' * 10)
    with pytest.raises(ValueError, match=r"^eval_split 0.5: leaves 5 of 10 examples to train on; "
                                         r"need at least micro_batch_size x ranks = 8"):
        load_train_and_eval_records(spec(dataset=str(path), eval_split=0.5), ranks=2)


def rows(count: int) -> list[TokenizedExample]:
    return [TokenizedExample(input_ids=[1, 2, 3 + i], labels=[IGNORE_INDEX, 2, 3 + i])
            for i in range(count)]


@pytest.mark.parametrize("count, micro_batch_size, world_size",
                         [(7, 2, 2), (3, 4, 4), (8, 2, 2), (1, 1, 3)])
def test_every_rank_scores_the_same_number_of_micro_batches_and_each_row_once(
        count, micro_batch_size, world_size):
    eval_rows = rows(count)
    shares = [rank_eval_batches(eval_rows, micro_batch_size=micro_batch_size, rank=rank,
                                world_size=world_size) for rank in range(world_size)]
    assert len({len(share) for share in shares}) == 1
    scored = [row for share in shares for batch in share for row in batch
              if any(label != IGNORE_INDEX for label in row.labels)]
    assert sorted(scored, key=lambda row: row.input_ids) == eval_rows
    assert all(len(batch) <= micro_batch_size for share in shares for batch in share)
