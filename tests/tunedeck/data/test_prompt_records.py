"""Prompt records (objective grpo): every layout people have, mapped columns, and the
columns the rewards read, refused by record and column when missing, by the same code the
worker's input check and the trainer read prompts with."""
import json

import pytest

from tunedeck.data.prompt_records import prompt_columns_problem, prompts_from_records
from tunedeck.data.records import builtin_dataset_problem
from tunedeck.data.sources import DatasetSource, load_source_prompts
from tunedeck.spec.job_spec import JobSpec
from tunedeck.spec.sections import ColumnMapping
from worker.input_check import find_input_problems

READERS = {"answer": "grpo.rewards[0] (numeric_match)"}


def read(records, columns=None, readers=READERS):
    return prompts_from_records(records, source="data.jsonl", columns=columns,
                                reward_columns=readers)


@pytest.mark.parametrize("record, messages", [
    ({"prompt": "What is 2 + 2?", "answer": "4"}, [("user", "What is 2 + 2?")]),
    ({"question": "Q?", "answer": 1}, [("user", "Q?")]),
    ({"problem": "P", "answer": 1}, [("user", "P")]),
    ({"instruction": "Add", "input": "2 2", "answer": 4}, [("user", "Add\n\n2 2")]),
    ({"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
      "answer": "x"}, [("system", "S"), ("user", "U")]),
    # A chat closing with its reference answer: the answer is left out of the prompt.
    ({"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}],
      "answer": "A"}, [("user", "U")]),
])
def test_each_layout_becomes_a_prompt_with_the_columns_its_rewards_read(record, messages):
    (prompt,) = read([record])
    assert [(turn["role"], turn["content"]) for turn in prompt.prompt_messages] == messages
    assert prompt.columns == {"answer": record["answer"]}
    assert prompt.prompt_text == messages[-1][1]


def test_mapped_prompt_and_system_columns():
    columns = ColumnMapping(prompt="query", system="persona")
    (prompt,) = read([{"query": "Q", "persona": "Be brief", "answer": 3}], columns=columns)
    assert prompt.prompt_messages == ({"role": "system", "content": "Be brief"},
                                      {"role": "user", "content": "Q"})


@pytest.mark.parametrize("records, words", [
    ([{"prompt": "Q"}], "record 1 has no column 'answer', which grpo.rewards[0] (numeric_match) reads"),
    ([{"prompt": "Q", "answer": 1}, {"text": "x", "answer": 2}], "record 2 has keys ['answer', 'text']"),
    ([{"prompt": "  ", "answer": 1}], "record 1 has an empty prompt"),
    ([{"messages": [{"role": "assistant", "content": "A"}], "answer": 1}], "no user turn"),
    ([], "no records"),
])
def test_a_bad_record_is_refused_by_number(records, words):
    with pytest.raises(ValueError, match="dataset data.jsonl") as caught:
        read(records)
    assert words in str(caught.value)


def test_columns_known_before_the_rows_are_judged_too():
    assert prompt_columns_problem(["prompt", "answer"], None, reward_columns=READERS) is None
    assert "no column 'answer', which grpo.rewards[0]" in prompt_columns_problem(
        ["prompt", "solution"], None, reward_columns=READERS)
    assert "objective grpo reads a prompt" in prompt_columns_problem(["text"], None)
    assert "no column 'q' (columns.prompt)" in prompt_columns_problem(
        ["prompt"], ColumnMapping(prompt="q"))


def test_builtin_datasets_are_judged_by_the_columns_the_rewards_read():
    assert builtin_dataset_problem("dataset", "builtin:arithmetic-rl", objective="grpo",
                                   reward_columns=READERS) is None
    problem = builtin_dataset_problem("dataset", "builtin:arithmetic", objective="grpo",
                                      reward_columns=READERS)
    assert "no column 'answer'" in problem and "'response'" in problem
    assert builtin_dataset_problem("dataset", "builtin:arithmetic", objective="grpo",
                                   reward_columns={"response": "a reward"}) is None
    assert "prompts with answers (prompt/answer)" in builtin_dataset_problem(
        "dataset", "builtin:arithmetic-rl", objective="sft")


def test_a_file_and_a_csv_read_by_the_library_give_the_same_prompts(tmp_path):
    records = [{"prompt": f"What is {n} + 1?", "answer": str(n + 1), "extra": "x"}
               for n in range(5)]
    jsonl = tmp_path / "rl.jsonl"
    jsonl.write_text("".join(json.dumps(record) + "\n" for record in records))
    csv = tmp_path / "rl.csv"
    csv.write_text("prompt,answer,extra\n" + "".join(
        f"{record['prompt']},{record['answer']},x\n" for record in records))
    readers = (("answer", "grpo.rewards[0] (numeric_match)"),)
    from_file = load_source_prompts(DatasetSource(str(jsonl), reward_columns=readers))
    from_library = load_source_prompts(DatasetSource(str(csv), reward_columns=readers))
    assert from_file == from_library and from_file[2].columns == {"answer": "3"}


def test_the_worker_refuses_data_without_a_rewarded_column_before_a_gpu_is_taken(tmp_path):
    data = tmp_path / "rl.jsonl"
    data.write_text(json.dumps({"prompt": "Q", "solution": "4"}) + "\n")
    spec = JobSpec.model_validate({"objective": "grpo", "dataset": str(data), "max_steps": 1,
                                   "micro_batch_size": 8, "seq_len": 512})
    (problem,) = find_input_problems(spec, cuda_available=False)
    assert "record 1 has no column 'answer', which grpo.rewards[0] (numeric_match) reads" in problem
    mapped = spec.model_copy(update={"grpo": spec.grpo.model_copy(update={"rewards": [
        spec.grpo.rewards[0].model_copy(update={"column": "solution"})]})})
    assert find_input_problems(mapped, cuda_available=False) == []
