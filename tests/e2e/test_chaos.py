"""The broker's failures lose and duplicate nothing: Redis restarted (empty) mid-job, and
a job running far longer than Redis' visibility timeout. (A killed worker: test_cluster;
the database unreachable: tests/worker/test_database_outage.py.)"""
from __future__ import annotations

import pytest

from tests.conftest import REDIS_URL
from tests.e2e.chaos_scenarios import longer_than_visibility_timeout, redis_restarted

pytestmark = [pytest.mark.torchrun, pytest.mark.postgres, pytest.mark.redis]


def test_redis_restarted_mid_job_loses_no_job(tmp_path, postgres_url):
    report = redis_restarted(tmp_path / "home", postgres_url)
    assert report.problems == []
    assert (report.submitted, report.finished_defined) == (3, 3)
    assert (report.duplicate_launches, report.lost_points) == (0, 0)


def test_a_job_longer_than_the_visibility_timeout_runs_once(tmp_path, postgres_url):
    redis_url = REDIS_URL.rsplit("/", 1)[0] + "/13"
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    report = longer_than_visibility_timeout(tmp_path / "home", postgres_url, redis_url)
    assert report.problems == []
    assert (report.submitted, report.finished_defined, report.duplicate_launches) == (1, 1, 0)
