"""Issue 7's attacks on model and dataset paths, dataset uploads and trust_remote_code,
against the app in-process (SQLite, and PostgreSQL where marked).

The app's allowed roots are pytest's temporary folder (tests/conftest.py), so tmp_path is
inside them and /etc, /dev and /usr are not.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.auth.principal import Principal
from app.ui.new_job import form_handlers
from tunedeck.accounts import users as accounts
from tunedeck.spec.job_spec import JobSpec
from worker.input_check import find_input_problems, worker_input_roots

JOB = {"max_steps": 1}
GOOD_RECORDS = [{"prompt": "1+1?", "response": "2"}, {"instruction": "2+2?", "output": "4"},
                {"messages": [{"role": "user", "content": "hi"},
                              {"role": "assistant", "content": "hello"}]}]


def jsonl(records) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def refused_fields(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {item["loc"][-1]: item["msg"] for item in response.json()["detail"]}


def assert_no_job_stored(client: TestClient) -> None:
    assert client.get("/api/jobs").json() == []


def upload(client: TestClient, content: bytes, filename: str = "train.jsonl", **kwargs):
    return client.post("/api/datasets", params={"filename": filename}, content=content,
                       headers={"Content-Type": "application/octet-stream",
                                **kwargs.pop("headers", {})}, **kwargs)


def uploads_dir(app: FastAPI, user: str = "local") -> Path:
    return app.state.settings.upload_dir_for(user)


def narrow_roots(app: FastAPI, roots: Path) -> None:
    """Allow only `roots` (not the whole pytest folder, which holds the app's home)."""
    app.state.settings = app.state.settings.model_copy(update={"allowed_roots": str(roots)})
    assert app.state.settings.allowed_root_paths == (roots.resolve(),)


def token_for(app: FastAPI, name: str, *, is_admin: bool = False) -> dict[str, str]:
    with app.state.database.transaction() as session:
        accounts.create_user(session=session, name=name, password="a-long-password-1",
                             is_admin=is_admin)
        secret = accounts.create_api_token(session=session, user_name=name)
    return {"Authorization": f"Bearer {secret}"}


# --- model and dataset paths ------------------------------------------------------------

def test_path_traversal_in_the_dataset_is_refused(hostile_client, tmp_path):
    traversal = f"{tmp_path}/../../../../etc/passwd"
    problems = refused_fields(hostile_client.post("/api/jobs", json={**JOB, "dataset": traversal}))
    assert problems["dataset"].startswith(f"dataset {traversal}: '..' is not allowed")
    assert_no_job_stored(hostile_client)


def test_etc_passwd_as_a_dataset_is_refused_naming_the_allowed_roots(hostile_client):
    problems = refused_fields(hostile_client.post("/api/jobs",
                                                  json={**JOB, "dataset": "/etc/passwd"}))
    assert problems["dataset"].startswith("dataset /etc/passwd: outside the allowed folders")
    assert "TUNEDECK_ALLOWED_ROOTS" in problems["dataset"]
    assert_no_job_stored(hostile_client)


def test_etc_passwd_as_an_eval_dataset_is_refused(hostile_client):
    problems = refused_fields(hostile_client.post("/api/jobs",
                                                  json={**JOB, "eval_dataset": "/etc/passwd"}))
    assert problems["eval_dataset"].startswith("eval_dataset /etc/passwd: outside")


def test_a_symlink_out_of_the_allowed_root_is_refused(hostile_client, tmp_path):
    link = tmp_path / "train.jsonl"
    link.symlink_to("/etc/passwd")
    problems = refused_fields(hostile_client.post("/api/jobs", json={**JOB, "dataset": str(link)}))
    assert problems["dataset"].startswith(f"dataset {link} (resolves to /etc/passwd): outside")
    assert_no_job_stored(hostile_client)


def test_dev_zero_as_a_dataset_is_refused(hostile_client):
    problems = refused_fields(hostile_client.post("/api/jobs", json={**JOB, "dataset": "/dev/zero"}))
    assert problems["dataset"].startswith("dataset /dev/zero: outside the allowed folders")


def test_a_relative_dataset_path_is_refused_asking_for_an_absolute_one(hostile_client):
    problems = refused_fields(hostile_client.post("/api/jobs",
                                                  json={**JOB, "dataset": "data/train.jsonl"}))
    assert problems["dataset"].startswith("dataset data/train.jsonl: not an absolute path")


def test_a_model_folder_outside_the_roots_is_refused(hostile_client):
    problems = refused_fields(hostile_client.post("/api/jobs", json={**JOB, "model": "/usr"}))
    assert problems["model"].startswith("model /usr: outside the allowed folders")


def test_a_dataset_inside_the_roots_and_a_hub_model_are_accepted(hostile_client, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_bytes(jsonl(GOOD_RECORDS))
    response = hostile_client.post("/api/jobs", json={**JOB, "dataset": str(data),
                                                      "model": "meta-llama/Llama-2-7b-hf"})
    assert response.status_code == 201, response.text


def test_the_worker_refuses_a_path_outside_its_roots_before_reading_it(tmp_path):
    spec = JobSpec(max_steps=1, dataset="/etc/passwd")
    (problem,) = find_input_problems(spec, cuda_available=False, allowed_roots=[tmp_path])
    assert problem.startswith("dataset /etc/passwd: outside the allowed folders")


def test_the_worker_allows_only_the_owners_uploads(hostile_app, tmp_path):
    narrow_roots(hostile_app, tmp_path / "data")
    settings = hostile_app.state.settings
    alice_data = settings.upload_dir_for("alice") / "abc-train.jsonl"
    spec = JobSpec(max_steps=1, dataset=str(alice_data))
    assert find_input_problems(spec, allowed_roots=worker_input_roots(settings, "bob"))[0] \
        .startswith(f"dataset {alice_data}: outside the allowed folders")
    problems = find_input_problems(spec, allowed_roots=worker_input_roots(settings, "alice"))
    assert problems[0].startswith(f"dataset {alice_data}: no such file")


# --- trust_remote_code ----------------------------------------------------------------------

def test_trust_remote_code_is_refused_for_a_non_admin(hostile_app, hostile_client):
    headers = token_for(hostile_app, "bob")
    response = hostile_client.post("/api/jobs", json={**JOB, "trust_remote_code": True},
                                   headers=headers)
    assert refused_fields(response)["trust_remote_code"].startswith(
        "trust_remote_code: only an admin may turn it on")
    assert hostile_client.get("/api/jobs", headers=headers).json() == []
    assert hostile_client.post("/api/jobs", json=JOB, headers=headers).status_code == 201


def test_trust_remote_code_is_allowed_for_an_admin(hostile_app, hostile_client):
    headers = token_for(hostile_app, "root", is_admin=True)
    response = hostile_client.post("/api/jobs", json={**JOB, "trust_remote_code": True},
                                   headers=headers)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["trust_remote_code"] is True


def test_the_form_refuses_trust_remote_code_and_outside_paths_for_a_non_admin(hostile_app):
    form = {**form_handlers.default_form(), "dataset": "/etc/passwd"}
    job_id, message = form_handlers.submit_form(
        form, database=hostile_app.state.database, celery_app=hostile_app.state.celery_app,
        principal=Principal(name="bob", is_admin=False), settings=hostile_app.state.settings)
    assert job_id is None and "Not submitted" in message
    assert "dataset /etc/passwd: outside the allowed folders" in message


# --- uploads --------------------------------------------------------------------------------

def test_a_2_gb_upload_is_refused_before_its_body_is_read(hostile_client, hostile_app):
    chunks_read = []

    def body():
        for _ in range(4):
            chunks_read.append(1)
            yield b"x" * 65536

    response = upload(hostile_client, body(), headers={"Content-Length": str(2 * 1024**3)})
    assert response.status_code == 413, response.text
    assert "larger than 1024 MB" in response.json()["detail"]
    assert chunks_read == []  # the server answered without asking for a byte of the body
    assert not uploads_dir(hostile_app).exists() or not any(uploads_dir(hostile_app).iterdir())


def test_a_chunked_upload_past_a_small_cap_is_refused_and_leaves_no_file(hostile_client,
                                                                         hostile_app):
    hostile_app.state.settings = hostile_app.state.settings.model_copy(update={"max_upload_mb": 1})

    def body():  # no Content-Length: sent chunked, 3 MB of valid records
        line = json.dumps(GOOD_RECORDS[0]).encode() + b"\n"
        for _ in range(3 * 1024 * 1024 // len(line)):
            yield line

    response = upload(hostile_client, body())
    assert response.status_code == 413, response.text
    assert "larger than 1 MB" in response.json()["detail"]
    assert list(uploads_dir(hostile_app).iterdir()) == []


@pytest.mark.parametrize("content, expected", [
    (b'{"prompt": "1+1?", "response": "2"}\n{"prompt": oops}\n',
     "dataset train.jsonl: line 2 is not valid JSON"),
    (b'{"prompt": "1+1?", "response": "2"}\n{"question": "2+2?"}\n',
     "dataset train.jsonl: record 2 has keys ['question']; expected instruction/output"),
    (b'[1, 2]\n', "dataset train.jsonl: record 1 is a list; expected an object"),
    (b"\n\n", "dataset train.jsonl: no records"),
    (b"\xff\xfe\x00", "dataset train.jsonl: not UTF-8 text"),
], ids=["bad-json", "columns-change", "not-objects", "empty", "not-utf8"])
def test_a_malformed_upload_is_refused_naming_the_file(hostile_client, hostile_app, content,
                                                       expected):
    response = upload(hostile_client, content)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["msg"].startswith(expected)
    assert list(uploads_dir(hostile_app).iterdir()) == []


@pytest.mark.parametrize("filename, content, expected", [
    ("train.csv", b"prompt,response\n1+1?,2\n2+2?\n", "dataset train.csv: line 3 has 1 fields"),
    ("train.csv", b"", "dataset train.csv: no header row"),
    ("train.jsonl.gz", b"not gzip", "dataset train.jsonl.gz: cannot be read"),
    ("train.parquet", b"not parquet", "dataset train.parquet: not a Parquet file"),
], ids=["csv-ragged", "csv-empty", "not-gzip", "not-parquet"])
def test_a_malformed_table_upload_is_refused_naming_the_file(hostile_client, hostile_app,
                                                             filename, content, expected):
    response = upload(hostile_client, content, filename=filename)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["msg"].startswith(expected)
    assert list(uploads_dir(hostile_app).iterdir()) == []


@pytest.mark.parametrize("filename", ["train.py", "train.gz", "train", "",
                                      "x" * 300 + ".jsonl"])
def test_an_upload_name_without_a_dataset_extension_is_refused(hostile_client, hostile_app,
                                                               filename):
    response = upload(hostile_client, jsonl(GOOD_RECORDS), filename=filename)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == "filename"
    assert not uploads_dir(hostile_app).exists()


@pytest.mark.parametrize("filename, kept", [
    ("My Data (v2).jsonl", "My-Data-v2.jsonl"), ("../train.jsonl", "train.jsonl"),
    ("/etc/train.jsonl", "train.jsonl"), (".hidden.jsonl", "hidden.jsonl"),
])
def test_an_unsafe_upload_name_is_made_safe_inside_the_uploaders_folder(hostile_client,
                                                                        hostile_app, filename,
                                                                        kept):
    response = upload(hostile_client, jsonl(GOOD_RECORDS), filename=filename)
    assert response.status_code == 201, response.text
    path = Path(response.json()["dataset"])
    assert path.parent == uploads_dir(hostile_app)
    assert path.name == f"{response.json()['sha256'][:12]}-{kept}"


def write_parquet(path: Path, table: dict[str, list]) -> bytes:
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.table(table), path)
    return path.read_bytes()


def test_every_file_format_the_trainer_reads_can_be_uploaded(hostile_client, tmp_path):
    import gzip

    bodies = {
        "train.parquet": write_parquet(tmp_path / "t.parquet", {"prompt": ["1+1?", "2+2?"],
                                                                "response": ["2", "4"]}),
        "train.csv": b'instruction,output\n"add 1, 1",2\n\nadd 2 and 2,4\n',
        "train.jsonl.gz": gzip.compress(jsonl(GOOD_RECORDS)),
    }
    for filename, content in bodies.items():
        response = upload(hostile_client, content, filename=filename)
        assert response.status_code == 201, (filename, response.text)
        stored = response.json()
        assert stored["dataset"].endswith(f"-{filename}") and stored["usual_columns"], stored
        assert stored["records"] == (3 if filename.endswith("gz") else 2), filename
        job = hostile_client.post("/api/jobs", json={**JOB, "dataset": stored["dataset"]})
        assert job.status_code == 201, job.text


def test_a_file_with_other_columns_is_kept_with_the_likely_columns_named(hostile_client,
                                                                        tmp_path):
    parquet = write_parquet(tmp_path / "qa.parquet", {"id": [1], "question": ["1+1?"],
                                                      "answer": ["2"]})
    for filename, content in (("qa.jsonl", b'{"question": "1+1?", "answer": "2"}\n'),
                              ("qa.csv", b"id,question,answer\n1,1+1?,2\n"),
                              ("qa.parquet", parquet)):
        stored = upload(hostile_client, content, filename=filename).json()
        assert stored["usual_columns"] is False and stored["records"] == 1, stored
        assert stored["guessed_columns"] == {"prompt": "question", "response": "answer"}
    stored = upload(hostile_client, b'{"text": "a"}\n{"text": "b"}\n', filename="t.jsonl").json()
    assert (stored["records"], stored["columns"], stored["guessed_columns"]) == (2, ["text"], None)


def test_a_good_upload_is_usable_as_a_jobs_dataset(hostile_client, hostile_app):
    content = jsonl(GOOD_RECORDS)
    response = upload(hostile_client, content, filename="chat.json.jsonl")
    assert response.status_code == 201, response.text
    stored = response.json()
    path = Path(stored["dataset"])
    assert (stored["records"], stored["bytes"]) == (3, len(content))
    assert path.parent == uploads_dir(hostile_app) and path.name.endswith("-chat.json.jsonl")
    assert path.name.startswith(stored["sha256"][:12]) and path.read_bytes() == content
    job = hostile_client.post("/api/jobs", json={**JOB, "dataset": str(path)})
    assert job.status_code == 201, job.text
    assert job.json()["spec"]["dataset"] == str(path)


def test_a_json_list_upload_is_accepted(hostile_client):
    response = upload(hostile_client, json.dumps(GOOD_RECORDS).encode(), filename="train.json")
    assert response.status_code == 201, response.text
    assert response.json()["records"] == 3


def test_another_users_upload_is_not_a_dataset_for_bob(hostile_app, hostile_client, tmp_path):
    narrow_roots(hostile_app, tmp_path / "data")
    alice = token_for(hostile_app, "alice")
    bob = token_for(hostile_app, "bob")
    stored = upload(hostile_client, jsonl(GOOD_RECORDS), headers=alice).json()["dataset"]
    assert Path(stored).parent == uploads_dir(hostile_app, "alice")
    assert hostile_client.post("/api/jobs", json={**JOB, "dataset": stored},
                               headers=alice).status_code == 201
    problems = refused_fields(hostile_client.post("/api/jobs", json={**JOB, "dataset": stored},
                                                  headers=bob))
    assert problems["dataset"].startswith(f"dataset {stored}: outside the allowed folders")


def test_the_memory_plan_reads_no_model_folder_outside_the_roots(hostile_client, tmp_path_factory):
    import json as _json

    outside = tmp_path_factory.getbasetemp().parent / "plan-probe-model"
    outside.mkdir(exist_ok=True)
    (outside / "config.json").write_text(_json.dumps({"model_type": "llama"}))
    response = hostile_client.post("/api/plan", json={"spec": {"model": str(outside), "max_steps": 1}})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "spec", "model"], response.text


# --- the New job form's upload: the same rule -------------------------------------------------

def test_the_forms_upload_keeps_a_good_file_and_refuses_a_bad_one(tmp_path):
    import json as _json

    from app.auth.principal import Principal
    from app.ui.new_job.upload_handlers import upload_dataset_from_form
    from tunedeck.db.engine import Database
    from tunedeck.db.migrate import upgrade_database
    from tunedeck.settings import Settings

    settings = Settings(home=tmp_path / "home", database_url=None, broker_url=None)
    upgrade_database(settings.resolved_database_url)
    database = Database(settings.resolved_database_url)
    alice = Principal("alice", is_admin=False)
    received = tmp_path / "gradio" / "train.jsonl"
    received.parent.mkdir()
    received.write_text("\n".join(_json.dumps({"prompt": f"q{i}", "response": f"a{i}"})
                                  for i in range(5)))
    answer = upload_dataset_from_form(str(received), principal=alice, settings=settings,
                                      database=database)
    assert Path(answer.dataset).parent == settings.upload_dir_for("alice")
    assert "5 records" in answer.message and not answer.show_columns
    assert not received.exists()  # Gradio's copy is gone; ours is in the uploads folder

    bad = tmp_path / "gradio" / "bad.jsonl"
    bad.write_text('{"prompt": oops}\n')
    answer = upload_dataset_from_form(str(bad), principal=alice, settings=settings,
                                      database=database)
    assert answer.dataset is None and answer.message.startswith("Upload refused: ")
    assert "bad.jsonl" in answer.message
    kept = list(settings.upload_dir_for("alice").iterdir())
    assert [path.name.split("-", 1)[1] for path in kept] == ["train.jsonl"]  # nothing of bad.jsonl

    other = tmp_path / "gradio" / "My QA (v2).csv"
    other.write_text("question,answer\n1+1?,2\n")
    answer = upload_dataset_from_form(str(other), principal=alice, settings=settings,
                                      database=database)
    assert answer.dataset.endswith("-My-QA-v2.csv") and answer.show_columns
    assert (answer.columns["prompt"], answer.columns["response"]) == ("question", "answer")
    assert "as **My-QA-v2.csv**" in answer.message and "prompt → `question`" in answer.message
    database.dispose()


def test_a_model_folder_without_config_and_unmapped_columns_are_refused_by_field(hostile_client,
                                                                                tmp_path):
    """The checks the form makes under each field as it is typed (app/actions/input_checks.py)."""
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n')
    problems = refused_fields(hostile_client.post(
        "/api/jobs", json={**JOB, "model": str(empty), "dataset": str(data)}))
    assert problems["model"] == (f"model {empty}: no config.json in this folder; expected a "
                                 "Hugging Face model folder (config.json, the weights and the "
                                 "tokenizer files)")
    assert "likely columns: {prompt: question, response: answer}" in problems["dataset"]
    assert_no_job_stored(hostile_client)
    mapped = hostile_client.post("/api/jobs", json={
        **JOB, "dataset": str(data), "columns": {"prompt": "question", "response": "answer"}})
    assert mapped.status_code == 201, mapped.text
