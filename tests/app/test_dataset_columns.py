"""The New job form's dataset options: the column pickers offer the columns the web can read
cheaply (never through the `datasets` library), only from paths the user may name, and the
form carries dataset_config, the splits and `columns` into the spec."""
import gzip
import json

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.new_job import form_handlers
from app.ui.new_job.column_handlers import dataset_column_choices
import pytest

from tunedeck.data.columns import guess_column_mapping, peek_columns
from tunedeck.settings import Settings


def test_columns_are_read_from_each_cheap_format(tmp_path):
    import datasets
    import pyarrow
    import pyarrow.parquet

    record = {"question": "1 + 1?", "answer": "2"}
    (tmp_path / "a.jsonl").write_text("\n" + json.dumps(record) + "\n")
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as file:
        file.write(json.dumps(record) + "\n")
    (tmp_path / "a.json").write_text(json.dumps([record]))
    (tmp_path / "a.csv").write_text("question,answer\n1 + 1?,2\n")
    pyarrow.parquet.write_table(pyarrow.table({"question": ["q"], "answer": ["a"]}),
                                tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.jsonl.gz", "a.json", "a.csv", "a.parquet"):
        assert peek_columns(str(tmp_path / name)) == ["question", "answer"], name
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"prompt": ["p"], "response": ["r"]}),
                          "test": datasets.Dataset.from_dict({"q": ["p"], "a": ["r"]})}
                         ).save_to_disk(str(saved))
    assert peek_columns(str(saved)) == ["prompt", "response"]
    assert peek_columns(str(saved), split="test[:50%]") == ["q", "a"]
    assert peek_columns(str(tmp_path / "missing.csv")) is None


@pytest.mark.parametrize("names, prompt, response", [
    (["id", "question", "answer"], "question", "answer"),
    (["Instruction", "Output"], "Instruction", "Output"),
    (["input", "output"], "input", "output"),
    (["query", "completion"], "query", "completion"),
    (["problem", "solution", "question"], "question", "solution"),
    (["text", "meta"], None, None),
    (["prompt"], None, None),
])
def test_the_likely_prompt_and_response_columns_are_guessed(names, prompt, response):
    guessed = guess_column_mapping(names)
    assert (guessed.prompt, guessed.response) == (prompt, response) if prompt else guessed is None


def test_the_pickers_offer_an_allowed_files_columns_only(tmp_path):
    allowed, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    allowed.mkdir(), elsewhere.mkdir()
    settings = Settings(home=tmp_path / "home", allowed_roots=str(allowed))
    (allowed / "qa.csv").write_text("question,answer\n1 + 1?,2\n")
    (elsewhere / "secret.csv").write_text("password,hint\nx,y\n")

    def offered(reference: str):
        return dataset_column_choices(reference, "train", principal=OPEN_PRINCIPAL,
                                      settings=settings)

    assert offered(str(allowed / "qa.csv")) == (
        ["question", "answer"], "Columns of this dataset: `question`, `answer`")
    assert offered(str(elsewhere / "secret.csv")) == ([], "")  # submit says why
    names, hint = offered("org/name")
    assert names == [] and hint.startswith("A Hugging Face id: its columns are not read here")
    assert offered("builtin:arithmetic") == ([], "")


def test_the_form_carries_the_dataset_options_into_the_spec():
    form = {**form_handlers.default_form(), "dataset": "org/name", "dataset_config": " en ",
            "dataset_split": "", "eval_dataset": "org/name", "eval_dataset_split": "validation",
            "columns_prompt": "question", "columns_response": "answer", "columns_system": " "}
    spec, problems = form_handlers.form_to_spec(form)
    assert problems == ""
    assert (spec.dataset_config, spec.dataset_split, spec.eval_dataset_split) == (
        "en", "train", "validation")
    assert spec.columns.model_dump() == {"prompt": "question", "response": "answer",
                                         "messages": None, "system": None, "chosen": None,
                                         "rejected": None}
    _, problems = form_handlers.form_to_spec({**form, "columns_messages": "chat"})
    assert problems.startswith("columns: set columns.messages (a chat) or columns.prompt/response")


def test_the_pickers_open_for_columns_that_are_not_the_objectives_usual_ones():
    from app.ui.new_job import column_handlers

    pairs, examples = ["prompt", "chosen", "rejected"], ["prompt", "response"]
    assert not column_handlers.columns_to_choose(pairs, objective="dpo")
    assert column_handlers.columns_to_choose(pairs, objective="sft")
    assert column_handlers.columns_to_choose(examples, objective="dpo")
    assert not column_handlers.columns_to_choose(examples)
