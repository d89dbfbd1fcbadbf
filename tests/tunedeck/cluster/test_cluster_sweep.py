"""The cluster sweep on real databases: a silent worker's jobs fail (or restart when the
spec allows), one sweeper wins each lost worker, and unclaimed queued jobs are re-sent."""
from datetime import timedelta

from sqlalchemy import update

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.sweep import LOST_WORKERS_COLLECTOR, Sweeper, sweep_cluster
from tunedeck.db.models import Job, Worker, utc_now
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings


def heartbeat(session, name: str, *, host: str = "gpu-1", gpus: int = 2) -> None:
    worker_registry.record_heartbeat(
        session=session, name=name, host=host, queues=["default"], pid=1234, concurrency=gpus,
        resources={"gpus": [{"index": index, "id": str(index)} for index in range(gpus)]},
        started_at=utc_now())


def silence(session, name: str, seconds: float) -> None:
    session.execute(update(Worker).where(Worker.name == name)
                    .values(last_seen_at=utc_now() - timedelta(seconds=seconds)))


def running_job(session, worker_name: str, **spec) -> int:
    job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=5, **spec)).id
    job_store.mark_job_running(session=session, job_id=job_id, run_dir=f"/runs/{job_id}",
                               worker_host="gpu-1", worker_name=worker_name, gpu_indices=[0])
    return job_id


def test_a_silent_workers_jobs_fail_or_restart_and_live_workers_keep_theirs(database):
    with database.transaction() as session:
        heartbeat(session, "lost@gpu-1")
        heartbeat(session, "alive@gpu-2", host="gpu-2")
        fails = running_job(session, "lost@gpu-1")
        restarts = running_job(session, "lost@gpu-1", max_restarts=2)
        stays = running_job(session, "alive@gpu-2")
        silence(session, "lost@gpu-1", 25)
    with database.transaction() as session:
        result = sweep_cluster(session=session, worker_lost_seconds=20, redispatch_seconds=60)
    assert result.lost_workers == ["lost@gpu-1"]
    assert result.failed_jobs == [fails]
    assert [job_id for job_id, _spec in result.to_send] == [restarts]
    with database.transaction() as session:
        failed = job_queries.get_job(session=session, job_id=fails)
        assert failed.status == "failed" and failed.failure_kind == "worker_lost"
        assert failed.error.startswith("worker lost: worker lost@gpu-1 on gpu-1 sent no heartbeat")
        requeued = job_queries.get_job(session=session, job_id=restarts)
        assert (requeued.status, requeued.resume_requested, requeued.gpu_indices) == \
            ("queued", True, None)
        assert job_queries.get_job(session=session, job_id=stays).status == "running"
        states = {worker.name: worker.state for worker in worker_registry.list_workers(session=session)}
        assert states == {"lost@gpu-1": "lost", "alive@gpu-2": "online"}
    # The next sweep finds nothing more to do; a heartbeat brings the worker back online.
    with database.transaction() as session:
        again = sweep_cluster(session=session, worker_lost_seconds=20, redispatch_seconds=60)
        assert (again.lost_workers, again.failed_jobs, again.to_send) == ([], [], [])
        heartbeat(session, "lost@gpu-1")
    with database.transaction() as session:
        assert {worker.name for worker in worker_registry.live_worker_views(
            session=session, silent_seconds=20)} == {"lost@gpu-1", "alive@gpu-2"}


def test_only_one_sweeper_settles_a_lost_worker(database):
    with database.transaction() as session:
        heartbeat(session, "lost@gpu-1")
        silence(session, "lost@gpu-1", 60)
    cutoff = utc_now() - timedelta(seconds=20)
    with database.transaction() as session:
        first = worker_registry.claim_lost_worker(session=session, name="lost@gpu-1",
                                                  last_seen_before=cutoff)
    with database.transaction() as session:
        second = worker_registry.claim_lost_worker(session=session, name="lost@gpu-1",
                                                   last_seen_before=cutoff)
    assert (first, second) == (True, False)


def test_a_stopped_worker_is_not_lost(database):
    with database.transaction() as session:
        heartbeat(session, "gone@gpu-1")
        worker_registry.mark_worker_stopped(session=session, name="gone@gpu-1")
        silence(session, "gone@gpu-1", 600)
    with database.transaction() as session:
        assert sweep_cluster(session=session, worker_lost_seconds=20,
                             redispatch_seconds=60).lost_workers == []


def test_queued_jobs_nobody_claimed_are_sent_again_once_per_interval(database):
    with database.transaction() as session:
        old = job_store.create_job(session=session, spec=JobSpec(max_steps=5)).id
        fresh = job_store.create_job(session=session, spec=JobSpec(max_steps=5, queue="a100")).id
        session.execute(update(Job).where(Job.id == old)
                        .values(updated_at=utc_now() - timedelta(seconds=120)))
    with database.transaction() as session:
        result = sweep_cluster(session=session, worker_lost_seconds=20, redispatch_seconds=60)
    assert [job_id for job_id, _spec in result.to_send] == [old]
    with database.transaction() as session:  # stamped as sent: not again until 60 s pass
        assert sweep_cluster(session=session, worker_lost_seconds=20,
                             redispatch_seconds=60).to_send == []
        assert job_queries.get_job(session=session, job_id=fresh).dispatched_at is None


