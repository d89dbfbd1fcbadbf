"""Deleting and archiving jobs (app/actions/job_removal.py): access, the refusal of an active
job, the run folder removed only inside the runs root, the audit trail, and the listing's
archived filter; through the actions and through the REST API."""
import pytest

from app.actions import job_removal
from app.actions.errors import Conflict, NotFound
from app.auth.principal import Principal
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit
from tunedeck.db.models import JobEvent, JobNode, JobSample, MetricPoint
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings

ALICE, BOB = Principal("alice", is_admin=False), Principal("bob", is_admin=False)
ROOT = Principal("root", is_admin=True)
SPEC = {"name": "old-run", "max_steps": 5}


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(home=tmp_path)


def finished_job(database, settings, *, owner="alice", run_dir=None, finish=True) -> int:
    """A job that ran and succeeded, with a run folder holding a file, a node, a metric
    point and a sample (unless `finish` is False: then it is left running)."""
    with database.transaction() as session:
        job = job_store.create_job(session=session, spec=JobSpec(**SPEC), owner=owner)
        job_id = job.id
        folder = run_dir or settings.run_dir_for(job_id)
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(folder),
                                   worker_host="h")
        job_store.assign_nodes(session=session, job_id=job_id, nodes=[(1, "w2", "h2", [0])])
        session.add(MetricPoint(job_id=job_id, kind="step", rank=0, seq=0, step=1, time=1.0,
                                values={"loss": 1.0}))
        session.add(JobSample(job_id=job_id, time=1.0, host="h", source="gpu", index=0,
                              values={}))
        if finish:
            job_store.mark_job_succeeded(session=session, job_id=job_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text("step 1\n")
    return job_id


def rows_naming(database, job_id) -> int:
    with database.transaction() as session:
        return sum(session.query(table).filter(table.job_id == job_id).count()
                   for table in (JobEvent, JobNode, MetricPoint, JobSample))


def trail(database, job_id) -> list[tuple[str, str]]:
    with database.transaction() as session:
        return [(event.actor, event.action)
                for event in reversed(audit.list_events(session=session, job_id=job_id))]


def test_the_owner_deletes_the_rows_and_the_run_folder_and_it_is_audited(database, settings):
    job_id = finished_job(database, settings)
    folder = settings.run_dir_for(job_id)
    assert rows_naming(database, job_id) > 3
    deleted = job_removal.delete_job(ALICE, job_id, database=database, settings=settings,
                                     client="1.2.3.4")
    assert deleted.folder_removed and not folder.exists()
    assert settings.runs_dir.is_dir()  # only the job's own folder goes
    assert rows_naming(database, job_id) == 0
    with database.transaction() as session, pytest.raises(job_queries.JobNotFound):
        job_queries.get_job(session=session, job_id=job_id)
    assert trail(database, job_id) == [("alice", "delete")]


def test_another_user_cannot_delete_or_archive_and_an_admin_can(database, settings):
    job_id = finished_job(database, settings)
    with pytest.raises(NotFound):
        job_removal.delete_job(BOB, job_id, database=database, settings=settings)
    with pytest.raises(NotFound):
        job_removal.set_archived(BOB, job_id, True, database=database)
    assert settings.run_dir_for(job_id).exists() and trail(database, job_id) == []
    job_removal.set_archived(ROOT, job_id, True, database=database)
    job_removal.delete_job(ROOT, job_id, database=database, settings=settings)
    assert trail(database, job_id) == [("root", "archive"), ("root", "delete")]
    assert not settings.run_dir_for(job_id).exists()


@pytest.mark.parametrize("status", ["running", "queued"])
def test_an_active_job_is_refused_with_a_reason_and_kept(database, settings, status):
    job_id = finished_job(database, settings, finish=False)
    if status == "queued":
        with database.transaction() as session:
            job_store.requeue_lost_job(session=session, job_id=job_id, reason="lost")
    with pytest.raises(Conflict, match=f"job {job_id} is {status}; cancel it"):
        job_removal.delete_job(ALICE, job_id, database=database, settings=settings)
    assert settings.run_dir_for(job_id).exists() and rows_naming(database, job_id) > 0
    assert trail(database, job_id) == []


@pytest.mark.parametrize("where", ["outside", "root", "dotdot", "symlink"])
def test_a_run_dir_outside_the_runs_root_is_never_removed(database, settings, tmp_path, where):
    outside = tmp_path / "precious"
    outside.mkdir()
    settings.runs_dir.mkdir(parents=True)
    (outside / "keep").write_text("mine")
    (settings.runs_dir / "keep").write_text("the root's")
    run_dir = {"outside": outside, "root": settings.runs_dir,
               "dotdot": settings.runs_dir / ".." / "precious",
               "symlink": settings.runs_dir / "job-link"}[where]
    if where == "symlink":
        run_dir.symlink_to(outside, target_is_directory=True)
    job_id = finished_job(database, settings, run_dir=run_dir)
    deleted = job_removal.delete_job(ALICE, job_id, database=database, settings=settings)
    assert not deleted.folder_removed and "not inside the runs root" in deleted.folder_note
    assert (outside / "keep").exists() and (settings.runs_dir / "keep").exists()
    assert rows_naming(database, job_id) == 0  # the row goes all the same


def test_a_folder_this_host_does_not_see_is_noted_not_an_error(database, settings):
    job_id = finished_job(database, settings)
    settings.run_dir_for(job_id).joinpath("train.log").unlink()
    settings.run_dir_for(job_id).rmdir()
    deleted = job_removal.delete_job(ALICE, job_id, database=database, settings=settings)
    assert not deleted.folder_removed and "not on this host" in deleted.folder_note


def test_archived_jobs_are_hidden_from_the_listing_unless_asked_for(client):
    kept = client.post("/api/jobs", json=SPEC).json()["id"]
    hidden = client.post("/api/jobs", json=SPEC).json()["id"]
    response = client.post(f"/api/jobs/{hidden}/archive")
    assert response.status_code == 200 and response.json()["archived"] is True
    assert [job["id"] for job in client.get("/api/jobs").json()] == [kept]
    assert [job["id"] for job in client.get("/api/jobs?archived=true").json()] == [hidden]
    assert client.get(f"/api/jobs/{hidden}").json()["archived"] is True  # still readable
    assert client.post(f"/api/jobs/{hidden}/unarchive").json()["archived"] is False
    assert [job["id"] for job in client.get("/api/jobs").json()] == [hidden, kept]
    assert client.get("/api/jobs?archived=maybe").status_code == 422
    with client.app_state.database.transaction() as session:
        actions = [event.action for event in audit.list_events(session=session, job_id=hidden)]
    assert actions == ["unarchive", "archive", "submit"]


def test_delete_over_rest(client):
    state = client.app_state
    queued = client.post("/api/jobs", json=SPEC).json()["id"]
    response = client.delete(f"/api/jobs/{queued}")
    assert response.status_code == 409 and "cancel it" in response.json()["detail"]
    job_id = finished_job(state.database, state.settings, owner=None)
    response = client.delete(f"/api/jobs/{job_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["id"], body["deleted"], body["run_dir_removed"]) == (job_id, True, True)
    assert client.get(f"/api/jobs/{job_id}").status_code == 404
    assert client.delete(f"/api/jobs/{job_id}").status_code == 404
    assert client.delete("/api/jobs/0").status_code == 422
    assert client.post(f"/api/jobs/{job_id}/archive").status_code == 404


def test_the_cli_deletes_after_confirmation_and_archives(client, monkeypatch, capsys):
    import httpx

    from cli.main import main

    def through_the_test_client(method, url, **keywords):
        path = url.split("http://tunedeck", 1)[1]
        return client.request(method, path, headers=keywords.get("headers"))

    monkeypatch.setattr(httpx, "request", through_the_test_client)
    state = client.app_state
    job_id = finished_job(state.database, state.settings, owner=None)
    server = ["--server", "http://tunedeck"]
    monkeypatch.setattr("builtins.input", lambda _prompt: "n")
    assert main(["delete", str(job_id), *server]) == 1
    assert client.get(f"/api/jobs/{job_id}").status_code == 200
    assert main(["archive", str(job_id), *server]) == 0
    assert client.get(f"/api/jobs/{job_id}").json()["archived"] is True
    assert main(["unarchive", str(job_id), *server]) == 0
    assert main(["delete", str(job_id), "--yes", *server]) == 0
    assert client.get(f"/api/jobs/{job_id}").status_code == 404
    assert f"job {job_id} deleted; run folder" in capsys.readouterr().out


def test_the_jobs_tab_handlers_confirm_delete_archive_and_compare_the_ticked_jobs(
        database, settings):
    from app.ui.jobs import removal_handlers as removal
    from app.ui.jobs.jobs_table import JobsFilter, jobs_table, listed_job_ids

    done = finished_job(database, settings)
    running = finished_job(database, settings, finish=False)
    assert removal.confirm_label([done]) == f"Really delete job {done} and its run folder?"
    assert removal.confirm_label([done, running]) == (
        f"Really delete jobs {done}, {running} and their run folders?")
    with pytest.raises(removal.NothingToActOn, match="Tick one or more jobs"):
        removal.confirm_label([])
    with pytest.raises(removal.NothingToActOn, match="At most 50 jobs"):
        removal.confirm_label(list(range(1, 52)))
    assert removal.archive_jobs(ALICE, [], True, database=database).startswith("Tick one")
    assert removal.archive_jobs(BOB, [done], True, database=database) == (
        f"Job {done} not archived: job {done} does not exist")
    assert removal.archive_jobs(ALICE, [done], True, database=database) == (
        f"Job {done} archived.")
    assert removal.to_compare([done]) == (None, "Compare selected: tick at least 2 jobs in "
                                                "the table.")
    assert removal.to_compare([running, done]) == ([running, done], "")

    def table_ids(archived):
        return listed_job_ids(jobs_table(database=database, principal=ALICE,
                                         shown=JobsFilter.of(archived=archived)))

    assert (table_ids(False), table_ids(True)) == ([running], [done])
    message = removal.delete_jobs(ALICE, [done, running], database=database,
                                  settings=settings)
    assert f"Job {done} deleted; run folder" in message
    assert f"Job {running} not deleted: job {running} is running; cancel it" in message
    assert table_ids(True) == [] and not settings.run_dir_for(done).exists()
