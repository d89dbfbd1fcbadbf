"""docs/grafana-dashboard.json asks only for series TuneDeck exports (the web's /metrics and
a worker's), and docs/deploy.md describes each of them."""
from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from app.main import create_app
from tests.deploy.compose_file import REPO
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings
from worker.monitoring.exporter import WorkerGauges, worker_registry

DASHBOARD = REPO / "docs" / "grafana-dashboard.json"
SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_gcount", "_gsum", "_created")


def exported_names(tmp_path) -> set[str]:
    settings = Settings(home=tmp_path)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    with TestClient(app, client=("127.0.0.1", 40000)) as client:
        client.get("/healthz")
        web = client.get("/metrics").text
    app.state.database.dispose()
    gauges = WorkerGauges()
    gauges.note_host("w", {"gpus": [{"id": "0", "model": "m", "used_mb": 1.0, "total_mb": 2.0,
                                     "utilization_percent": 3, "power_w": 4.0,
                                     "temperature_c": 5}]})
    worker = generate_latest(worker_registry()).decode() + "\n".join(
        sample.name for family in gauges.collect() for sample in family.samples)
    return set(re.findall(r"^(?:# TYPE )?(tunedeck_[a-z0-9_]+)", web + "\n" + worker,
                          re.MULTILINE))


def queried_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs
    return set(re.findall(r"tunedeck_[a-z0-9_]+", " ".join(exprs)))


def test_the_dashboard_queries_only_exported_series(tmp_path):
    missing = queried_names() - exported_names(tmp_path)
    assert not missing, f"the dashboard asks for series nobody exports: {missing}"


def test_deploy_md_describes_every_exported_series(tmp_path):
    text = (REPO / "docs" / "deploy.md").read_text()
    families = {name for name in exported_names(tmp_path) if not name.endswith(SAMPLE_SUFFIXES)}
    # The table abbreviates a family of GPU series as `..._memory_total_bytes`.
    undescribed = {name for name in families if f"`{name}" not in text
                   and f"..._{name.removeprefix('tunedeck_worker_gpu_')}`" not in text}
    assert not undescribed, undescribed
