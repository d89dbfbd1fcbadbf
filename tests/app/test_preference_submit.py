"""POST /api/jobs judges a DPO spec's data as preference pairs, in the one check an SFT spec's
columns go through (app/actions/input_checks.py, parameterised by the objective): data with no
chosen/rejected after the spec's `columns` is a 422 naming the dataset's own columns, and each
built-in dataset is accepted for its own objective only."""
from __future__ import annotations

import json

JOB = {"max_steps": 1}
PAIRS = [{"prompt": "What is 2 + 2?", "chosen": "2 + 2 = 4.", "rejected": "5"}]


def refused_fields(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {item["loc"][-1]: item["msg"] for item in response.json()["detail"]}


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def test_a_dpo_spec_on_data_without_chosen_and_rejected_is_a_422_naming_its_columns(client,
                                                                                   tmp_path):
    data = write_jsonl(tmp_path / "qa.jsonl", [{"question": "2 + 2?", "answer": "4"}])
    problems = refused_fields(client.post("/api/jobs", json={**JOB, "objective": "dpo",
                                                             "dataset": str(data)}))
    assert problems["dataset"].startswith(
        f"dataset {data}: no columns 'chosen' (columns.chosen) and 'rejected' (columns.rejected); "
        "its columns are ['answer', 'question']: objective dpo reads preference pairs")
    assert client.get("/api/jobs").json() == []
    # The same data, its columns mapped: accepted.
    mapped = client.post("/api/jobs", json={**JOB, "objective": "dpo", "dataset": str(data),
                                            "columns": {"prompt": "question", "chosen": "answer",
                                                        "rejected": "answer"}})
    assert mapped.status_code == 201, mapped.text


def test_a_mapped_column_the_parquet_file_lacks_is_named_with_the_columns_it_has(client, tmp_path):
    import pyarrow
    import pyarrow.parquet

    data = tmp_path / "prefs.parquet"
    pyarrow.parquet.write_table(pyarrow.table({"q": ["2 + 2?"], "good": ["4"], "bad": ["5"]}), data)
    spec = {**JOB, "objective": "dpo", "dataset": str(data),
            "columns": {"prompt": "q", "chosen": "good", "rejected": "worse"}}
    problems = refused_fields(client.post("/api/jobs", json=spec))
    assert problems["dataset"].startswith(f"dataset {data}: no column 'worse' (columns.rejected); "
                                          "its columns are ['bad', 'good', 'q']")
    fixed = client.post("/api/jobs", json={**spec, "columns": {**spec["columns"], "rejected": "bad"}})
    assert fixed.status_code == 201, fixed.text


def test_pairs_are_accepted_for_dpo_and_refused_for_sft(client, tmp_path):
    data = write_jsonl(tmp_path / "prefs.jsonl", PAIRS)
    problems = refused_fields(client.post("/api/jobs", json={**JOB, "dataset": str(data)}))
    assert "preference pairs (chosen/rejected)" in problems["dataset"]
    assert "objective dpo" in problems["dataset"]
    held_out = write_jsonl(tmp_path / "held-out.jsonl", PAIRS)
    accepted = client.post("/api/jobs", json={**JOB, "objective": "dpo", "dataset": str(data),
                                              "eval_dataset": str(held_out)})
    assert accepted.status_code == 201, accepted.text


def test_each_built_in_dataset_is_accepted_for_its_own_objective_only(client):
    problems = refused_fields(client.post("/api/jobs", json={**JOB, "objective": "dpo"}))
    assert problems["dataset"] == (
        "dataset builtin:arithmetic: its records are supervised examples (prompt/response), and "
        "objective dpo trains on preference pairs; use builtin:arithmetic-preference")
    problems = refused_fields(client.post("/api/jobs", json={
        **JOB, "dataset": "builtin:arithmetic-preference"}))
    assert problems["dataset"].startswith("dataset builtin:arithmetic-preference: its records "
                                          "are preference pairs")
    assert problems["dataset"].endswith("use builtin:arithmetic")
    problems = refused_fields(client.post("/api/jobs", json={
        **JOB, "objective": "dpo", "dataset": "builtin:arithmetic-preference",
        "eval_dataset": "builtin:arithmetic"}))
    assert list(problems) == ["eval_dataset"]
    assert client.get("/api/jobs").json() == []
    for spec in ({**JOB}, {**JOB, "objective": "dpo", "dataset": "builtin:arithmetic-preference"}):
        assert client.post("/api/jobs", json=spec).status_code == 201
