"""Presets through the policy layer (app/actions/presets.py) and the REST API: a user's
own only, overwrite by name, names checked by field, specs typed both ways."""
import pytest

from app.actions import presets
from app.actions.errors import Invalid, NotFound
from app.auth.principal import OPEN_PRINCIPAL, Principal
from tunedeck.accounts import audit
from tunedeck.spec.job_spec import JobSpec

ALICE, BOB = Principal("alice", is_admin=False), Principal("bob", is_admin=False)
ROOT = Principal("root", is_admin=True)
SPEC = JobSpec(name="preset", max_steps=5, method="full", seq_len=512)


def trail(database) -> list[tuple[str, str, str]]:
    with database.transaction() as session:
        return [(event.actor, event.action, event.detail)
                for event in reversed(audit.list_events(session=session))]


def test_another_users_presets_are_not_seen_loaded_or_deleted(database):
    presets.save_preset(ALICE, "mine", SPEC, database=database)
    assert presets.list_presets(BOB, database=database) == []
    # An admin has their own presets too: a preset is a user's form, not a job to oversee.
    assert presets.list_presets(ROOT, database=database) == []
    for principal in (BOB, ROOT):
        with pytest.raises(NotFound, match="mine"):
            presets.load_preset(principal, "mine", database=database)
        with pytest.raises(NotFound):
            presets.delete_preset(principal, "mine", database=database)
    assert presets.load_preset(ALICE, " mine ", database=database).spec_model == SPEC


def test_save_overwrites_the_same_name_and_save_and_delete_are_audited(database):
    _first, created = presets.save_preset(ALICE, " fast ", SPEC, database=database,
                                          client="1.2.3.4")
    changed = SPEC.model_copy(update={"seq_len": 1024})
    preset, created_again = presets.save_preset(ALICE, "fast", changed, database=database)
    assert (created, created_again, preset.name) == (True, False, "fast")
    listed = presets.list_presets(ALICE, database=database)
    assert [(p.name, p.spec_model) for p in listed] == [("fast", changed)]
    presets.delete_preset(ALICE, "fast", database=database)
    assert presets.list_presets(ALICE, database=database) == []
    assert trail(database) == [("alice", "preset_saved", "fast")] * 2 + [
        ("alice", "preset_deleted", "fast")]


@pytest.mark.parametrize("name", ["", "  ", "n" * 81])
def test_a_bad_name_is_invalid_naming_name_and_nothing_is_stored(database, name):
    with pytest.raises(Invalid) as refused:
        presets.save_preset(ALICE, name, SPEC, database=database)
    assert [location for location, _message in refused.value.problems] == [("name",)]
    assert refused.value.messages[0].startswith("name: ")
    assert presets.list_presets(ALICE, database=database) == [] and trail(database) == []


def test_open_access_presets_belong_to_nobody(database):
    presets.save_preset(OPEN_PRINCIPAL, "open", SPEC, database=database)
    assert [p.owner for p in presets.list_presets(OPEN_PRINCIPAL, database=database)] == [None]
    assert presets.list_presets(ALICE, database=database) == []


# The REST API (open access: the TestClient is on loopback and no account exists).

def test_put_creates_then_overwrites_and_get_lists_and_loads_the_typed_spec(client):
    body = {"model": "builtin:tiny-llama", "max_steps": 3, "method": "full"}
    created = client.put("/api/presets/quick", json=body)
    assert created.status_code == 201, created.text
    overwritten = client.put("/api/presets/quick", json={**body, "max_steps": 4})
    assert overwritten.status_code == 200
    listed = client.get("/api/presets").json()
    assert [(p["name"], p["spec"]["max_steps"]) for p in listed] == [("quick", 4)]
    assert listed[0]["updated_at"].endswith("+00:00")
    loaded = client.get("/api/presets/quick").json()
    # Read back as the typed model: the defaults the body left out are filled in.
    assert loaded["spec"] == JobSpec(**{**body, "max_steps": 4}).model_dump(mode="json")
    assert set(loaded) == {"name", "spec"}


def test_delete_then_get_and_delete_again_are_404(client):
    assert client.put("/api/presets/gone", json={"max_steps": 3}).status_code == 201
    assert client.delete("/api/presets/gone").json() == {"name": "gone", "deleted": True}
    assert client.get("/api/presets/gone").status_code == 404
    assert client.delete("/api/presets/gone").status_code == 404


