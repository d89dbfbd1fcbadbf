import pytest

from tunedeck.data.records import (Example, count_file_records, eval_split_problem, held_out_count,
                                   single_turn, split_eval_examples)


def examples(count: int) -> list[Example]:
    return [single_turn(f"q{i}", f"a{i}") for i in range(count)]


def test_split_is_deterministic_by_seed_disjoint_and_keeps_file_order():
    data = examples(100)
    train, held_out = split_eval_examples(data, fraction=0.2, seed=3)
    assert len(held_out) == 20 and len(train) == 80
    assert (train, held_out) == split_eval_examples(data, fraction=0.2, seed=3)
    assert held_out != split_eval_examples(data, fraction=0.2, seed=4)[1]
    assert sorted(train + held_out, key=data.index) == data
    assert train == [e for e in data if e in train] and held_out == [e for e in data if e in held_out]
    assert not set(map(id, train)) & set(map(id, held_out))


def test_held_out_count_rounds_half_up():
    assert [held_out_count(n, 0.25) for n in (1, 2, 3, 10)] == [0, 1, 1, 3]
    assert held_out_count(10, 0.0) == 0


@pytest.mark.parametrize("count, fraction, expected", [
    (100, 0.0, None),
    (100, 0.2, None),
    (3, 0.1, "eval_split 0.1: holds out none of the 3 examples; raise eval_split or set eval_dataset"),
    (12, 0.5, "eval_split 0.5: leaves 6 of 12 examples to train on; "
              "need at least micro_batch_size x ranks = 8"),
])
def test_eval_split_problems_name_eval_split(count, fraction, expected):
    assert eval_split_problem(count, fraction=fraction, micro_batch_size=4, ranks=2) == expected


def test_record_counts(tmp_path):
    lines = tmp_path / "data.jsonl"
    lines.write_text('{"prompt": "a", "response": "b"}\n\n{"prompt": "c", "response": "d"}\n')
    listed = tmp_path / "data.json"
    listed.write_text('[{"prompt": "a", "response": "b"}]')
    assert count_file_records(lines) == 2 and count_file_records(listed) == 1
    with pytest.raises(FileNotFoundError, match="^eval_dataset "):
        count_file_records(tmp_path / "none.jsonl", field="eval_dataset")
