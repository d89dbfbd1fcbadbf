"""`POST /api/jobs/{id}/generate` and `GET /api/generations/{id}`: the routes only translate
app/actions/generation.py's answers into HTTP."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.actions.generation import await_generation, start_generation
from app.api.errors import client_of
from app.api.params import JobId, RequestId
from app.api.worker_requests import request_response
from app.auth.principal import principal_of
from tunedeck.generation.request import GenerationRequest

generation_router = APIRouter()

POLL_PATH = "/api/generations/{id}"
ANSWER = {"description": "the generation: `text`, `tokens` (new tokens), `seconds` (the "
                         "generation alone), `load_seconds`, `warm`, `device`, `prompt_tokens` "
                         "(when done); `id`, `job_id`, `status` (pending, running, done, "
                         "failed), `variant`, `error` (when failed), `waiting` (why not yet)"}


@generation_router.post(
    "/api/jobs/{job_id}/generate",
    responses={200: ANSWER, 202: {"description": "no answer yet: poll GET /api/generations/{id}"},
               404: {"description": "no such job, or another user's"},
               409: {"description": "the job did not succeed, or its weights were deleted"},
               422: {"description": "an empty message, or max_new_tokens over the cap"}})
def generate(job_id: JobId, body: GenerationRequest, request: Request) -> JSONResponse:
    """The answer of the job's merged, adapter or base model to `messages` (rendered with
    the model's chat template, as training rendered its prompts), computed on the worker
    that ran the job. 200 once it answered within TUNEDECK_GENERATION_WAIT_SECONDS (done, or
    failed with the error), else 202 with the id to poll and `waiting` saying why."""
    state = request.app.state
    generation_id = start_generation(database=state.database, celery_app=state.celery_app,
                                     settings=state.settings, principal=principal_of(request),
                                     job_id=job_id, request=body, client=client_of(request))
    answer = await_generation(database=state.database, settings=state.settings,
                              principal=principal_of(request), generation_id=generation_id)
    return request_response(answer, poll_path=POLL_PATH)


@generation_router.get("/api/generations/{generation_id}", responses={200: ANSWER})
def get_generation(generation_id: RequestId, request: Request) -> JSONResponse:
    """A generation as it stands now; 404 for one that is missing or another user's."""
    state = request.app.state
    answer = await_generation(database=state.database, settings=state.settings,
                              principal=principal_of(request), generation_id=generation_id,
                              wait_seconds=0)
    return JSONResponse(answer.to_json())
