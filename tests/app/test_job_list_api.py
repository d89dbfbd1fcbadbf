"""GET /api/jobs filtered by status and owner, with each job's newest step; the torchrun log
as a download, as a tail and from an offset."""

import pytest

from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
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


def test_each_listed_job_carries_its_newest_step(client):
    from tunedeck.metrics import store as metric_store

    database = client.app_state.database
    with database.transaction() as session:
        stepped = job_store.create_job(session=session, spec=JobSpec(max_steps=9)).id
        fresh = job_store.create_job(session=session, spec=JobSpec(max_steps=9)).id
        events = [(seq, {"kind": "step", "rank": rank, "time": 100.0 + step, "step": step,
                         "loss": 3.0 - step / 10 + rank, "tokens_per_second": 50.0 * step})
                  for seq, (step, rank) in enumerate([(1, 0), (1, 1), (2, 0), (2, 1)])]
        metric_store.add_metric_points(session=session, job_id=stepped, events=events)
    latest = {job["id"]: job["latest"] for job in client.get("/api/jobs").json()}
    assert latest[fresh] is None
    assert latest[stepped] == {"step": 2, "loss": pytest.approx(2.8), "tokens_per_second": 100.0}


def _running_job_with_log(client, tmp_path, text: bytes):
    run = RunFolder(tmp_path / "run")
    with client.app_state.database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
    run.launcher_log_file.parent.mkdir(parents=True, exist_ok=True)
    run.launcher_log_file.write_bytes(text)
    return job_id, run.launcher_log_file


def test_a_follower_reads_the_log_from_an_offset_in_whole_lines(client, tmp_path):
    job_id, log = _running_job_with_log(client, tmp_path, b"one\ntwo\nthr")
    first = client.get(f"/api/jobs/{job_id}/logs", params={"offset": 0}).json()
    # Running: only whole lines; the half-written third waits for its newline.
    assert first == {"offset": 0, "text": "one\ntwo\n", "next_offset": 8, "complete": False}
    with log.open("ab") as file:
        file.write(b"ee\nfour")
    second = client.get(f"/api/jobs/{job_id}/logs", params={"offset": 8}).json()
    assert (second["text"], second["next_offset"], second["complete"]) == ("three\n", 14, False)
    # The old shape still answers the tail, and says where a follower would go on from.
    assert client.get(f"/api/jobs/{job_id}/logs", params={"lines": 2}).json() == {
        "lines": ["three", "four"], "next_offset": 18}
    with client.app_state.database.transaction() as session:
        job_store.mark_job_succeeded(session=session, job_id=job_id)
    last = client.get(f"/api/jobs/{job_id}/logs", params={"offset": 14}).json()
    assert (last["text"], last["next_offset"], last["complete"]) == ("four", 18, True)
    assert client.get(f"/api/jobs/{job_id}/logs", params={"offset": -1}).status_code == 422


def test_following_a_job_with_no_log_yet_is_empty_not_an_error(client):
    with client.app_state.database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
    answer = client.get(f"/api/jobs/{job_id}/logs", params={"offset": 0})
    assert answer.json() == {"offset": 0, "text": "", "next_offset": 0, "complete": False}
    assert client.get("/api/jobs/999/logs", params={"offset": 0}).status_code == 404


def test_a_chunk_cut_by_the_size_limit_never_splits_a_character():
    from app.views.jobs import _whole_lines

    text = "é" * 10  # two bytes each
    assert _whole_lines(text.encode()[:7], full=True) == ("é" * 3).encode()
    assert _whole_lines(b"no newline yet", full=False) == b""


def test_a_log_shorter_than_the_offset_was_rewritten_and_is_sent_from_its_start(client, tmp_path):
    job_id, log = _running_job_with_log(client, tmp_path, b"a relaunch's first line\n")
    answer = client.get(f"/api/jobs/{job_id}/logs", params={"offset": 5000}).json()
    assert answer == {"offset": 0, "text": "a relaunch's first line\n", "next_offset": 24,
                      "complete": False}