def test_a_job_is_given_up_when_the_worker_of_any_of_its_nodes_is_lost(database):
    with database.transaction() as session:
        heartbeat(session, "leader@gpu-1")
        heartbeat(session, "follower@gpu-2", host="gpu-2")
        job_id = running_job(session, "leader@gpu-1", num_nodes=2, backend="fsdp")
        job_store.assign_nodes(session=session, job_id=job_id,
                               nodes=[(1, "follower@gpu-2", "gpu-2", [0])])
        silence(session, "follower@gpu-2", 25)
    with database.transaction() as session:
        result = sweep_cluster(session=session, worker_lost_seconds=20, redispatch_seconds=60)
    assert (result.lost_workers, result.failed_jobs) == (["follower@gpu-2"], [job_id])
    with database.transaction() as session:
        assert "worker follower@gpu-2 on gpu-2 sent no heartbeat" in \
            job_queries.get_job(session=session, job_id=job_id).error


def test_a_stored_spec_that_no_longer_validates_fails_its_job_and_the_sweep_goes_on(database):
    """A row an older TuneDeck stored under rules the spec has since dropped could never
    run: the sweep fails it, saying why, and still re-sends and settles every other job."""
    with database.transaction() as session:
        heartbeat(session, "lost@gpu-1")
        stale = job_store.create_job(session=session, spec=JobSpec(max_steps=5)).id
        good = job_store.create_job(session=session, spec=JobSpec(max_steps=5)).id
        lost = running_job(session, "lost@gpu-1")
        session.execute(update(Job).where(Job.id == stale)
                        .values(spec={"max_steps": 5, "a_field_since_removed": 1}))
        session.execute(update(Job).where(Job.id.in_([stale, good]))
                        .values(updated_at=utc_now() - timedelta(seconds=120)))
        silence(session, "lost@gpu-1", 25)
    with database.transaction() as session:
        result = sweep_cluster(session=session, worker_lost_seconds=20, redispatch_seconds=60)
    assert [job_id for job_id, _spec in result.to_send] == [good]
    assert sorted(result.failed_jobs) == sorted([stale, lost])
    with database.transaction() as session:
        failed = job_queries.get_job(session=session, job_id=stale)
        assert failed.status == "failed" and failed.failure_kind == "input_error"
        assert "stored spec is no longer valid" in failed.error
        assert "a_field_since_removed" in failed.error


def test_the_sweeper_that_claims_a_lost_worker_counts_it_once(database, tmp_path):
    """tunedeck_lost_workers_total: the process whose sweep claimed the worker counts it;
    the sweeps after (here or elsewhere) find nothing to count."""
    with database.transaction() as session:
        heartbeat(session, "lost@gpu-1")
        silence(session, "lost@gpu-1", 60)
    now = [1000.0]
    sweeper = Sweeper(database=database, settings=Settings(home=tmp_path, worker_lost_seconds=20),
                      send=lambda job_id, spec: None, clock=lambda: now[0])
    before = LOST_WORKERS_COLLECTOR._value.get()
    sweeper.sweep()  # it has not reached the database for 20 s in a row yet: trusts nothing
    assert LOST_WORKERS_COLLECTOR._value.get() == before
    now[0] += 21
    assert sweeper.sweep().lost_workers == ["lost@gpu-1"]
    sweeper.sweep()
    assert LOST_WORKERS_COLLECTOR._value.get() == before + 1


def test_a_sweep_kept_waiting_to_write_trusts_no_silence_until_workers_could_beat(database,
                                                                                 tmp_path):
    """SQLite's file write-locked by another process: readers go on, writers wait. A sweep
    that waited longer than a heartbeat to write saw heartbeats that could not be written,
    so it starts its trust in silence again from when it could write."""
    with database.transaction() as session:
        heartbeat(session, "quiet@gpu-1")
        silence(session, "quiet@gpu-1", 60)
    # (asked, could write) of each sweep; heartbeat_seconds is 5.
    times = iter([1000.0, 1000.0, 1025.0, 1031.0, 1040.0, 1040.0, 1052.0, 1052.0])
    sweeper = Sweeper(database=database, settings=Settings(home=tmp_path, worker_lost_seconds=20),
                      send=lambda job_id, spec: None, clock=lambda: next(times))
    sweeper.sweep()
    assert sweeper.sweep().lost_workers == []  # 25 s trusted, but it waited 6 s to write
    assert sweeper.sweep().lost_workers == []  # 9 s of writing since
    assert sweeper.sweep().lost_workers == ["quiet@gpu-1"]  # 21 s
