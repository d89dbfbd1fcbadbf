"""The job_generations table, through the one store of worker requests: a generation's result
is its `answer`, sent to the worker that ran the job."""
from __future__ import annotations

from typing import Any

from tunedeck.db.request_rows import JobGeneration
from tunedeck.worker_requests.store import RequestStore

GENERATIONS = RequestStore(JobGeneration, noun="generation", result="answer")


def generation_to_dict(generation: JobGeneration) -> dict[str, Any]:
    """The row as the API answers it; a done one's answer fields (text, tokens, seconds,
    ...) at the top level, as `POST /api/jobs/{id}/generate` promises."""
    row = GENERATIONS.to_dict(generation)
    del row["request"], row["answer"]
    return {**(generation.answer or {}), **row, "job_id": generation.job_id,
            "variant": generation.request.get("variant")}
