"""The formats people have, read by the trainer's one loader (`load_examples`) into the same
Examples: a save_to_disk folder, .parquet, .csv and .jsonl.gz files, and a Hugging Face id
from the hub cache with HF_HUB_OFFLINE=1; `columns` names columns called otherwise."""
import gzip
import json

import pytest

from tests.hub_cache import add_hub_dataset, offline_hub  # noqa: F401
from trainer.data.datasets import load_examples, load_spec_examples
from tunedeck.data.records import Example, single_turn
from tunedeck.data.sources import DatasetSource
from tunedeck.spec.sections import ColumnMapping
from tunedeck.spec.job_spec import JobSpec

QUESTIONS = {"question": ["What is 1 + 1?", "What is 2 + 3?"], "answer": ["2", "5"],
             "persona": ["Answer with digits.", ""]}
QA = ColumnMapping(prompt="question", response="answer", system="persona")
EXPECTED = [Example(prompt_messages=({"role": "system", "content": "Answer with digits."},
                                     {"role": "user", "content": "What is 1 + 1?"}), response="2"),
            single_turn("What is 2 + 3?", "5")]  # an empty system column adds no turn


def source(reference, tmp_path, **options) -> DatasetSource:
    return DatasetSource(str(reference), cache_dir=tmp_path / "hf-datasets", **options)


def write_parquet(path, columns: dict[str, list]):
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.table(columns), path)
    return path


def test_a_save_to_disk_folder_is_read_at_its_split(tmp_path):
    import datasets

    folder = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({key: ["x", "y"] for key in QUESTIONS}),
                          "test": datasets.Dataset.from_dict(QUESTIONS)}).save_to_disk(str(folder))
    assert load_examples(source(folder, tmp_path, split="test", columns=QA)) == EXPECTED
    # Slices and sums as load_dataset reads them, by the library's own parser.
    assert load_examples(source(folder, tmp_path, split="test[:50%]", columns=QA)) == \
        EXPECTED[:len(EXPECTED) // 2]
    assert len(load_examples(source(folder, tmp_path, split="train[1:]+test", columns=QA))) == \
        1 + len(EXPECTED)
    with pytest.raises(ValueError, match=r"dataset_split 'validation': Unknown split .*"
                                         r"\(the folder's splits are \['test', 'train'\]\)"):
        load_examples(source(folder, tmp_path, split="validation", columns=QA))
    chat = tmp_path / "chat"
    datasets.Dataset.from_dict({"messages": [[{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": "hello"}]]}
                               ).save_to_disk(str(chat))
    assert load_examples(source(chat, tmp_path)) == [single_turn("hi", "hello")]


def test_a_parquet_file_with_other_column_names(tmp_path):
    data = write_parquet(tmp_path / "train.parquet", {**QUESTIONS, "id": [1, 2]})
    assert load_examples(source(data, tmp_path, columns=QA)) == EXPECTED
    with pytest.raises(ValueError) as unmapped:
        load_examples(source(data, tmp_path))
    assert str(unmapped.value) == (
        f"dataset {data}: its columns are ['answer', 'id', 'persona', 'question']: none of "
        "instruction/output, prompt/response or messages; name yours with columns (likely "
        "columns: {prompt: question, response: answer})")
    with pytest.raises(ValueError) as missing:
        load_examples(source(data, tmp_path, columns=ColumnMapping(prompt="query", response="answer")))
    assert str(missing.value) == (f"dataset {data}: no column 'query' (columns.prompt); its "
                                  "columns are ['answer', 'id', 'persona', 'question']")


def test_a_parquet_chat_column_named_otherwise(tmp_path):
    turns = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]
    data = write_parquet(tmp_path / "chat.parquet", {"conversation": [turns]})
    assert load_examples(source(data, tmp_path, columns=ColumnMapping(messages="conversation"))) \
        == [single_turn("2 + 2?", "4")]


def test_a_csv_file_with_other_column_names_keeps_its_text(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text('question,answer,persona\nWhat is 1 + 1?,2,Answer with digits.\n'
                    '"What is 2 + 3?",5,\nPad the code,007,\n', encoding="utf-8")
    examples = load_examples(source(data, tmp_path, columns=QA))
    # Text stays text: "007" is not the number 7, an empty cell is not NaN.
    assert examples == [*EXPECTED, single_turn("Pad the code", "007")]
    header_only = tmp_path / "empty.csv"
    header_only.write_text("question,answer\n")
    with pytest.raises(ValueError, match=f"dataset {header_only}: no records"):
        load_examples(source(header_only, tmp_path, columns=QA))


def test_a_gzipped_jsonl_file_in_the_usual_shapes(tmp_path):
    data = tmp_path / "train.jsonl.gz"
    with gzip.open(data, "wt", encoding="utf-8") as file:
        file.write(json.dumps({"instruction": "Add", "input": "1 + 1", "output": "2"}) + "\n\n")
        file.write(json.dumps({"prompt": "What is 2 + 3?", "response": "5"}) + "\n")
    assert load_examples(str(data)) == [single_turn("Add\n\n1 + 1", "2"),
                                        single_turn("What is 2 + 3?", "5")]
    assert load_examples(str(data), limit=1) == [single_turn("Add\n\n1 + 1", "2")]
    with pytest.raises(ValueError) as missing:
        load_examples(source(data, tmp_path, columns=ColumnMapping(prompt="instruction")))
    assert str(missing.value) == (f"dataset {data}: record 1 has no column 'response' "
                                  "(columns.response); its columns are ['input', 'instruction', "
                                  "'output']")


def test_a_dataset_id_is_read_from_the_hub_cache_offline(offline_hub, tmp_path):
    add_hub_dataset(offline_hub, "tunedeck-test/arithmetic", QUESTIONS)
    assert load_examples(source("tunedeck-test/arithmetic", tmp_path, columns=QA)) == EXPECTED
    spec = JobSpec(max_steps=1, dataset="tunedeck-test/arithmetic", columns=QA)
    assert load_spec_examples(spec) == EXPECTED
    with pytest.raises(ValueError, match="dataset_split 'validation'"):
        load_examples(source("tunedeck-test/arithmetic", tmp_path, split="validation", columns=QA))


def test_a_dataset_id_missing_offline_names_the_id_and_hf_hub_offline(offline_hub, tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        load_examples(source("tunedeck-test/absent", tmp_path, field="eval_dataset"))
    message = str(missing.value)
    assert message.startswith(f"eval_dataset tunedeck-test/absent: not in this host's Hugging "
                              f"Face cache ({offline_hub}")
    assert "HF_HUB_OFFLINE=1 forbids downloading it" in message
    assert "hf download tunedeck-test/absent --repo-type dataset" in message
