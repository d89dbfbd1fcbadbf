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
from tunedeck.job_spec import JobSpec
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
    (b'{"question": "1+1?", "answer": "2"}\n',
     "dataset train.jsonl: record 1 has keys ['answer', 'question']; expected instruction/output"),
    (b"\n\n", "dataset train.jsonl: no records"),
    (b"\xff\xfe\x00", "dataset train.jsonl: not UTF-8 text"),
], ids=["bad-json", "wrong-columns", "empty", "not-utf8"])
def test_a_malformed_upload_is_refused_naming_the_file(hostile_client, hostile_app, content,
                                                       expected):
    response = upload(hostile_client, content)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["msg"].startswith(expected)
    assert list(uploads_dir(hostile_app).iterdir()) == []


@pytest.mark.parametrize("filename", ["../train.jsonl", "/etc/train.jsonl", "train.csv",
                                      "train.py", ".hidden.jsonl", "a/b.jsonl", "",
                                      "x" * 300 + ".jsonl"])
def test_an_unsafe_upload_filename_is_refused(hostile_client, hostile_app, filename):
    response = upload(hostile_client, jsonl(GOOD_RECORDS), filename=filename)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == "filename"
    assert not uploads_dir(hostile_app).exists()


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
    from tunedeck.migrate import upgrade_database
    from tunedeck.settings import Settings

    settings = Settings(home=tmp_path / "home", database_url=None, broker_url=None)
    upgrade_database(settings.resolved_database_url)
    database = Database(settings.resolved_database_url)
    alice = Principal("alice", is_admin=False)
    received = tmp_path / "gradio" / "train.jsonl"
    received.parent.mkdir()
    received.write_text("\n".join(_json.dumps({"prompt": f"q{i}", "response": f"a{i}"})
                                  for i in range(5)))
    dataset, message = upload_dataset_from_form(str(received), principal=alice,
                                                settings=settings, database=database)
    assert Path(dataset).parent == settings.upload_dir_for("alice") and "5 records" in message
    assert not received.exists()  # Gradio's copy is gone; ours is in the uploads folder

    bad = tmp_path / "gradio" / "bad.jsonl"
    bad.write_text('{"text": "no prompt or response"}\n')
    dataset, message = upload_dataset_from_form(str(bad), principal=alice, settings=settings,
                                                database=database)
    assert dataset is None and message.startswith("Upload refused: ") and "bad.jsonl" in message
    kept = list(settings.upload_dir_for("alice").iterdir())
    assert [path.name.split("-", 1)[1] for path in kept] == ["train.jsonl"]  # nothing of bad.jsonl
    database.dispose()
