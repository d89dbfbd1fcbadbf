"""POST /api/jobs refuses what no registered worker can run: 422 naming the field."""
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.models import utc_now


def register_cpu_worker(client):
    with client.app_state.database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="cpu@box", host="box", queues=["default"], pid=11,
            concurrency=1, resources={"gpus": None, "cpu_count": 2}, started_at=utc_now())


SPEC = {"max_steps": 5, "backend": "zero2", "precision": "fp16"}


def test_fp16_zero2_is_accepted_while_no_worker_is_registered(client):
    assert client.post("/api/jobs", json=SPEC).status_code == 201


def test_fp16_zero2_on_a_cpu_only_cluster_is_a_422_naming_precision(client):
    register_cpu_worker(client)
    response = client.post("/api/jobs", json=SPEC)
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "precision"]
    assert "pick bf16 or fp32" in problem["msg"]
    assert client.post("/api/jobs", json={**SPEC, "precision": "bf16"}).status_code == 201


def test_the_form_marks_fp16_beside_precision_before_submit(database):
    from app.auth.principal import OPEN_PRINCIPAL
    from app.ui.new_job import form_handlers
    from tunedeck.settings import Settings

    form = {**form_handlers.default_form(), "backend": "zero2", "precision": "fp16"}
    before = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                        database=database)
    assert before.field_errors == {}  # no worker registered: the job may wait for one
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="cpu@box", host="box", queues=["default"], pid=11,
            concurrency=1, resources={"gpus": None}, started_at=utc_now())
    shown = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                       database=database)
    assert set(shown.field_errors) == {"precision"}
    assert "pick bf16 or fp32" in shown.field_errors["precision"]
    assert "Precision (precision)" in shown.message
