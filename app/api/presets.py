"""`/api/presets`: the principal's saved job specs, by name. The routes only translate
app/actions/presets.py's answers into HTTP (a bad spec body is FastAPI's 422 by field)."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from app.actions import presets
from app.actions.errors import Invalid
from app.api.errors import client_of, http_error
from app.auth.principal import principal_of
from tunedeck.db.models import Preset, as_utc
from tunedeck.spec.job_spec import JobSpec
from tunedeck.presets import NAME_MAX_LENGTH

preset_router = APIRouter()

# The length limit is in the schema too, so clients (and the API fuzz) see it; the action
# still checks the trimmed name, so an all-spaces name's 422 says what a name may be in
# the words the UI shows.
PresetName = Annotated[str, Path(max_length=NAME_MAX_LENGTH,
                                 description="the preset's name: 1 to 80 characters, "
                                             "spaces around it dropped")]
MISSING = {404: {"description": "you have no preset of that name"}}


def preset_to_dict(preset: Preset) -> dict[str, Any]:
    return {"name": preset.name, "updated_at": as_utc(preset.updated_at).isoformat(),
            "spec": preset.spec_model.model_dump(mode="json")}


@preset_router.get("/api/presets")
def list_presets(request: Request) -> list[dict[str, Any]]:
    """The principal's presets, by name: each `{name, updated_at, spec}`."""
    found = presets.list_presets(principal_of(request), database=request.app.state.database)
    return [preset_to_dict(preset) for preset in found]


@preset_router.put("/api/presets/{name}", status_code=201,
                   responses={200: {"description": "an existing preset was overwritten"},
                              201: {"description": "a new preset was saved"}})
def save_preset(name: PresetName, spec: JobSpec, request: Request) -> JSONResponse:
    """Save the body (a job spec) as the named preset: 201 when new, 200 when it replaced
    the principal's same-named one; 422 by field for a bad spec or name (1-80 characters)."""
    try:
        preset, created = presets.save_preset(principal_of(request), name, spec,
                                              database=request.app.state.database,
                                              client=client_of(request))
    except Invalid as error:  # the name is in the path, not the body
        raise http_error(error, location=("path",)) from error
    return JSONResponse(preset_to_dict(preset), status_code=201 if created else 200)


@preset_router.get("/api/presets/{name}", responses=MISSING)
def load_preset(name: PresetName, request: Request) -> dict[str, Any]:
    """`{name, spec}`; 404 for a missing preset and another user's alike."""
    preset = presets.load_preset(principal_of(request), name,
                                 database=request.app.state.database)
    return {"name": preset.name, "spec": preset.spec_model.model_dump(mode="json")}


@preset_router.delete("/api/presets/{name}", responses=MISSING)
def delete_preset(name: PresetName, request: Request) -> dict[str, Any]:
    """Delete the preset: `{name, deleted: true}`; 404 for a missing preset and another
    user's alike."""
    presets.delete_preset(principal_of(request), name, database=request.app.state.database,
                          client=client_of(request))
    return {"name": name.strip(), "deleted": True}
