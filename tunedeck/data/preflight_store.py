"""The dataset_preflights table, through the one store of worker requests: a preflight's
result is its `report`."""
from __future__ import annotations

from tunedeck.db.request_rows import DatasetPreflight
from tunedeck.worker_requests.store import RequestStore

PREFLIGHTS = RequestStore(DatasetPreflight, noun="preflight", result="report")