@pytest.mark.parametrize("body, location", [
    ({"max_steps": 3, "learning_rte": 0.1}, ["body", "learning_rte"]),
    ({"max_steps": 0}, ["body", "max_steps"]),
])
def test_a_bad_spec_is_422_naming_the_field_and_nothing_is_saved(client, body, location):
    response = client.put("/api/presets/bad", json=body)
    assert response.status_code == 422
    assert location in [problem["loc"] for problem in response.json()["detail"]]
    assert client.get("/api/presets").json() == []


def test_a_too_long_or_blank_name_is_422_naming_the_path_name(client):
    response = client.put(f"/api/presets/{'n' * 81}", json={"max_steps": 3})
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["path", "name"] and "80 characters" in problem["msg"]
    response = client.put("/api/presets/%20%20", json={"max_steps": 3})  # spaces only
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["path", "name"] and problem["msg"].startswith("name: ")


# The New job form's handlers (app/ui/new_job/preset_handlers.py).

def _form(**changes):
    from app.ui.new_job.form_handlers import default_form

    return {**default_form(), **changes}


@pytest.mark.parametrize("spec", [
    JobSpec(max_steps=20),
    JobSpec(name="full fsdp", method="full", backend="fsdp", epochs=2, precision="fp32",
            fsdp={"param_dtype": "bf16", "cpu_offload": True}, columns={"prompt": "q"},
            dataset_config="main", eval_dataset="builtin:arithmetic", eval_every_steps=5,
            lr_schedule="linear", seed=7, packing=True),
])
def test_the_form_made_from_a_spec_gives_the_spec_back(spec):
    from app.ui.new_job.form_handlers import form_to_spec, spec_to_form
    from app.ui.new_job.form_layout import FORM_FIELDS

    form = spec_to_form(spec)
    assert set(form) == set(FORM_FIELDS) - {"gpu_memory_gb"}
    assert form_to_spec({**form, "gpu_memory_gb": 80})[0] == spec


def test_saving_the_form_then_loading_it_gives_the_same_fields(database):
    from app.ui.new_job import preset_handlers

    form = _form(seq_len=1024, backend="fsdp", name="long")
    saved = preset_handlers.save_form_as_preset(form, " long run ", principal=ALICE,
                                                database=database)
    assert (saved.saved, saved.names) == ("long run", ["long run"])
    loaded, message = preset_handlers.load_preset_into_form("long run", principal=ALICE,
                                                            database=database)
    assert "Loaded preset **long run**" in message and "no field" not in message
    assert loaded == {key: value for key, value in form.items() if key != "gpu_memory_gb"}
    assert preset_handlers.load_preset_into_form("long run", principal=BOB,
                                                 database=database)[0] is None


def test_a_form_with_errors_or_no_name_saves_nothing_and_says_why(database):
    from app.ui.new_job import preset_handlers

    bad = preset_handlers.save_form_as_preset(_form(seq_len=1), "x", principal=ALICE,
                                              database=database)
    assert bad.saved is None and "Not saved" in bad.message and "seq_len" in bad.message
    unnamed = preset_handlers.save_form_as_preset(_form(), "  ", principal=ALICE,
                                                  database=database)
    assert unnamed.saved is None and "name: a preset needs a name" in unnamed.message
    assert presets.list_presets(ALICE, database=database) == []


def test_loading_a_spec_the_form_cannot_show_names_what_it_drops(database):
    from app.ui.new_job import preset_handlers

    presets.save_preset(ALICE, "api", JobSpec(max_steps=3, num_nodes=2, queue="big",
                                              backend="fsdp"), database=database)
    loaded, message = preset_handlers.load_preset_into_form("api", principal=ALICE,
                                                            database=database)
    assert loaded["backend"] == "fsdp"
    assert "`num_nodes`, `queue`" in message


def test_a_loaded_presets_learning_rate_survives_its_model_change():
    from app.ui.new_job.form_handlers import learning_rate_for_model

    # A builtin-model preset saved at LoRA's 2e-4: the model's change must not make it 5e-3.
    assert learning_rate_for_model("builtin:tiny-llama", 2e-4,
                                   ["builtin:tiny-llama", 2e-4]) is None
    # Once the user names another model, the usual default follows again.
    assert learning_rate_for_model("/models/Qwen2.5-0.5B", 5e-3,
                                   ["builtin:tiny-llama", 5e-3]) == 2e-4
