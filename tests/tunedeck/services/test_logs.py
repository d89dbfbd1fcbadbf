"""The services' log lines: readable text by default, JSON lines on request, with the job,
worker and request they were written for."""
import json
import logging

import pytest

from tunedeck.services import logs as service_logs


@pytest.fixture
def captured(capsys):
    yield capsys
    logging.getLogger().handlers.clear()


def test_json_lines_carry_the_service_worker_job_and_request(captured):
    service_logs.configure_logging(service="worker", log_format="json", worker_name="gpu-1")
    with service_logs.for_job(42):
        logging.getLogger("worker.job_runner").info("job %s: %s", 42, "succeeded")
    token = service_logs.REQUEST_ID.set("req-7")
    try:
        logging.getLogger("tunedeck.access").warning("GET /api/jobs 200")
    finally:
        service_logs.REQUEST_ID.reset(token)
    first, second = [json.loads(line) for line in captured.readouterr().err.splitlines()]
    assert first["message"] == "job 42: succeeded" and first["job_id"] == 42
    assert (first["service"], first["worker"], first["level"]) == ("worker", "gpu-1", "INFO")
    assert first["time"].endswith("+00:00") and "request_id" not in first
    assert second["request_id"] == "req-7" and "job_id" not in second


def test_text_lines_read_as_text_with_the_context_at_the_end(captured):
    service_logs.configure_logging(service="web")
    with service_logs.for_job(3):
        logging.getLogger("app").info("hello")
    logging.getLogger("httpx").info("chatter")  # a quiet library below WARNING
    [line] = captured.readouterr().err.splitlines()
    assert " INFO web app: hello [job 3]" in line


def test_an_exception_is_one_json_line(captured):
    service_logs.configure_logging(service="web", log_format="json")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("app").exception("failed")
    [line] = captured.readouterr().err.splitlines()
    assert "ValueError: boom" in json.loads(line)["exception"]
