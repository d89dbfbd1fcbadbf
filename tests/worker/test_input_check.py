import json

from tunedeck.job_spec import JobSpec
from worker.input_check import find_input_problems


def spec(**fields) -> JobSpec:
    return JobSpec(max_steps=1, **fields)


def test_builtins_and_hub_ids_pass():
    assert find_input_problems(spec()) == []
    assert find_input_problems(spec(model="meta-llama/Meta-Llama-3-8B")) == []


def test_missing_model_folder_names_the_path(tmp_path):
    missing = tmp_path / "no-model"
    assert find_input_problems(spec(model=str(missing))) == [
        f"model {missing}: no such folder; expected a Hugging Face model folder"]


def test_model_folder_without_config(tmp_path):
    (problem,) = find_input_problems(spec(model=str(tmp_path)))
    assert str(tmp_path) in problem and "config.json" in problem


def test_missing_dataset_file_names_the_path(tmp_path):
    missing = tmp_path / "train.jsonl"
    (problem,) = find_input_problems(spec(dataset=str(missing)))
    assert problem.startswith(f"dataset {missing}: no such file")


def test_unknown_builtin_and_unsupported_format(tmp_path):
    csv = tmp_path / "train.csv"
    csv.write_text("a,b\n")
    problems = find_input_problems(spec(model="builtin:gpt-5", dataset=str(csv)))
    assert "unknown built-in model" in problems[0]
    assert problems[1] == f"dataset {csv}: unsupported file type '.csv'; expected .jsonl or .json"


def test_wrong_columns_name_the_file_the_record_and_the_expected_shapes(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n"
                    + json.dumps({"question": "a", "answer": "b"}) + "\n")
    assert find_input_problems(spec(dataset=str(data))) == [
        f"dataset {data}: record 2 has keys ['answer', 'question']; "
        "expected instruction/output, prompt/response or messages"]


def test_a_directory_is_not_a_dataset(tmp_path):
    (problem,) = find_input_problems(spec(dataset=str(tmp_path)))
    assert problem.startswith(f"dataset {tmp_path}: no such file")


def test_existing_jsonl_passes(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    assert find_input_problems(spec(dataset=str(data))) == []
