"""What a principal may put in a job spec, checked before the job is stored (API and form).

Local model and dataset paths must lie under the configured roots or the principal's own
uploads folder (`tunedeck.data.input_paths` says how), and only an admin may let transformers run
a model's own code (`trust_remote_code`).
"""
from __future__ import annotations

from pathlib import Path

from app.auth.principal import Principal
from tunedeck.data.input_paths import spec_path_problems
from tunedeck.rewards.scorers import python_reward_problems
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings

TRUST_REMOTE_CODE_REFUSED = (
    "trust_remote_code: only an admin may turn it on (it runs Python code shipped with the "
    "model on the GPU hosts); leave it false, or ask an admin to submit the job")


def allowed_roots_for(principal: Principal, settings: Settings) -> tuple[Path, ...]:
    """The configured roots plus the principal's own uploads folder."""
    return (*settings.allowed_root_paths, settings.upload_dir_for(principal.name))


def spec_access_problems(spec: JobSpec, *, principal: Principal,
                         settings: Settings) -> list[tuple[str, str]]:
    """(field, message) for each part of `spec` this principal may not submit; each message
    names its field."""
    problems = spec_path_problems(spec, allowed_roots_for(principal, settings))
    if spec.trust_remote_code and not principal.is_admin:
        problems.append(("trust_remote_code", TRUST_REMOTE_CODE_REFUSED))
    if spec.objective == "grpo":
        problems += python_reward_problems(spec.grpo.rewards, allowed=settings.python_rewards)
    return problems


def model_access_problems(spec: JobSpec, *, principal: Principal,
                          settings: Settings) -> list[tuple[str, str]]:
    """The spec's problems with its model alone: the planner and the LoRA target resolver
    read a local model's config.json, and must not probe folders a job could not use."""
    return [(field, message) for field, message in spec_access_problems(
        spec, principal=principal, settings=settings) if field == "model"]
