"""What a worker's task ended as: the values stay the strings the worker logged before,
and an id that did not run here says why from the job's status."""
from worker.outcome import Outcome


def test_outcomes_keep_the_values_the_worker_logged():
    assert [str(outcome) for outcome in Outcome] == [
        "succeeded", "failed", "cancelled", "taken_away", "missing", "queued", "running",
        "not started", "exited"]
    assert f"{Outcome.TAKEN_AWAY}" == "taken_away" and Outcome.NOT_STARTED == "not started"


def test_an_unclaimed_id_ends_as_its_jobs_status_or_missing():
    assert Outcome.of_unclaimed(None) is Outcome.MISSING
    assert Outcome.of_unclaimed("queued") is Outcome.LEFT_QUEUED
    assert Outcome.of_unclaimed("running") is Outcome.RUNNING_ELSEWHERE
    assert Outcome.of_unclaimed("cancelled").job_finished
    assert not Outcome.TAKEN_AWAY.job_finished and not Outcome.LEFT_QUEUED.job_finished
