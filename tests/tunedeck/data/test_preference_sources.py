"""Preference pairs read from every source SFT examples are read from (tunedeck.data.sources'
`load_source_pairs`: local .jsonl/.json files, and .parquet/.csv files and folders through the
`datasets` library), in the spec's columns; data without chosen/rejected columns refused naming
the columns it has, before its rows are read where they are known (and by the web's checks,
`columns_problem(..., objective="dpo")`); an upload of pairs checked pair by pair."""
from __future__ import annotations

import json

import pytest

from tests.hub_cache import add_hub_dataset, offline_hub  # noqa: F401
from tunedeck.data.file_check import check_dataset_file
from tunedeck.data.preference_records import PreferencePair, preference_columns_problem
from tunedeck.data.records import builtin_dataset_problem, columns_problem
from tunedeck.data.sources import DatasetSource, load_source_pairs
from tunedeck.spec.sections import ColumnMapping

USER = {"role": "user", "content": "What is 2 + 2?"}
PAIR = PreferencePair(prompt_messages=(USER,), chosen="2 + 2 = 4.", rejected="5")
RECORDS = [{"prompt": "What is 2 + 2?", "chosen": "2 + 2 = 4.", "rejected": "5"},
           {"prompt": "What is 3 + 1?", "chosen": "3 + 1 = 4.", "rejected": "4"}]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def write_parquet(path, columns: dict[str, list]):
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.table(columns), path)
    return path


def source(reference, tmp_path, **options) -> DatasetSource:
    return DatasetSource(str(reference), cache_dir=tmp_path / "hf-datasets", **options)


def test_a_jsonl_file_of_strings_is_read_into_pairs_up_to_the_limit(tmp_path):
    data = write_jsonl(tmp_path / "prefs.jsonl", RECORDS)
    pairs = load_source_pairs(source(data, tmp_path))
    assert pairs[0] == PAIR and len(pairs) == 2
    assert load_source_pairs(source(data, tmp_path), limit=1) == [PAIR]
    as_json = tmp_path / "prefs.json"
    as_json.write_text(json.dumps(RECORDS), encoding="utf-8")
    assert load_source_pairs(source(as_json, tmp_path)) == pairs


def test_chats_sharing_their_prompt_are_read_as_the_same_pair(tmp_path):
    chats = [{"chosen": [USER, {"role": "assistant", "content": "2 + 2 = 4."}],
              "rejected": [USER, {"role": "assistant", "content": "5"}]}]
    data = write_jsonl(tmp_path / "chats.jsonl", chats)
    assert load_source_pairs(source(data, tmp_path)) == [PAIR]


def test_mapped_columns_and_a_system_column_are_applied(tmp_path):
    records = [{"question": "What is 2 + 2?", "good": "2 + 2 = 4.", "bad": "5", "persona": "Be exact."},
               {"question": "What is 3 + 1?", "good": "4", "bad": "5", "persona": ""}]
    data = write_jsonl(tmp_path / "mapped.jsonl", records)
    columns = ColumnMapping(prompt="question", chosen="good", rejected="bad", system="persona")
    first, second = load_source_pairs(source(data, tmp_path, columns=columns))
    assert first.prompt_messages == ({"role": "system", "content": "Be exact."}, USER)
    assert (first.chosen, first.rejected) == ("2 + 2 = 4.", "5")
    assert second.prompt_messages == ({"role": "user", "content": "What is 3 + 1?"},)  # no system
    with pytest.raises(ValueError, match=r"record 1 has no column 'rejected'; its columns are "
                                         r"\['bad', 'good', 'persona', 'question'\]"):
        load_source_pairs(source(data, tmp_path, columns=ColumnMapping(prompt="question",
                                                                       chosen="good")))


def test_an_empty_side_is_refused_by_name_and_record_number(tmp_path):
    data = write_jsonl(tmp_path / "empty.jsonl", [RECORDS[0], {**RECORDS[1], "rejected": " "}])
    with pytest.raises(ValueError, match=rf"^dataset {data}: record 2: rejected is empty"):
        load_source_pairs(source(data, tmp_path))


def test_a_parquet_file_is_read_through_datasets_with_its_columns_mapped(tmp_path):
    data = write_parquet(tmp_path / "prefs.parquet",
                         {"question": ["What is 2 + 2?"], "good": ["2 + 2 = 4."], "bad": ["5"],
                          "id": [7]})
    columns = ColumnMapping(prompt="question", chosen="good", rejected="bad")
    assert load_source_pairs(source(data, tmp_path, columns=columns)) == [PAIR]
    usual = write_parquet(tmp_path / "usual.parquet",
                          {key: [value] for key, value in RECORDS[0].items()})
    assert load_source_pairs(source(usual, tmp_path)) == [PAIR]


