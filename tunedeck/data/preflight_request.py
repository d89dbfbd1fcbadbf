"""A data preflight request: the data fields of a job spec, as `POST /api/datasets/preflight`,
`tunedeck preflight` and the New job form's "Check data" send them.

The fields are JobSpec's own (type, default, bounds, pattern), so a value the spec would
refuse is refused here with the same message, naming the field; any other key is an error.
`queue` and `host` say where the data can be read: the preflight runs on a worker that
would run the job.
"""
from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError, create_model, field_validator, model_validator

from tunedeck.spec.job_spec import JobSpec
from tunedeck.spec.sections import StrictModel, _no_nul

PREFLIGHT_FIELDS = ("model", "objective", "dataset", "dataset_config", "dataset_split", "columns",
                    "seq_len", "packing", "eval_split", "trust_remote_code", "queue", "host")


def _spec_fields(names: tuple[str, ...]) -> dict[str, Any]:
    return {name: (JobSpec.model_fields[name].annotation, copy.copy(JobSpec.model_fields[name]))
            for name in names}


_PreflightFields = create_model("_PreflightFields", __base__=StrictModel,
                                **_spec_fields(PREFLIGHT_FIELDS))


class PreflightRequest(_PreflightFields):
    """What to check: the dataset (with its config, split and columns), read as the
    objective trains on it (examples, or preference pairs), the model whose tokenizer and
    chat template render it, and the seq_len and packing it is trained at."""

    @field_validator("model", "dataset", "dataset_config")
    @classmethod
    def _text_without_nul(cls, text: str | None) -> str | None:
        return _no_nul(text) if text is not None else None

    @model_validator(mode="after")
    def _fields_a_spec_allows_together(self) -> "PreflightRequest":
        # The spec's rules between fields (chosen/rejected columns need objective dpo, dpo
        # refuses packing, ...) refuse here too, as a 422, not later as a server error.
        try:
            self.to_spec()
        except ValidationError as error:
            raise ValueError("; ".join(problem["msg"].removeprefix("Value error, ")
                                       for problem in error.errors())) from None
        return self

    def to_spec(self) -> JobSpec:
        """The job spec these fields describe (its other fields at their defaults)."""
        return JobSpec.model_validate({**self.model_dump(), "max_steps": 1})

    @classmethod
    def from_spec_data(cls, data: dict[str, Any], *, source: str = "spec") -> "PreflightRequest":
        """The preflight of a job spec's mapping (a whole spec file, or just its data
        fields): a key no job spec has is an error naming it."""
        unknown = sorted(set(data) - set(JobSpec.model_fields))
        if unknown:
            raise ValueError(f"{source}: {', '.join(unknown)}: not a job spec field")
        return cls.model_validate({key: value for key, value in data.items()
                                   if key in PREFLIGHT_FIELDS})

