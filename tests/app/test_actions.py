"""The policy layer (app/actions/) called directly, as both front-ends call it: a real
SQLite database and the real server-less broker. Each action checks access, acts, audits
once, and raises the typed errors the REST API maps to status codes."""
import json

import pytest

from app.actions import accounts, checkpoints, compare_backends, plan, retry, submit
from app.actions.errors import Conflict, Forbidden, Invalid, NotFound, TooLarge
from app.actions.lora_preview import preview_lora_targets
from app.actions.upload import DatasetRefused, DatasetUpload, safe_upload_name
from app.api.errors import http_error
from app.auth.principal import OPEN_PRINCIPAL, Principal
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit
from tunedeck.services.broker import make_celery
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.plan_request import PlanRequest
from tunedeck.settings import Settings

ALICE, BOB = Principal("alice", is_admin=False), Principal("bob", is_admin=False)
ROOT = Principal("root", is_admin=True)
SPEC = JobSpec(name="acted", max_steps=5)


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(home=tmp_path, max_upload_mb=1)


@pytest.fixture
def celery_app(settings):
    return make_celery(settings)


def trail(database, job_id=None) -> list[tuple[str, str]]:
    """(actor, action) of each audit record, oldest first."""
    with database.transaction() as session:
        events = audit.list_events(session=session, job_id=job_id)
        return [(event.actor, event.action) for event in reversed(events)]


def submitted(principal, database, celery_app, settings, spec=SPEC) -> int:
    return submit.submit(principal, spec, database=database, celery_app=celery_app,
                         settings=settings).id


def test_submit_stores_the_principals_job_and_audits_it_once(database, celery_app, settings):
    job = submit.submit(ALICE, SPEC, database=database, celery_app=celery_app,
                        settings=settings, client="127.0.0.9")
    assert job.owner == "alice" and job.status == "queued"
    assert trail(database, job.id) == [("alice", "submit")]
    open_job = submit.submit(OPEN_PRINCIPAL, SPEC, database=database, celery_app=celery_app,
                             settings=settings)
    assert open_job.owner is None


def test_submit_refuses_paths_outside_the_roots_by_field_and_stores_nothing(
        database, celery_app, settings):
    with pytest.raises(Invalid) as refused:
        submit.submit(ALICE, JobSpec(model="/etc", max_steps=5, trust_remote_code=True),
                      database=database, celery_app=celery_app, settings=settings)
    assert [location for location, _message in refused.value.problems] == [
        ("model",), ("trust_remote_code",)]
    assert http_error(refused.value).detail[0]["loc"] == ["body", "model"]
    with database.transaction() as session:
        assert job_queries.list_jobs(session=session) == []
    assert trail(database) == []


def test_another_users_job_is_not_found_by_every_job_action(database, celery_app, settings):
    alices = submitted(ALICE, database, celery_app, settings)
    for act in (lambda: submit.cancel(BOB, alices, database=database),
                lambda: checkpoints.resume(BOB, alices, database=database, celery_app=celery_app),
                lambda: retry.retry(BOB, alices, database=database, celery_app=celery_app),
                lambda: compare_backends.compare_backends(BOB, alices, database=database,
                                                          celery_app=celery_app),
                lambda: submit.cancel(BOB, 2**40, database=database)):
        with pytest.raises(NotFound, match="does not exist"):
            act()
    assert trail(database, alices) == [("alice", "submit")]
    submit.cancel(ROOT, alices, database=database)
    assert trail(database, alices) == [("alice", "submit"), ("root", "cancel")]


def test_refusals_of_a_jobs_state_are_conflicts(database, celery_app, settings):
    queued = submitted(ALICE, database, celery_app, settings)
    with pytest.raises(checkpoints.NothingToResume, match="is queued") as not_resumed:
        checkpoints.resume(ALICE, queued, database=database, celery_app=celery_app)
    with pytest.raises(retry.RetryRefused, match="only a failed job") as not_retried:
        retry.retry(ALICE, queued, database=database, celery_app=celery_app)
    qlora = submitted(ALICE, database, celery_app, settings,
                      JobSpec(method="qlora", backend="zero2", max_steps=5))
    with pytest.raises(compare_backends.ComparisonRefused) as not_compared:
        compare_backends.compare_backends(ALICE, qlora, database=database,
                                          celery_app=celery_app)
    for refused in (not_resumed, not_retried, not_compared):
        assert isinstance(refused.value, Conflict) and http_error(refused.value).status_code == 409
    assert trail(database, queued) == [("alice", "submit")]


def test_resume_and_compare_act_and_audit(database, celery_app, settings, tmp_path):
    job_id = submitted(ALICE, database, celery_app, settings)
    run_dir = tmp_path / "runs" / f"job-{job_id}"
    checkpoint = run_dir / "checkpoints" / "step-00000005"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 5}))
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run_dir),
                                   worker_host="h")
        job_store.mark_job_failed(session=session, job_id=job_id, error="worker lost")
    assert checkpoints.resume(ALICE, job_id, database=database,
                              celery_app=celery_app).status == "queued"
    jobs = compare_backends.compare_backends(ROOT, job_id, database=database,
                                             celery_app=celery_app, max_steps=3)
    assert [job.owner for job in jobs] == ["alice", "alice"]  # the source job's owner's
    assert trail(database, job_id) == [("alice", "submit"), ("alice", "resume"),
                                       ("root", "compare_backends")]


