"""Hostile input the fuzzer found (or that JSON allows and a schema cannot express): each is
a 4xx naming what was wrong, never a 500, on SQLite and on PostgreSQL."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.queries import MAX_JOB_ID

SPEC = {"name": "hostile", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
        "method": "lora", "backend": "fsdp", "num_gpus": 1, "max_steps": 5}


def _strict_json(response) -> object:
    """The body as JSON that any client parses: NaN and Infinity are not JSON."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"response carries {constant}, which is not JSON")
    return json.loads(response.text, parse_constant=refuse)


def _error_locations(response) -> list[list]:
    assert response.status_code == 422, response.text
    return [error["loc"] for error in _strict_json(response)["detail"]]


def _post_raw(client: TestClient, path: str, text: str):
    return client.post(path, content=text, headers={"content-type": "application/json"})


def _spec_with(**raw_fields: str) -> str:
    """SPEC as JSON text with each field's value written as is (e.g. NaN, which json.dumps
    would refuse or spell for us)."""
    text = json.dumps(SPEC)[:-1]
    return text + "".join(f", {json.dumps(name)}: {value}" for name, value in raw_fields.items()) + "}"


@pytest.mark.parametrize("change, field", [
    ({"max_steps": 10**9}, ["body", "max_steps"]),
    ({"max_steps": 10**30}, ["body", "max_steps"]),
    ({"seq_len": -1}, ["body", "seq_len"]),
    ({"surprise": 1}, ["body", "surprise"]),
    ({"lora": {"r": 16, "surprise": True}}, ["body", "lora", "surprise"]),
    ({"num_gpus": "eight"}, ["body", "num_gpus"]),
    ({"packing": [1]}, ["body", "packing"]),
])
def test_out_of_range_unknown_or_mistyped_field_is_422_naming_it(hostile_client, change, field):
    response = hostile_client.post("/api/jobs", json={**SPEC, **change})
    assert field in _error_locations(response)
    assert hostile_client.get("/api/jobs").json() == []


@pytest.mark.parametrize("field, value", [
    ("learning_rate", "NaN"), ("learning_rate", "Infinity"), ("weight_decay", "-Infinity"),
    ("epochs", "NaN"), ("surprise", "NaN"), ("max_steps", "1e400"),
])
def test_nan_or_infinity_in_a_spec_is_422_in_valid_json(hostile_client, field, value):
    # Python's JSON parser accepts these; FastAPI's 422 used to echo them back and fail to
    # render (ValueError: Out of range float values are not JSON compliant), a 500.
    spec = {key: item for key, item in SPEC.items() if key != field}
    if field == "epochs":
        spec.pop("max_steps")
    text = json.dumps(spec)[:-1] + f", {json.dumps(field)}: {value}}}"
    assert ["body", field] in _error_locations(_post_raw(hostile_client, "/api/jobs", text))


def test_nan_in_the_plan_and_compare_bodies_is_422(hostile_client):
    plan = '{"spec": ' + json.dumps(SPEC) + ', "gpus": {"memory_gb": NaN}}'
    assert ["body", "gpus", "memory_gb"] in _error_locations(
        _post_raw(hostile_client, "/api/plan", plan))
    job_id = hostile_client.post("/api/jobs", json=SPEC).json()["id"]
    assert ["body", "max_steps"] in _error_locations(
        _post_raw(hostile_client, f"/api/jobs/{job_id}/compare-backends", '{"max_steps": NaN}'))


def test_a_lone_surrogate_is_422_naming_the_field(hostile_client):
    # "\ud800" is valid JSON text but no valid string; its echo could not be encoded (500).
    response = _post_raw(hostile_client, "/api/jobs", _spec_with(name='"\\ud800"'))
    assert ["body", "name"] in _error_locations(response)


@pytest.mark.parametrize("field", ["name", "model", "dataset"])
def test_a_nul_character_is_422_naming_the_field(hostile_client, field):
    # PostgreSQL text refuses NUL: a name with one was a 500 there (SQLite stored it).
    response = hostile_client.post("/api/jobs", json={**SPEC, field: "a\x00b"})
    assert ["body", field] in _error_locations(response)
    assert hostile_client.get("/api/jobs").json() == []


def test_a_nul_in_a_target_module_is_refused():
    with pytest.raises(ValidationError, match="lora.target_modules"):
        JobSpec.model_validate({**SPEC, "lora": {"target_modules": ["q_proj\x00"]}})
    assert JobSpec.model_validate({**SPEC, "lora": {"target_modules": ["q_proj"]}}) \
        .lora.target_modules == ["q_proj"]


JOB_ROUTES = [("get", "/api/jobs/{id}"), ("get", "/api/jobs/{id}/events"),
              ("get", "/api/jobs/{id}/logs"), ("post", "/api/jobs/{id}/cancel"),
              ("get", "/api/jobs/{id}/checkpoints"), ("post", "/api/jobs/{id}/resume"),
              ("post", "/api/jobs/{id}/retry"), ("post", "/api/jobs/{id}/compare-backends"),
              ("get", "/api/jobs/{id}/config"), ("get", "/api/jobs/{id}/artifacts/merged")]


@pytest.mark.parametrize("job_id", [0, -1, MAX_JOB_ID + 1, 2**63, 2**70])
@pytest.mark.parametrize("method, route", JOB_ROUTES)
def test_a_job_id_out_of_the_key_range_is_422_naming_it(hostile_client, method, route, job_id):
    # jobs.id is 32-bit on PostgreSQL: 2^31 was "integer out of range" there, 2^63 an
    # OverflowError on SQLite, both 500s.
    response = getattr(hostile_client, method)(route.format(id=job_id))
    assert ["path", "job_id"] in _error_locations(response)


@pytest.mark.parametrize("job_id", [MAX_JOB_ID, MAX_JOB_ID + 1, 2**70])
def test_metrics_of_a_job_id_out_of_range_is_404(hostile_client, job_id):
    # The metrics route takes a plain int; _load_job answers 404 before the driver is asked.
    assert hostile_client.get(f"/api/jobs/{job_id}/metrics").status_code == 404


@pytest.mark.parametrize("ids", [f"1,{MAX_JOB_ID + 1}", f"1,{2**70}"])
def test_compare_ids_out_of_range_are_422_naming_ids(hostile_client, ids):
    response = hostile_client.get("/api/compare", params={"ids": ids})
    assert ["query", "ids"] in _error_locations(response)


def test_the_largest_job_id_is_a_plain_404(hostile_client):
    assert hostile_client.get(f"/api/jobs/{MAX_JOB_ID}").status_code == 404
