"""The memory plan of a spec on a GPU set, for `POST /api/plan`: the spec's model must be
one the principal could train, since the planner reads a local model's config.json."""
from __future__ import annotations

from typing import Any

from app.actions.errors import Invalid
from app.actions.input_checks import parent_job_problems
from app.auth.principal import Principal
from app.auth.spec_access import model_access_problems
from tunedeck.jobs.lineage import base_model, parent_job_id
from tunedeck.planner.plan_request import PlanRequest, plan_json
from tunedeck.settings import Settings


def plan(principal: Principal, request: PlanRequest, *, settings: Settings,
         database=None) -> dict[str, Any]:
    """The plan's JSON; Invalid at ("spec", "model") for a model the principal may not read
    (nothing is read) or whose shape cannot be found. A `job:ID` model is planned as the
    model its job chain started from (merged weights have its shape), with `database`."""
    if parent_job_id(request.spec.model) is not None:
        request = request.model_copy(update={"spec": _with_base_model(
            request.spec, principal=principal, database=database)})
    problems = model_access_problems(request.spec, principal=principal, settings=settings)
    if problems:
        raise Invalid([(("spec", field), message) for field, message in problems])
    try:
        return plan_json(request.spec, request.gpus)
    except ValueError as error:
        raise Invalid([(("spec", "model"), str(error))]) from error


def _with_base_model(spec, *, principal: Principal, database):
    if database is None:
        raise Invalid([(("spec", "model"), f"model {spec.model}: another job's weights are "
                                           "planned only where the jobs can be read")])
    problems = parent_job_problems(spec, principal=principal, database=database)
    if problems:
        raise Invalid([(("spec", field), message) for field, message in problems])
    with database.transaction() as session:
        return spec.model_copy(update={"model": base_model(session, spec.model)})
