"""The memory plan of a spec on a GPU set, for `POST /api/plan`: the spec's model must be
one the principal could train, since the planner reads a local model's config.json."""
from __future__ import annotations

from typing import Any

from app.actions.errors import Invalid
from app.auth.principal import Principal
from app.auth.spec_access import model_access_problems
from tunedeck.planner.plan_request import PlanRequest, plan_json
from tunedeck.settings import Settings


def plan(principal: Principal, request: PlanRequest, *, settings: Settings) -> dict[str, Any]:
    """The plan's JSON; Invalid at ("spec", "model") for a model the principal may not read
    (nothing is read) or whose shape cannot be found."""
    problems = model_access_problems(request.spec, principal=principal, settings=settings)
    if problems:
        raise Invalid([(("spec", field), message) for field, message in problems])
    try:
        return plan_json(request.spec, request.gpus)
    except ValueError as error:
        raise Invalid([(("spec", "model"), str(error))]) from error