def test_plan_and_lora_preview_never_read_a_model_the_principal_could_not_train(settings):
    outside = JobSpec(model="/etc", max_steps=1)
    with pytest.raises(Invalid) as not_planned:
        plan.plan(ALICE, PlanRequest(spec=outside), settings=settings)
    assert http_error(not_planned.value).detail[0]["loc"] == ["body", "spec", "model"]
    with pytest.raises(Invalid) as not_previewed:
        preview_lora_targets(ALICE, outside, settings=settings)
    assert not_previewed.value.problems[0][0] == ("model",)
    assert "/etc" in str(not_previewed.value)


@pytest.mark.parametrize("given, kept", [
    ("My Data (v2).jsonl", "My-Data-v2.jsonl"),
    ("../../etc/train.jsonl", "train.jsonl"),
    ("C:\\Users\\me\\qa pairs.csv", "qa-pairs.csv"),
    (".hidden.json", "hidden.json"),
    ("données été.PARQUET", "donnees-ete.parquet"),
    ("chat log.JSONL.gz", "chat-log.jsonl.gz"),
    ("(((.jsonl", "dataset.jsonl"),
    ("x" * 300 + ".jsonl", "x" * 94 + ".jsonl"),
])
def test_an_upload_is_kept_under_a_safe_version_of_its_name(given, kept):
    assert safe_upload_name(given) == kept


@pytest.mark.parametrize("given", ["train.py", "train", "", "notes.gz", "train.jsonl.zip"])
def test_a_name_without_a_dataset_extension_is_refused_naming_the_extensions(given):
    with pytest.raises(DatasetRefused, match=r"\.jsonl, \.json, \.jsonl\.gz, \.parquet, \.csv"):
        safe_upload_name(given)


def test_the_same_file_uploaded_twice_is_kept_once_and_said_so(database, settings):
    kept = []
    for _ in range(2):
        with DatasetUpload(ALICE, "a b.jsonl", settings=settings) as upload:
            upload.write(b'{"prompt": "2+2?", "response": "4"}\n')
            kept.append(upload.keep(database=database))
    assert kept[0].path == kept[1].path and kept[0].path.name.endswith("-a-b.jsonl")
    assert (kept[0].already_kept, kept[1].already_kept) == (False, True)
    assert list(settings.upload_dir_for("alice").iterdir()) == [kept[0].path]


def test_an_upload_is_checked_kept_in_the_uploaders_folder_and_audited(database, settings):
    with DatasetUpload(ALICE, "train.jsonl", settings=settings) as upload:
        upload.write(b'{"prompt": "2+2?", "response": "4"}\n')
        kept = upload.keep(database=database)
    assert kept.path.parent == settings.upload_dir_for("alice") and kept.records == 1
    assert kept.path.name.endswith("-train.jsonl") and trail(database) == [("alice", "upload")]
    with pytest.raises(DatasetRefused) as bad_name:
        DatasetUpload(ALICE, "x.py", settings=settings)
    assert http_error(bad_name.value, location=("query",)).detail[0]["loc"] == [
        "query", "filename"]
    with pytest.raises(TooLarge):
        with DatasetUpload(ALICE, "big.jsonl", settings=settings) as upload:
            upload.write(b"x" * (settings.max_upload_bytes + 1))
    with pytest.raises(DatasetRefused, match="no records"):
        with DatasetUpload(ALICE, "empty.jsonl", settings=settings) as upload:
            upload.keep(database=database)
    assert [path.name for path in settings.upload_dir_for("alice").iterdir()] == [kept.path.name]
    with pytest.raises(Forbidden):
        DatasetUpload(Principal("../../etc", is_admin=True), "train.jsonl", settings=settings)


def test_account_actions_check_the_principal_first(database):
    with pytest.raises(Conflict, match="open access"):
        accounts.create_token(OPEN_PRINCIPAL, label="", expires_in_days=None, database=database)
    with pytest.raises(Forbidden) as not_admin:
        accounts.list_users(ALICE, database=database)
    assert (http_error(not_admin.value).status_code, http_error(not_admin.value).detail) == (
        403, "only an admin may do this")
    accounts.create_user(ROOT, name="carol", password="a long enough password",
                         is_admin=False, database=database)
    with pytest.raises(Conflict):
        accounts.create_user(ROOT, name="carol", password="a long enough password",
                             is_admin=False, database=database)
    with pytest.raises(NotFound, match="no live token 7"):
        accounts.revoke_token(ALICE, 7, database=database)
    assert trail(database) == [("root", "user_created")]
