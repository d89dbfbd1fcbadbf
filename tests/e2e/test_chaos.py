"""Failures of the parts around a job lose and duplicate nothing: Redis restarted (empty)
mid-job while its job outlives a 2 s visibility timeout, the web restarted, and the
worker's database connections cut mid-job. (A killed worker: test_cluster.py; a job
outliving the visibility timeout with a second idle worker: bench/chaos.py.)"""
from __future__ import annotations

import pytest

from harness.chaos_scenarios import database_unreachable, redis_restarted, web_restarted
from tests.conftest import REDIS_URL

pytestmark = [pytest.mark.torchrun, pytest.mark.postgres, pytest.mark.redis]


def test_redis_restarted_mid_job_loses_no_job_and_runs_none_twice(tmp_path, postgres_url):
    report = redis_restarted(tmp_path / "home", postgres_url)
    assert report.problems == []
    assert (report.submitted, report.finished_defined) == (3, 3)
    assert (report.duplicate_launches, report.lost_points) == (0, 0)


def _fresh_redis(number: int) -> str:
    redis_url = REDIS_URL.rsplit("/", 1)[0] + f"/{number}"
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


def test_the_web_restarted_mid_job_changes_nothing_for_the_job(tmp_path, postgres_url):
    report = web_restarted(tmp_path / "home", {"TUNEDECK_DATABASE_URL": postgres_url,
                                                "TUNEDECK_BROKER_URL": _fresh_redis(10)})
    assert report.problems == []
    assert (report.submitted, report.finished_defined) == (1, 1)
    assert (report.duplicate_launches, report.lost_points) == (0, 0)


def test_the_database_unreachable_mid_job_loses_no_metric_point(tmp_path, postgres_url):
    report = database_unreachable(tmp_path / "home", postgres_url, _fresh_redis(9))
    assert report.problems == []
    assert (report.submitted, report.finished_defined) == (1, 1)
    assert (report.duplicate_launches, report.lost_points) == (0, 0)
