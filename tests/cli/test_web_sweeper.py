"""The web sweeps the cluster while it serves (the app's lifespan starts and stops the
sweeper), so a lone worker's death is noticed; `with_sweeper=False` leaves it out."""
import threading
import time

from fastapi.testclient import TestClient

from app.main import create_app
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings


def _app_with_a_stale_queued_job(tmp_path, *, with_sweeper: bool):
    settings = Settings(home=tmp_path, heartbeat_seconds=0.1, redispatch_seconds=0.05)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=with_sweeper)
    with app.state.database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
    time.sleep(0.1)  # older than redispatch_seconds: the sweep sends it again
    return app, job_id


def _dispatched(app, job_id) -> bool:
    with app.state.database.transaction() as session:
        return job_queries.get_job(session=session, job_id=job_id).dispatched_at is not None


def test_the_served_app_sweeps_and_stops_sweeping_when_it_stops(tmp_path):
    app, job_id = _app_with_a_stale_queued_job(tmp_path, with_sweeper=True)
    assert not _dispatched(app, job_id)  # built, not served: nothing sweeps yet
    with TestClient(app):
        deadline = time.monotonic() + 10
        while not _dispatched(app, job_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _dispatched(app, job_id)
    time.sleep(0.3)  # one sweep interval and then some
    assert not any(thread.name == "tunedeck-sweep" for thread in threading.enumerate())
    app.state.database.dispose()


def test_an_app_built_without_the_sweeper_leaves_the_job_alone(tmp_path):
    app, job_id = _app_with_a_stale_queued_job(tmp_path, with_sweeper=False)
    with TestClient(app):
        time.sleep(0.5)
        assert not _dispatched(app, job_id)
    app.state.database.dispose()
