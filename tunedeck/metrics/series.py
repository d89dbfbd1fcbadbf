"""Every chart series of a job, downsampled on the server: what `GET /api/jobs/{id}/metrics`
answers and the job page draws, so neither ships 100,000 points to a browser."""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tunedeck.metrics import samples as sample_store, store as metric_store
from tunedeck.metrics.downsample import DEFAULT_MAX_POINTS


def read_job_series(*, session: Session, job_id: int,
                    max_points: int = DEFAULT_MAX_POINTS) -> dict[str, list[dict[str, Any]]]:
    """`train`, `eval`, `memory`, `footprint` (as `metric_store.read_job_metrics`), plus
    `gpus` (the worker's NVML samples) and `processes` (its per-rank samples); each line
    (a series, a rank's, a GPU's) at most `max_points` long; `phase`, the newest phase line
    (a list of one, or empty), for the progress of a job not at step 1 yet."""
    return {
        **metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=max_points),
        "gpus": sample_store.read_samples(session=session, job_id=job_id,
                                          source=sample_store.GPU, max_points=max_points),
        "processes": sample_store.read_samples(session=session, job_id=job_id,
                                               source=sample_store.PROCESS,
                                               max_points=max_points),
        "phase": metric_store.latest_phase(session=session, job_id=job_id),
    }
