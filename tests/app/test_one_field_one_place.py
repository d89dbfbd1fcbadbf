"""A new spec field is found everywhere by adding it to the spec alone: the New job form (an
input labelled with its title, through spec_to_form and back), the API's schema and body,
`tunedeck submit --set`, the reference page, and the preview's spec. Given a place of its
own, it is one line of the form's layout table (app/ui/new_job/form_layout.py).

The field is `warmup_ratio`, added to a copy of JobSpec. The modules that read the spec class
(or what the form derives from it) as they load are imported again under the copy, as a
server started with such a spec would import them; the originals are put back after."""
from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import gradio as gr
import pytest
from fastapi.testclient import TestClient
from pydantic import Field, ValidationError, create_model

from app.auth.principal import OPEN_PRINCIPAL
from tests.app.test_ui_handlers import RecordingCelery
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings
from tunedeck.spec import job_spec

TITLE = "Warmup ratio"
DESCRIPTION = "The share of the optimizer steps spent in linear warmup (0: `warmup_steps` say)."
# Where it is read at load time: the form's package (its table derives everything from the
# spec's fields), the API's routes and the app that mounts them, and the spec's text I/O.
SPEC_READERS = ("app.ui.new_job", "app.api.jobs", "app.main", "tunedeck.spec.text")
FORM_LAYOUT = "app.ui.new_job.form_layout"
WARMUP_STEPS_LINE = '    Place("warmup_steps", "training", 3),\n'
WARMUP_RATIO_LINE = '    Place("warmup_ratio", "training", 3, step=0.01),\n'


@pytest.fixture
def spec_copy(monkeypatch) -> type:
    """JobSpec with one more field, as tunedeck/spec/fields.py would declare it."""
    copy = create_model("JobSpec", __base__=job_spec.JobSpec, warmup_ratio=(
        float, Field(0.0, ge=0, le=1, title=TITLE, description=DESCRIPTION)))
    monkeypatch.setattr(job_spec, "JobSpec", copy)
    loaded_before = set(sys.modules)
    _forget(monkeypatch, SPEC_READERS)
    yield copy
    # What was imported under the copy goes; monkeypatch then puts the originals back.
    for name in _names_under(SPEC_READERS):
        parent, _, child = name.rpartition(".")
        if name not in loaded_before and hasattr(sys.modules.get(parent), child):
            delattr(sys.modules[parent], child)
        del sys.modules[name]


def _names_under(prefixes: tuple[str, ...]) -> list[str]:
    return [name for name in sys.modules
            if any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)]


def _forget(monkeypatch, prefixes: tuple[str, ...]) -> None:
    """Drops the modules under `prefixes` from sys.modules (and their parents' attributes),
    so the next import runs them again; monkeypatch restores both after the test."""
    for name in _names_under(prefixes):
        parent, _, child = name.rpartition(".")
        if hasattr(sys.modules.get(parent), child):
            monkeypatch.setattr(sys.modules[parent], child, getattr(sys.modules[parent], child))
        monkeypatch.delitem(sys.modules, name)


def _with_a_line_in_the_table(line_after: str, line: str) -> None:
    """The form's layout table as a developer would edit it: `line` written after
    `line_after` in form_layout.py's source, and loaded in place of the module."""
    package = importlib.import_module("app.ui.new_job")
    path = Path(package.__file__).with_name("form_layout.py")
    source = path.read_text(encoding="utf-8")
    assert source.count(line_after) == 1
    module = types.ModuleType(FORM_LAYOUT)
    module.__file__ = str(path)
    sys.modules[FORM_LAYOUT] = module  # dropped after the test with the rest (spec_copy)
    exec(compile(source.replace(line_after, line_after + line), str(path), "exec"),
         module.__dict__)
    package.form_layout = module


def _new_job_tab(database, tmp_path) -> dict:
    """The New job tab built in a Blocks of its own: its components by element id."""
    tab = importlib.import_module("app.ui.new_job.tab")
    with gr.Blocks() as blocks:
        tab.build_new_job_tab(database=database, celery_app=RecordingCelery(),
                              settings=Settings(home=tmp_path / "home"))
    return {block.elem_id: block for block in blocks.blocks.values() if block.elem_id}


def _inside(block, ancestor) -> bool:
    while block is not None and block is not ancestor:
        block = block.parent
    return block is ancestor


def test_a_new_field_is_on_the_form_in_other_options_and_round_trips(spec_copy, database,
                                                                      tmp_path):
    form_layout = importlib.import_module(FORM_LAYOUT)
    form_handlers = importlib.import_module("app.ui.new_job.form_handlers")
    assert "warmup_ratio" in form_layout.OTHER_OPTIONS
    by_id = _new_job_tab(database, tmp_path)
    ratio = by_id["new-job-warmup-ratio"]
    assert isinstance(ratio, gr.Number) and (ratio.label, ratio.info) == (TITLE, DESCRIPTION)
    assert _inside(ratio, by_id["new-job-other-options"])

    spec = spec_copy(max_steps=5, warmup_ratio=0.25)
    form = form_handlers.spec_to_form(spec)
    assert form["warmup_ratio"] == 0.25 and form_handlers.default_form()["warmup_ratio"] == 0.0
    assert form_handlers.form_to_spec({**form, "gpu_memory_gb": 80})[0] == spec
    spec, problems = form_handlers.form_to_spec({**form, "warmup_ratio": 2})
    assert spec is None and f"{TITLE} (warmup_ratio): Input should be less than or equal to 1" \
        in problems


