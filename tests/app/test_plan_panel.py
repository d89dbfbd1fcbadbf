"""The New job form's memory plan panel: its HTML, its chart's frame, the Apply buttons'
set-ups, and that the form shows the plan POST /api/plan and `tunedeck plan --json` give."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import gradio as gr
import pytest

from app.auth.principal import OPEN_PRINCIPAL, Principal
from app.ui.new_job import form_handlers
from app.ui.new_job.form_layout import FORM_FIELDS
from app.ui.new_job.plan_handlers import apply_setup, fit_warning, missing_fields, plan_frame
from app.ui.new_job.plan_handlers import PlanView
from app.ui.new_job.plan_panel import MAX_SETUPS, apply_clicked, plan_updates
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.plan_request import GpuRequest, plan_json
from tunedeck.units import format_size
from tunedeck.planner.plan_text import plan_as_html, plan_as_text
from tunedeck.settings import Settings


def _row(params, grads, optimizer, activations, other, fits, host=0.0):
    total = params + grads + optimizer + activations + other
    return {"per_gpu_gb": {"params": params, "grads": grads, "optimizer": optimizer,
                           "activations": activations, "other": other, "total": total},
            "fits": fits, "host_gb_per_node": host, "notes": []}


def _setup(strategy, label, spec_changes, total_gb, changes=(), cost="", fits="fits"):
    return {"strategy": strategy, "backend": strategy.removesuffix("_offload"), "label": label,
            "changes": list(changes), "spec_changes": spec_changes, "total_gb": total_gb,
            "fits": fits, "step_seconds": 1.23, "relative_step_time": 1.0, "cost": cost,
            "reason": f"{label} is why."}


# A 13B full fine-tune on 4 x 80 GB, in the plan JSON's shape, with a table order that is not
# the planner's usual one (the panel must follow plan["strategies"], not its own list).
PLAN = {
    "model": "meta-llama/Llama-2-13b-hf", "parameters": 13015864320,
    "trainable_parameters": 13015864320,
    "parameter_count": {"source": "bundled table", "by_dtype": {"BF16": 13015864320},
                        "active_per_token": 13015864320},
    "gpus": {"count": 4, "memory_gb": 80.0, "nodes": 1, "card": "H100"},
    "strategies": ["fsdp", "fsdp_offload", "ddp", "zero2", "zero2_offload"],
    "ddp": _row(26.0, 26.0, 156.2, 3.1, 0.0, "does not fit"),
    "zero2": _row(26.0, 6.5, 39.0, 3.1, 9.0, "does not fit"),
    "zero2_offload": _row(26.0, 0.0, 0.0, 3.1, 9.0, "tight", host=208.3),
    "fsdp": _row(13.0, 13.0, 26.0, 10.3, 3.8, "fits"),
    "fsdp_offload": _row(0.0, 0.0, 0.0, 0.0032, 0.34, "fits", host=208.3),
    "recommended": _setup("fsdp", "fsdp + activation checkpointing",
                          {"backend": "fsdp", "fsdp.activation_checkpointing": True}, 59.9,
                          changes=["activation checkpointing"],
                          cost="+33% compute (recomputed forward)"),
    "alternatives": [
        _setup("zero2_offload", "zero2_offload", {"backend": "zero2",
                                                  "zero2.offload_optimizer": True}, 45.3,
               cost="optimizer step over PCIe", fits="tight"),
        _setup("fsdp", "fsdp on 2 nodes", {"backend": "fsdp", "num_nodes": 2}, 40.1,
               changes=["2 nodes"], cost="needs 2 x 4 GPUs"),
    ],
    # The first reason words the recommendation (the panel shows it above, not again).
    "reasons": ["Recommended fsdp + activation checkpointing: 59.9 GB per GPU of 80 GB.",
                "The selection guide agrees: a full fine-tune of 13B parameters."],
}
FORM_13B = dict(model="meta-llama/Llama-2-13b-hf", method="full", backend="fsdp", num_gpus=4,
                gpu_memory_gb=80)


def make_form(**changes) -> dict:
    return {**form_handlers.default_form(), **changes}


def _cells(html_text: str, strategy: str) -> list[str]:
    row = re.search(rf'<tr data-strategy="{strategy}"[^>]*>(.*?)</tr>', html_text)[1]
    return [re.sub("<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]


@pytest.mark.parametrize(("gb", "text"), [
    (208.3, "208 GB"), (59.94, "59.9 GB"), (1.876, "1.88 GB"), (99.96, "100 GB"),
    (1234.5, "1,230 GB"), (0.34, "340 MB"), (0.0032, "3.20 MB"), (0.0004, "0.400 MB"),
    (0.0, "0"), (1e-9, "<0.01 MB")])
def test_sizes_are_in_gb_or_under_1_gb_in_mb(gb, text):
    assert format_size(gb) == text


def test_the_table_has_short_headers_units_and_the_plans_order():
    page = plan_as_html(PLAN)
    headers = [re.sub("<[^>]+>", "", header) for header in re.findall(r"<th[^>]*>(.*?)</th>", page)]
    assert headers == ["backend", "weights", "grads", "optimizer", "activations", "buffers",
                       "total", "verdict", "host/node"]
    assert re.findall(r'<tr data-strategy="(\w+)"', page) == PLAN["strategies"]
    assert _cells(page, "ddp")[1:] == ["26.0 GB", "26.0 GB", "156 GB", "3.10 GB", "0", "211 GB",
                                       "does not fit", "–"]
    assert _cells(page, "fsdp_offload")[4:7] == ["3.20 MB", "340 MB", "343 MB"]
    assert _cells(page, "zero2_offload")[-1] == "208 GB"
    # Every cell and header stays on one line; figures line up on the right.
    assert all("white-space:nowrap" in tag for tag in re.findall(r"<t[hd](?: [^>]*)?>", page))
    assert all("tabular-nums" in tag and "text-align:right" in tag
               for tag in re.findall(r"<td[^>]*>", page)[1:7])


def test_the_recommended_row_is_marked_and_its_changes_said_under_the_table():
    page = plan_as_html(PLAN)
    assert re.findall(r'<tr data-strategy="(\w+)"[^>]*data-recommended', page) == ["fsdp"]
    assert _cells(page, "fsdp")[0] == "★ fsdp" and _cells(page, "ddp")[0] == "ddp"
    table_end = page.index("</table>")
    assert page.index("★ fsdp with activation checkpointing: 59.9 GB per GPU (fits; the table "
                      "is the spec as written)") > table_end
    advice = re.sub("<[^>]+>", "", page[table_end:])
    assert ("Recommended: fsdp + activation checkpointing: 59.9 GB per GPU (fits), +33% compute "
            "(recomputed forward). fsdp + activation checkpointing is why.") in advice
    assert "zero2_offload: 45.3 GB per GPU (tight), optimizer step over PCIe." in advice
    assert advice.index("Alternatives") < advice.index("The selection guide agrees")
    assert "Recommended fsdp + activation checkpointing: 59.9 GB per GPU of 80 GB." not in advice


def test_nothing_fits_is_said_and_a_recommendation_without_changes_adds_no_note():
    nothing = {**PLAN, "recommended": None}
    assert "Recommended: nothing fits" in plan_as_html(nothing)
    assert "data-recommended" not in plan_as_html(nothing)
    assert "recommended: nothing fits" in plan_as_text(nothing)
    plain = {**PLAN, "recommended": {**PLAN["recommended"], "changes": [], "label": "fsdp"}}
    assert "★ fsdp with" not in plan_as_html(plain)


def test_every_string_from_the_plan_is_escaped():
    plan = copy.deepcopy(PLAN)
    script = '<img src=x onerror="alert(1)">'
    plan["model"] = script
    plan["reasons"] = ["the recommendation, worded", script]  # the first is shown above
    plan["recommended"]["label"] = plan["recommended"]["reason"] = script
    plan["recommended"]["cost"] = plan["alternatives"][0]["cost"] = script
    plan["recommended"]["changes"] = [script]
    page = plan_as_html(plan, [script])
    assert "<img" not in page and page.count("&lt;img src=x") == 8


def test_the_terminal_table_follows_the_plan_and_says_the_advice():
    text = plan_as_text(PLAN)
    rows = [line.split()[0] for line in text.splitlines()[2:7]]
    assert rows == PLAN["strategies"]
    assert "recommended: fsdp + activation checkpointing at 59.9 GB per GPU (fits)" in text
    assert "- alternative: fsdp on 2 nodes: 40.1 GB per GPU, needs 2 x 4 GPUs" in text
    assert "- The selection guide agrees" in text and "0.00" not in text


def test_the_chart_frame_follows_the_table_in_gb_or_in_mb_when_all_is_small():
    frame, unit = plan_frame(PLAN)
    assert unit == "GB" and list(frame.columns) == ["backend", "part", "size"]
    assert list(dict.fromkeys(frame["backend"])) == PLAN["strategies"]
    assert list(dict.fromkeys(frame["part"])) == ["weights", "grads", "optimizer", "activations",
                                                 "buffers"]
    small = copy.deepcopy(PLAN)
    for name in small["strategies"]:
        small[name] = _row(0.0003, 0.0001, 0.0002, 0.012, 0.001, "fits")
    frame, unit = plan_frame(small)
    assert unit == "MB" and frame["size"].tolist()[:5] == pytest.approx([0.3, 0.1, 0.2, 12, 1])


def test_apply_maps_spec_changes_to_form_fields_and_needs_every_one():
    form = make_form(**FORM_13B)
    changes = {"backend": "zero2", "method": "qlora", "micro_batch_size": 1, "grad_accum": 8,
               "num_gpus": 8, "zero2.offload_optimizer": True, "fsdp.cpu_offload": True,
               "zero2.reduce_bucket_size": 200_000_000, "fsdp.activation_checkpointing": True}
    setup = _setup("zero2", "everything", changes, 10.0)
    assert apply_setup(form, setup) == {
        "backend": "zero2", "method": "qlora", "micro_batch_size": 1, "grad_accum": 8,
        "num_gpus": 8, "zero2_offload_optimizer": True, "fsdp_cpu_offload": True,
        "zero2_reduce_bucket_size": 200_000_000, "fsdp_activation_checkpointing": True}
    assert missing_fields(form, setup) == []
    nodes = PLAN["alternatives"][1]
    assert missing_fields(form, nodes) == ["num_nodes"]


def test_the_panel_offers_apply_buttons_only_for_what_the_form_can_make(monkeypatch):
    monkeypatch.setattr("app.actions.plan.plan_json", lambda spec, gpus: PLAN)
    view = form_handlers.preview_form(make_form(**FORM_13B), principal=OPEN_PRINCIPAL, settings=Settings()).plan
    assert [setup["label"] for setup in view.setups] == [
        "fsdp + activation checkpointing", "zero2_offload", "fsdp on 2 nodes"]
    assert view.apply_labels == ("Apply: fsdp + activation checkpointing", "Apply: zero2_offload",
                                 "")
    assert "set num_nodes in the spec" in view.html
    updates = plan_updates(view)
    buttons = updates[2:2 + MAX_SETUPS]
    assert [button["visible"] for button in buttons] == [True, True, False, False]
    assert updates[-1] == list(view.setups)
    # A click writes the set-up into the form's fields, in FORM_FIELDS order.
    values = [make_form(**FORM_13B)[name] for name in FORM_FIELDS]
    written = dict(zip(FORM_FIELDS, apply_clicked(0, list(view.setups), *values)))
    assert written["fsdp_activation_checkpointing"] is True and written["backend"] == "fsdp"
    assert written["model"] == gr.skip() and written["num_gpus"] == gr.skip()
    # A set-up the form already has needs no button.
    applied = make_form(**FORM_13B, fsdp_activation_checkpointing=True)
    assert form_handlers.preview_form(applied, principal=OPEN_PRINCIPAL, settings=Settings()).plan.apply_labels[0] == ""


def test_no_plan_draws_no_empty_chart_frame():
    updates = plan_updates(PlanView(html="<p>Set the GPU memory to see the memory plan.</p>"))
    assert updates[1].visible is False
    planned = form_handlers.preview_form(make_form(), principal=OPEN_PRINCIPAL,
                                         settings=Settings()).plan
    assert plan_updates(planned)[1].visible is True


def test_the_warning_names_the_recommended_set_up():
    spec = JobSpec(model="meta-llama/Llama-2-13b-hf", method="full", backend="zero2",
                   num_gpus=4, max_steps=10)
    warning = fit_warning(spec, PLAN)
    assert warning.startswith("⚠ zero2 will not fit: it needs about 83.6 GB per GPU of 80 GB")
    assert warning.endswith("the plan recommends fsdp + activation checkpointing.")
    assert "see the alternatives" in fit_warning(spec, {**PLAN, "recommended": None})


# The real planner


def test_the_tiny_model_shows_mb_not_zeros():
    view = form_handlers.preview_form(make_form(), principal=OPEN_PRINCIPAL, settings=Settings()).plan
    assert view.plan["model"] == "builtin:tiny-llama"
    assert "0.00" not in view.html and " MB<" in view.html
    assert view.unit == "MB" and view.frame["size"].max() > 1
    assert list(dict.fromkeys(view.frame["backend"])) == view.plan["strategies"]


def test_the_form_plans_only_a_model_its_user_may_read(tmp_path):
    """The form's plan goes through the same action as POST /api/plan: a user's local model
    outside the allowed folders is refused by name, and its config.json is never read."""
    model = tmp_path / "elsewhere" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{not json")  # reading it would fail differently
    settings = Settings(home=tmp_path / "home", allowed_roots=str(tmp_path / "allowed"))
    user = Principal(name="alice", is_admin=False)
    view = form_handlers.preview_form(make_form(model=str(model)), principal=user,
                                      settings=settings).plan
    assert view.plan is None
    assert view.html.startswith(f"<p>No memory plan: model {model}: outside the allowed folders")


def test_a_gpu_memory_out_of_range_is_said_not_raised():
    view = form_handlers.preview_form(make_form(gpu_memory_gb=5000), principal=OPEN_PRINCIPAL,
                                      settings=Settings()).plan
    assert view.plan is None and view.html.startswith("<p>No memory plan: 1 validation error")


def test_the_form_shows_the_plan_the_api_and_the_cli_give(client, tmp_path):
    form = make_form(**FORM_13B)
    view = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings()).plan
    spec, problems = form_handlers.form_to_spec(form)
    assert problems == ""
    assert view.plan == plan_json(spec, GpuRequest(memory_gb=80))
    spec_data = spec.model_dump(mode="json")
    api = client.post("/api/plan", json={"spec": spec_data, "gpus": {"memory_gb": 80}})
    assert api.status_code == 200 and api.json() == view.plan
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_data))
    cli = subprocess.run([sys.executable, "-m", "cli", "plan", str(spec_file),
                          "--gpu-memory-gb", "80", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == view.plan
    assert view.html == plan_as_html(view.plan, [""] * len(view.setups))


def _register(database, name: str, resources: dict) -> None:
    from tunedeck.cluster import workers as worker_registry
    from tunedeck.db.models import utc_now

    with database.transaction() as session:
        worker_registry.record_heartbeat(session=session, name=name, host=name.split("@")[-1],
                                         queues=["default"], pid=11, concurrency=1,
                                         resources=resources, started_at=utc_now())


def test_on_a_cluster_of_cpu_workers_the_form_plans_cpu_ranks_in_their_share_of_ram(database):
    """Issue 29 item 10: with only a CPU worker registered, the plan is for the CPU ranks it
    runs, each with its share of the host's RAM as the heartbeat says it; the GPU memory
    field is marked unused; a GPU worker brings the GPU plan back."""
    form = make_form(num_gpus=2, gpu_memory_gb=80)
    _register(database, "cpu@box", {"gpus": None, "cpu_count": 2,
                                    "memory_total_mb": 22_315.0})  # 23.4 GB
    shown = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                       database=database)
    plan = shown.plan.plan
    assert plan["gpus"] == {"count": 2, "memory_gb": 11.7, "nodes": 1, "card": None,
                            "device": "cpu"}
    assert "1 node x 2 CPU ranks, 11.7 GB of RAM each. Per rank" in shown.plan.html
    for guess in ("H100", "80 GB", "per GPU", " a step", "Step times"):
        assert guess not in shown.plan.html, guess
    assert shown.plan.per == "rank" and "rank" in plan_updates(shown.plan)[1].y_title
    assert "not used" in shown.field_infos["gpu_memory_gb"]
    assert "RAM" in shown.field_infos["gpu_memory_gb"]
    # A heartbeat that does not say its RAM: this host's, shared by the ranks.
    _register(database, "cpu@box", {"gpus": None, "cpu_count": 2})
    unsaid = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                        database=database).plan.plan
    assert unsaid["gpus"]["device"] == "cpu" and unsaid["gpus"]["memory_gb"] > 0
    # Once a GPU worker could take the job, the form's GPU memory is planned again.
    _register(database, "gpu@rig", {"gpus": [{"index": 0, "id": "0"}]})
    back = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                      database=database)
    assert back.plan.plan["gpus"]["memory_gb"] == 80 and "device" not in back.plan.plan["gpus"]
    assert back.field_infos == {}
