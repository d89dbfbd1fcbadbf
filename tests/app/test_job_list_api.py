"""GET /api/jobs filtered by status and owner, and the whole torchrun log as a download."""
from tunedeck import job_store
from tunedeck.job_spec import JobSpec
from tunedeck.run_folder import RunFolder


def test_the_job_list_filters_by_status_and_owner(client):
    database = client.app_state.database
    with database.transaction() as session:
        ada = job_store.create_job(session=session, spec=JobSpec(max_steps=1), owner="ada").id
        bob = job_store.create_job(session=session, spec=JobSpec(max_steps=1), owner="bob").id
        job_store.mark_job_cancelled(session=session, job_id=bob)

    def ids(**query):
        answer = client.get("/api/jobs", params=query)
        assert answer.status_code == 200, answer.text
        return [job["id"] for job in answer.json()]

    assert ids() == [bob, ada]  # open access acts as an admin: everyone's
    assert ids(status="cancelled") == [bob] and ids(status="queued") == [ada]
    assert ids(owner="ada") == [ada] and ids(owner="ada", status="cancelled") == []
    refused = client.get("/api/jobs", params={"status": "paused"})
    assert refused.status_code == 422 and "status" in refused.text


def test_the_whole_log_downloads_as_text_once_it_exists(client, tmp_path):
    database = client.app_state.database
    run = RunFolder(tmp_path / "run")
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
    assert client.get(f"/api/jobs/{job_id}/logs/full").status_code == 404  # not written yet
    run.launcher_log_file.parent.mkdir(parents=True, exist_ok=True)
    run.launcher_log_file.write_text("".join(f"[default0]:step {n}\n" for n in range(1, 501)))
    answer = client.get(f"/api/jobs/{job_id}/logs/full")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert f'filename="job-{job_id}-torchrun.log"' in answer.headers["content-disposition"]
    lines = answer.text.splitlines()
    assert (len(lines), lines[0], lines[-1]) == (500, "[default0]:step 1", "[default0]:step 500")
    assert client.get("/api/jobs/999/logs/full").status_code == 404


def test_a_growing_log_is_sent_as_long_as_it_was_when_asked(tmp_path):
    """A running job's log grows while it is sent: the body is the declared length, not
    what the file holds by the last chunk (which made the server drop the connection)."""
    from app.api.job_reads import _first_bytes

    log = tmp_path / "torchrun.log"
    log.write_bytes(b"x" * 100_000)
    chunks = _first_bytes(log, 100_000, chunk_size=4096)
    first = next(chunks)
    with log.open("ab") as file:
        file.write(b"y" * 50_000)  # the job writes on
    body = first + b"".join(chunks)
    assert body == b"x" * 100_000