def test_a_new_field_shows_in_the_previews_spec_as_submit_takes_it(spec_copy):
    form_handlers = importlib.import_module("app.ui.new_job.form_handlers")
    text = importlib.import_module("tunedeck.spec.text")
    form = {**form_handlers.default_form(), "warmup_ratio": 0.1}
    shown = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings())
    assert shown.valid and "warmup_ratio: 0.1\n" in shown.spec_yaml
    assert text.parse_spec_text(shown.spec_yaml) == form_handlers.form_to_spec(form)[0]
    bad = form_handlers.preview_form({**form, "warmup_ratio": -1}, principal=OPEN_PRINCIPAL,
                                     settings=Settings())
    assert "greater than or equal to 0" in bad.field_errors["warmup_ratio"]


def test_a_new_field_is_in_the_api_schema_and_body(spec_copy, tmp_path):
    main = importlib.import_module("app.main")
    settings = Settings(home=tmp_path)
    upgrade_database(settings.resolved_database_url)
    app = main.create_app(settings, with_ui=False, with_sweeper=False)
    document = app.openapi()
    body = document["paths"]["/api/jobs"]["post"]["requestBody"]["content"]["application/json"]
    schema = document["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[-1]]
    ratio = schema["properties"]["warmup_ratio"]
    assert (ratio["title"], ratio["description"], ratio["maximum"]) == (TITLE, DESCRIPTION, 1)
    with TestClient(app) as client:
        refused = client.post("/api/jobs", json={"max_steps": 1, "warmup_ratio": 2})
        assert refused.status_code == 422
        assert ["body", "warmup_ratio"] in [problem["loc"] for problem in refused.json()["detail"]]
        assert client.post("/api/jobs", json={"max_steps": 1, "warmup_ratio": 0.1}
                           ).status_code == 201
    app.state.database.dispose()


def test_a_new_field_is_set_on_the_command_line(spec_copy, tmp_path, capsys):
    from cli.server_calls import load_spec_or_exit

    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("max_steps: 5\n", encoding="utf-8")
    assert load_spec_or_exit(spec_file, ["warmup_ratio=0.1"]).warmup_ratio == 0.1
    with pytest.raises(SystemExit) as refused:
        load_spec_or_exit(spec_file, ["warmup_ratio=1.5"])
    assert "warmup_ratio: Input should be less than or equal to 1" in str(refused.value)
    with pytest.raises(ValidationError):
        importlib.import_module("tunedeck.spec.text").parse_spec_text(
            "max_steps: 5\n", assignments=["warmup_ratio=-0.5"])


def test_a_new_field_is_on_the_reference_page(spec_copy):
    from scripts.reference import job_spec_page

    page = job_spec_page.render()
    row, = [line for line in page.splitlines() if line.startswith("| `warmup_ratio` |")]
    assert row == (f"| `warmup_ratio` | number | `0.0` | ≥ 0, ≤ 1 | **{TITLE}.** "
                   f"{DESCRIPTION} |"), row


def test_one_line_in_the_table_gives_the_new_field_its_place(spec_copy, database, tmp_path):
    _with_a_line_in_the_table(WARMUP_STEPS_LINE, WARMUP_RATIO_LINE)
    form_layout = importlib.import_module(FORM_LAYOUT)
    form_handlers = importlib.import_module("app.ui.new_job.form_handlers")
    keys = list(form_layout.FORM_FIELDS)
    assert keys[keys.index("warmup_steps") + 1] == "warmup_ratio"
    assert "warmup_ratio" not in form_layout.OTHER_OPTIONS
    by_id = _new_job_tab(database, tmp_path)
    ratio, steps = by_id["new-job-warmup-ratio"], by_id["new-job-warmup-steps"]
    # Beside warmup_steps, in its row; labelled with its title (no help line: the row is
    # compact, as its neighbours are).
    assert ratio.parent is steps.parent and isinstance(ratio, gr.Number)
    assert (ratio.label, ratio.info, ratio.step) == (TITLE, None, 0.01)
    assert not _inside(ratio, by_id["new-job-other-options"])
    spec = spec_copy(max_steps=5, warmup_ratio=0.5)
    form = form_handlers.spec_to_form(spec)
    assert form_handlers.form_to_spec({**form, "gpu_memory_gb": 80})[0] == spec
    preview = form_handlers.preview_form({**form, "gpu_memory_gb": 80},
                                         principal=OPEN_PRINCIPAL, settings=Settings())
    assert "warmup_ratio: 0.5\n" in preview.spec_yaml
    assert json.loads(preview.trainer_json)  # the trainer's own view is its owner's to extend


def test_the_copy_leaves_nothing_behind(spec_copy):
    """Under the copy the readers see it; the next test sees the spec and form as they are
    (test_the_spec_and_the_form_are_themselves_again)."""
    assert "warmup_ratio" in importlib.import_module(FORM_LAYOUT).FORM_FIELDS


def test_the_spec_and_the_form_are_themselves_again():
    from app.main import create_app  # noqa: F401  (imported again, under the real spec)
    from app.ui.new_job.form_layout import FORM_FIELDS
    from tunedeck.spec.text import parse_spec_text

    assert "warmup_ratio" not in job_spec.JobSpec.model_fields
    assert "warmup_ratio" not in FORM_FIELDS
    assert importlib.import_module("app.api.jobs").JobSpec is job_spec.JobSpec
    with pytest.raises(ValueError, match="warmup_ratio"):
        parse_spec_text("max_steps: 5\nwarmup_ratio: 0.1\n")