def test_a_library_dataset_without_chosen_and_rejected_is_refused_naming_its_columns(tmp_path):
    sft = write_parquet(tmp_path / "sft.parquet", {"prompt": ["What is 2 + 2?"], "response": ["4"]})
    with pytest.raises(ValueError) as refused:
        load_source_pairs(source(sft, tmp_path))
    assert str(refused.value).startswith(
        f"dataset {sft}: no columns 'chosen' (columns.chosen) and 'rejected' (columns.rejected); "
        "its columns are ['prompt', 'response']: objective dpo reads preference pairs")


def test_a_csv_file_and_a_saved_folder_are_read(tmp_path):
    import datasets

    csv_file = tmp_path / "prefs.csv"
    csv_file.write_text('prompt,chosen,rejected\nWhat is 2 + 2?,2 + 2 = 4.,5\n', encoding="utf-8")
    assert load_source_pairs(source(csv_file, tmp_path)) == [PAIR]
    folder = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(RECORDS),
                          "test": datasets.Dataset.from_list(RECORDS[:1])}).save_to_disk(str(folder))
    assert load_source_pairs(source(folder, tmp_path, split="test")) == [PAIR]
    assert len(load_source_pairs(source(folder, tmp_path))) == 2


def test_a_hub_id_is_read_from_the_hub_cache_offline(offline_hub, tmp_path):  # noqa: F811
    add_hub_dataset(offline_hub, "tunedeck-test/prefs",
                    {"q": ["What is 2 + 2?"] * 3, "good": ["2 + 2 = 4."] * 3, "bad": ["5"] * 3})
    columns = ColumnMapping(prompt="q", chosen="good", rejected="bad")
    assert load_source_pairs(source("tunedeck-test/prefs", tmp_path, columns=columns),
                             limit=2) == [PAIR, PAIR]
    with pytest.raises(ValueError, match=r"its columns are \['bad', 'good', 'q'\]"):
        load_source_pairs(source("tunedeck-test/prefs", tmp_path))


def test_the_columns_check_is_one_path_parameterised_by_the_objective():
    assert columns_problem(["prompt", "chosen", "rejected"], None, objective="dpo") is None
    assert columns_problem(["chosen", "rejected"], None, objective="dpo") is None  # chats
    problem = columns_problem(["question", "answer"], None, objective="dpo")
    assert problem == preference_columns_problem(["question", "answer"], None)
    assert problem.startswith("no columns 'chosen' (columns.chosen) and 'rejected' "
                              "(columns.rejected); its columns are ['answer', 'question']")
    mapped = ColumnMapping(prompt="q", chosen="good", rejected="worse")
    assert columns_problem(["q", "good", "bad"], mapped, objective="dpo").startswith(
        "no column 'worse' (columns.rejected); its columns are ['bad', 'good', 'q']")
    assert columns_problem(["q", "good", "worse"], mapped, objective="dpo") is None
    # Pairs for sft: said so, with the objective that trains on them.
    assert "train on them with objective dpo" in columns_problem(["prompt", "chosen", "rejected"],
                                                                  None)


def test_built_in_datasets_fit_their_own_objective_only():
    assert builtin_dataset_problem("dataset", "builtin:arithmetic") is None
    assert builtin_dataset_problem("dataset", "builtin:arithmetic-preference", objective="dpo") is None
    assert builtin_dataset_problem("dataset", "builtin:arithmetic", objective="dpo") == (
        "dataset builtin:arithmetic: its records are supervised examples (prompt/response), and "
        "objective dpo trains on preference pairs; use builtin:arithmetic-preference")
    assert builtin_dataset_problem("eval_dataset", "builtin:arithmetic-preference") == (
        "eval_dataset builtin:arithmetic-preference: its records are preference pairs "
        "(prompt/chosen/rejected), and objective sft trains on supervised examples; use "
        "builtin:arithmetic")
    assert "unknown built-in dataset" in builtin_dataset_problem("dataset", "builtin:poetry")


def test_an_upload_of_pairs_has_the_usual_columns_and_every_pair_checked(tmp_path):
    checked = check_dataset_file(write_jsonl(tmp_path / "prefs.jsonl", RECORDS))
    assert (checked.records, checked.usual_columns, checked.pairs) == (2, True, True)
    bad = write_jsonl(tmp_path / "bad.jsonl", [RECORDS[0], {**RECORDS[1], "chosen": ""}])
    with pytest.raises(ValueError, match=rf"dataset {bad}: record 2: chosen is empty"):
        check_dataset_file(bad)
    examples = check_dataset_file(write_jsonl(tmp_path / "sft.jsonl",
                                              [{"prompt": "a", "response": "b"}]))
    assert examples.usual_columns and not examples.pairs
