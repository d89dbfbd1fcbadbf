"""The UI's handlers, called directly with a real SQLite database and a fake broker."""
from __future__ import annotations

import html
import json
import re

import pytest
from pathlib import Path

from app.auth.principal import OPEN_PRINCIPAL, Principal
from app.ui.jobs import jobs_table
from app.ui.build_ui import build_ui
from app.ui.job_ids import job_id_from_cell, job_link
from app.ui.job_page import job_actions, job_handlers, step_charts
from app.ui.new_job import form_handlers, option_visibility
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.services.broker import RUN_JOB_TASK
from tunedeck.db.engine import Database
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import store as metric_store
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from tests.hub_cache import offline_hub, offline_hub_error  # noqa: F401


class RecordingCelery:
    """Stands in for the Celery app: remembers what was sent instead of sending it."""

    def __init__(self):
        self.sent: list[tuple[str, list, dict]] = []

    def send_task(self, name, args=None, **options):
        self.sent.append((name, list(args or []), options))



def make_form(**changes) -> dict:
    return {**form_handlers.default_form(), **changes}


def create_job(database: Database, **spec_fields) -> int:
    spec = JobSpec(**{"max_steps": 20, "num_gpus": 2, **spec_fields})
    with database.transaction() as session:
        return job_store.create_job(session=session, spec=spec).id


# The form


def test_default_form_is_a_valid_spec():
    spec, problems = form_handlers.form_to_spec(make_form())
    assert problems == ""
    assert spec.model == "builtin:tiny-llama" and spec.dataset == "builtin:arithmetic"
    assert (spec.num_gpus, spec.max_steps, spec.backend) == (2, 20, "zero2")


def test_form_to_spec_carries_every_field():
    spec, _ = form_handlers.form_to_spec(make_form(
        name=" my run ", backend="fsdp", precision="fp32", num_gpus=4, max_steps=7,
        learning_rate=1e-3, micro_batch_size=2, grad_accum=3, seq_len=64, lora_r=8,
        lora_alpha=16, lora_dropout=0.0, fsdp_cpu_offload=True,
        fsdp_activation_checkpointing=True, zero2_overlap_comm=False))
    assert spec.name == "my run"
    assert (spec.num_gpus, spec.max_steps, spec.micro_batch_size, spec.grad_accum,
            spec.seq_len) == (4, 7, 2, 3, 64)
    assert spec.learning_rate == 1e-3 and spec.precision == "fp32"
    assert (spec.lora.r, spec.lora.alpha, spec.lora.dropout) == (8, 16, 0.0)
    assert spec.fsdp.cpu_offload and spec.fsdp.activation_checkpointing
    assert not spec.zero2.overlap_comm


def test_training_and_zero2_knobs_reach_the_spec_and_the_preview():
    form = make_form(lr_schedule="linear", warmup_steps=5, weight_decay=0.01, max_grad_norm=0.5,
                     zero2_reduce_bucket_size=200_000_000, zero2_allgather_bucket_size=50_000_000)
    spec, problems = form_handlers.form_to_spec(form)
    assert problems == ""
    assert (spec.lr_schedule, spec.warmup_steps, spec.weight_decay, spec.max_grad_norm) == (
        "linear", 5, 0.01, 0.5)
    config = json.loads(form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings()).config_json)
    assert config["gradient_clipping"] == 0.5
    assert config["optimizer"]["params"]["weight_decay"] == 0.01
    assert config["zero_optimization"]["reduce_bucket_size"] == 200_000_000
    assert config["zero_optimization"]["allgather_bucket_size"] == 50_000_000
    spec, _ = form_handlers.form_to_spec(make_form(backend="fsdp", fsdp_sharding_strategy="shard_grad_op",
                                                   zero2_activation_checkpointing=True))
    assert spec.fsdp.sharding_strategy == "shard_grad_op" and spec.zero2.activation_checkpointing
    fsdp_preview = json.loads(form_handlers.preview_form(make_form(
        backend="fsdp", fsdp_sharding_strategy="shard_grad_op"), principal=OPEN_PRINCIPAL, settings=Settings()).config_json)
    assert fsdp_preview["reshard_after_forward"] is False
    _spec, problems = form_handlers.form_to_spec(make_form(backend="fsdp",
                                                           fsdp_sharding_strategy="hybrid_shard"))
    assert "Sharding strategy (fsdp): hybrid_shard replicates across nodes" in problems
    _spec, problems = form_handlers.form_to_spec(make_form(zero2_reduce_bucket_size=10))
    assert "Reduce bucket size (zero2.reduce_bucket_size)" in problems


def test_epochs_eval_packing_and_checkpoints_reach_the_spec_and_the_trainer_preview():
    form = make_form(max_steps=None, epochs=2, eval_split=0.1, eval_every_steps=5, packing=True,
                     checkpoint_every_steps=10, keep_checkpoints=3, seed=7,
                     zero2_activation_checkpointing=True)
    spec, problems = form_handlers.form_to_spec(form)
    assert problems == ""
    assert (spec.max_steps, spec.epochs, spec.seed) == (None, 2, 7)
    assert (spec.eval_split, spec.eval_every_steps, spec.packing) == (0.1, 5, True)
    assert (spec.checkpoint_every_steps, spec.keep_checkpoints) == (10, 3)
    trainer = json.loads(form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings()).trainer_json)
    # ZeRO-2's activation checkpointing is the trainer's, so the preview shows it there.
    assert trainer["activation_checkpointing"] is True
    # Epochs: how many steps (and so evaluations and checkpoints) only the data will say.
    assert trainer["eval"] == {"split": 0.1, "dataset": None, "every_steps": 5, "runs": None}
    assert trainer["checkpoints"] == {"every_steps": 10, "keep": 3, "format": "deepspeed",
                                      "saves": None}
    assert trainer["steps"]["epochs"] == 2 and trainer["steps"]["total"] is None
    assert trainer["batch"]["unit"] == "packed rows"
    _spec, problems = form_handlers.form_to_spec(make_form(epochs=1))
    assert "set max_steps or epochs, not both" in problems
    _spec, problems = form_handlers.form_to_spec(make_form(eval_every_steps=5))
    assert "Eval every (steps) (eval_every_steps): eval_every_steps needs an eval set" in problems


def test_fsdp_dtypes_prefetch_and_compile_reach_the_spec_and_the_preview():
    form = make_form(backend="fsdp", precision="bf16", fsdp_reduce_dtype="bf16",
                     fsdp_forward_prefetch=True, fsdp_backward_prefetch=False, fsdp_compile=True)
    spec, _ = form_handlers.form_to_spec(form)
    assert spec.fsdp.param_dtype is None  # "same as precision"
    assert (spec.fsdp.reduce_dtype, spec.fsdp.forward_prefetch, spec.fsdp.backward_prefetch,
            spec.fsdp.compile) == ("bf16", True, False, True)
    config = json.loads(form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings()).config_json)
    assert config["mixed_precision"]["param_dtype"] == "bfloat16"
    assert config["mixed_precision"]["reduce_dtype"] == "bfloat16"
    assert (config["forward_prefetch"], config["backward_prefetch"], config["compile"]) == (
        True, False, True)
    fp16 = json.loads(form_handlers.preview_form({**form, "fsdp_param_dtype": "fp16"}, principal=OPEN_PRINCIPAL, settings=Settings()).config_json)
    assert fp16["mixed_precision"]["param_dtype"] == "float16" and fp16["loss_scaling"] == "dynamic"
    _spec, problems = form_handlers.form_to_spec(make_form(method="qlora", backend="fsdp"))
    assert "Backend (backend): qlora under fsdp" in problems


def test_bad_lora_rank_is_refused_naming_the_field():
    spec, problems = form_handlers.form_to_spec(make_form(lora_r=0))
    assert spec is None
    assert "LoRA rank (lora.r)" in problems and "greater than or equal to 1" in problems


def test_every_bad_field_is_named():
    spec, problems = form_handlers.form_to_spec(make_form(num_gpus=1.5, model="  ",
                                                          learning_rate=-1))
    assert spec is None
    for field in ("num_gpus", "model", "learning_rate"):
        assert f"({field})" in problems, problems
    _spec, problems = form_handlers.form_to_spec(make_form(max_steps=None))
    assert "max_steps" in problems


def test_a_path_is_judged_under_its_field_whatever_else_is_wrong(tmp_path):
    """A bad learning rate does not hide that the model lies outside the allowed folders:
    both are marked at once, and fixing the rate leaves the model marked."""
    settings = Settings(home=tmp_path / "home")
    both = form_handlers.preview_form(make_form(model="/etc/passwd-folder", learning_rate=-0.001),
                                      principal=OPEN_PRINCIPAL, settings=settings)
    assert not both.valid and set(both.field_errors) == {"model", "learning_rate"}
    assert "outside the allowed folders" in both.field_errors["model"]
    assert "Model (model)" in both.message and "Learning rate (learning_rate)" in both.message
    no_config = tmp_path / "home" / "data" / "my-model"
    no_config.mkdir(parents=True)
    folder = form_handlers.preview_form(make_form(model=str(no_config), learning_rate=-1),
                                        principal=OPEN_PRINCIPAL, settings=settings)
    assert "no config.json" in folder.field_errors["model"]
    rate_fixed = form_handlers.preview_form(make_form(model="/etc/passwd-folder"),
                                            principal=OPEN_PRINCIPAL, settings=settings)
    assert set(rate_fixed.field_errors) == {"model"}


def test_a_dataset_missing_on_this_machine_is_noted_under_its_field_not_refused(tmp_path):
    """The worker that reads it may be on another host: a note under the field, and the
    form stays valid; a file that is there gets no note."""
    settings = Settings(home=tmp_path / "home")
    missing = settings.home_dir / "data" / "missing.jsonl"
    preview = form_handlers.preview_form(make_form(dataset=str(missing)),
                                         principal=OPEN_PRINCIPAL, settings=settings)
    assert preview.valid and preview.field_errors == {}
    assert preview.field_infos["dataset"].startswith(f"{missing}: not found on this machine")
    missing.parent.mkdir(parents=True)
    missing.write_text('{"prompt": "What is 1 + 1?", "response": "2"}\n')
    there = form_handlers.preview_form(make_form(dataset=str(missing)),
                                       principal=OPEN_PRINCIPAL, settings=settings)
    assert "dataset" not in there.field_infos


def test_hidden_lora_fields_do_not_block_a_full_fine_tune():
    spec, problems = form_handlers.form_to_spec(make_form(method="full", lora_r=0))
    assert problems == "" and spec.method == "full"


def test_zero2_preview_shows_the_deepspeed_json_and_the_torchrun_command():
    preview = form_handlers.preview_form(make_form(zero2_offload_optimizer=True, precision="fp16"), principal=OPEN_PRINCIPAL, settings=Settings())
    config = json.loads(preview.config_json)
    assert "DeepSpeed" in preview.config_title and preview.message == ""
    assert config["zero_optimization"]["stage"] == 2
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert config["fp16"]["enabled"] is True
    assert config["train_batch_size"] == 4 * 1 * 2
    assert preview.command_line.startswith("torchrun ")
    assert "--nproc_per_node 2 --log-dir" in preview.command_line
    assert "--tee 3 -m trainer --run-dir" in preview.command_line
    # The folder this host's worker gives the job (TUNEDECK_HOME), its id not yet known.
    assert f"--run-dir {Settings().runs_dir}/job-<id>" in preview.command_line.replace("'", "")


def test_fsdp_preview_shows_the_fsdp_settings():
    preview = form_handlers.preview_form(make_form(backend="fsdp", fsdp_cpu_offload=True,
                                                   num_gpus=3), principal=OPEN_PRINCIPAL, settings=Settings())
    config = json.loads(preview.config_json)
    assert "FSDP" in preview.config_title
    assert config["cpu_offload"] is True
    assert config["mixed_precision"]["master_weights_dtype"] == "float32"
    assert "zero_optimization" not in config
    assert "--nproc_per_node 3" in preview.command_line


def test_invalid_preview_names_each_bad_field_and_keeps_the_last_config():
    preview = form_handlers.preview_form(make_form(lora_r=0, learning_rate=5, epochs="x"),
                                         principal=OPEN_PRINCIPAL, settings=Settings())
    assert not preview.valid  # the tab keeps the last valid config, command and plan
    assert "LoRA rank (lora.r)" in preview.message and 'class="field-error"' in preview.message
    assert preview.field_errors == {
        "lora_r": "Input should be greater than or equal to 1",
        "learning_rate": "Input should be less than or equal to 1",
        "epochs": "Input should be a valid number, unable to parse string as a number"}
    # A problem naming no single field stays in the message only.
    unset = form_handlers.preview_form(make_form(max_steps=None), principal=OPEN_PRINCIPAL,
                                       settings=Settings())
    assert unset.field_errors == {} and "set max_steps or epochs" in unset.message
    assert form_handlers.preview_form(make_form(), principal=OPEN_PRINCIPAL,
                                      settings=Settings()).valid


def test_a_refused_submit_points_at_the_marked_fields_without_repeating_them(database):
    job_id, message = form_handlers.submit_form(
        make_form(lora_r=0), database=database, celery_app=RecordingCelery(),
        principal=OPEN_PRINCIPAL, settings=Settings())
    assert job_id is None
    assert "Not submitted: fix what is marked in red (LoRA rank (lora.r))" in message
    assert "greater than or equal" not in message  # that is shown beside the field


def test_the_learning_rate_follows_the_model_until_the_user_sets_one():
    assert make_form()["model"] == "builtin:tiny-llama" and make_form()["learning_rate"] == 5e-3
    assert make_form()["epochs"] == ""  # an empty box, not 0
    assert form_handlers.learning_rate_for_model("/models/Qwen2.5-0.5B", 5e-3) == 2e-4
    assert form_handlers.learning_rate_for_model("builtin:tiny-llama", 2e-4) == 5e-3
    assert form_handlers.learning_rate_for_model("builtin:tiny-llama", 5e-3) is None
    assert form_handlers.learning_rate_for_model("/models/Qwen2.5-0.5B", 3e-5) is None


def test_option_groups_follow_the_choices():
    assert option_visibility.backend_options_visible("zero2") == (True, False)
    assert option_visibility.backend_options_visible("fsdp") == (False, True)
    assert option_visibility.lora_options_visible("lora")
    assert not option_visibility.lora_options_visible("full")


def test_submit_stores_a_queued_job_and_enqueues_its_id(database):
    celery = RecordingCelery()
    job_id, message = form_handlers.submit_form(make_form(name="ui-run"), database=database,
                                                celery_app=celery, principal=OPEN_PRINCIPAL,
                                                settings=Settings())
    assert job_id is not None and f"**{job_id}**" in message and "queued" in message
    assert [(name, args) for name, args, _ in celery.sent] == [(RUN_JOB_TASK, [job_id])]
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
        assert job.status == "queued" and job.name == "ui-run"
        assert JobSpec.model_validate(job.spec).max_steps == 20


def test_refused_submit_stores_and_sends_nothing(database):
    celery = RecordingCelery()
    job_id, message = form_handlers.submit_form(make_form(lora_r=0), database=database,
                                                celery_app=celery, principal=OPEN_PRINCIPAL,
                                                settings=Settings())
    assert job_id is None and "LoRA rank (lora.r)" in message and "Not submitted" in message
    assert celery.sent == []
    with database.transaction() as session:
        assert job_queries.list_jobs(session=session) == []


# The jobs table


def add_steps(database: Database, job_id: int, losses: list[float], *, rank: int = 0) -> None:
    events = [(seq, {"kind": "step", "rank": rank, "time": 1000.0 + seq, "step": seq + 1,
                     "loss": loss, "tokens_per_second": 500.0 + seq})
              for seq, loss in enumerate(losses)]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)


def add_memory(database: Database, job_id: int, readings: list[tuple[int, float, dict]]) -> None:
    events = [(1000 + seq, {"kind": "memory", "rank": rank, "time": time, **values})
              for seq, (rank, time, values) in enumerate(readings)]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)


def test_jobs_table_has_one_row_a_job_newest_first(database):
    first = create_job(database, name="first")
    second = create_job(database, name="second", backend="fsdp", method="full")
    add_steps(database, first, [2.5, 2.25])
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=second, run_dir="/nowhere",
                                   worker_host="h")
        job_store.mark_job_failed(session=session, job_id=second,
                                  error="rank 1 failed: CUDA out of memory\ntraceback...")
    table = jobs_table.jobs_table(database=database, principal=OPEN_PRINCIPAL)
    # Nobody owns a job under open access: no owner column.
    assert list(table.columns) == [column for column in jobs_table.JOBS_TABLE_COLUMNS
                                   if column != jobs_table.OWNER]
    rows = table.to_dict("records")
    assert [row["id"] for row in rows] == [f"[{second}](?job={second})", f"[{first}](?job={first})"]
    assert rows[0]["status"] == "failed" and rows[0]["method · backend"] == "full · fsdp"
    # The failure's first line, as plain text with the whole of it on hover.
    assert rows[0]["reason"].endswith(r": rank 1 failed: CUDA out of memory</span>")
    assert rows[1]["progress"] == "2 / 20 (10%)"
    assert rows[1]["loss"] == "2.2500" and rows[1]["tokens/s"] == "501"
    assert rows[1]["method · backend"] == "lora · zero2"
    create_job(database, objective="dpo", dataset="builtin:arithmetic-preference")
    newest = jobs_table.jobs_table(database=database, principal=OPEN_PRINCIPAL).iloc[0]
    assert newest["method · backend"] == "dpo lora · zero2"  # not to be taken for an SFT job
    # A queued job's reason, as the cluster page says it.
    assert "waiting: no live worker serves queue 'default'" in rows[1]["reason"]


def test_only_an_admin_who_sees_everyones_jobs_gets_the_owner_column(database):
    with database.transaction() as session:
        job_store.create_job(session=session, owner="ada", spec=JobSpec(max_steps=5))
    admin = Principal(name="root", is_admin=True)
    for principal, has_owner in ((admin, True), (Principal(name="ada", is_admin=False), False),
                                 (OPEN_PRINCIPAL, False)):
        table = jobs_table.jobs_table(database=database, principal=principal)
        assert (jobs_table.OWNER in table.columns) == has_owner
        layout = jobs_table.table_layout(table)
        # One type and one width a column shown, the widths filling the table.
        assert len(layout["datatype"]) == len(layout["column_widths"]) == len(table.columns)
        assert sum(float(width.rstrip("%")) for width in layout["column_widths"]) == 100
        assert layout["datatype"][:2] == ["bool", "markdown"] and layout["datatype"][-1] == "html"


def test_a_long_or_marked_up_reason_is_plain_text_cut_short_with_the_whole_on_hover():
    text = "rank 0: <img src=x onerror=alert(1)> *not bold* " + "x" * 200
    cell = jobs_table.hover_cell(text)
    assert cell.startswith('<span title="rank 0: &lt;img src=x onerror=alert(1)&gt; *not bold* ')
    assert ">rank 0: &lt;img src=x onerror=alert(1)&gt; *not bold* x" in cell
    assert cell.endswith("…</span>") and len(cell) < len(text) * 2 + 60
    assert jobs_table.hover_cell("") == ""


def test_a_reason_quoting_a_url_is_escaped_once_for_the_html_cell_it_is_drawn_in(
        offline_hub_error):
    # A quoted URL, which a Markdown cell linked with its backslash escapes inside
    # ("huggingface\\.co").
    text = f"input error: OSError: {offline_hub_error.splitlines()[0]}"
    assert "'https://huggingface.co'" in text
    cell = jobs_table.hover_cell(text, limit=len(text))
    assert jobs_table.COLUMN_TYPES["reason"] == "html"
    assert f">{text}</span>" in cell and "\\" not in cell
    assert html.unescape(cell.split('title="')[1].split('">')[0]) == text


def test_the_jobs_table_filters_by_status_owner_and_model(database):
    with database.transaction() as session:
        ada = job_store.create_job(session=session, owner="ada",
                                   spec=JobSpec(model="builtin:tiny-llama", max_steps=5)).id
        bob = job_store.create_job(session=session, owner="bob",
                                   spec=JobSpec(model="/models/Qwen2.5-0.5B", max_steps=5)).id
        job_store.mark_job_cancelled(session=session, job_id=bob)

    def shown(**choice):
        table = jobs_table.jobs_table(database=database, principal=OPEN_PRINCIPAL,
                                      shown=jobs_table.JobsFilter.of(**choice))
        return jobs_table.listed_job_ids(table)

    assert shown() == [bob, ada]
    assert shown(status="cancelled") == [bob] and shown(status="any") == [bob, ada]
    assert shown(owner="ada") == [ada] and shown(owner=" ") == [bob, ada]
    assert shown(model="qwen2.5") == [bob] and shown(model="llama", status="queued") == [ada]
    owners, models = jobs_table.filter_choices(database=database, principal=OPEN_PRINCIPAL)
    assert owners == ["any", "ada", "bob"]
    assert models == ["any", "/models/Qwen2.5-0.5B", "builtin:tiny-llama"]


def test_job_id_from_a_table_row():
    assert job_id_from_cell(7) == 7 and job_id_from_cell("12") == 12
    assert job_id_from_cell(job_link(31)) == 31
    assert job_id_from_cell(None) is None and job_id_from_cell("id") is None
    assert jobs_table.row_job_id([True, job_link(31), "x"]) == 31
    assert jobs_table.row_job_id(None) is None and jobs_table.row_job_id([False]) is None


def test_the_ticks_are_the_browsers_shown_on_the_jobs_listed_and_acted_on_in_order(database):
    first, second, third = (create_job(database, name=name) for name in ("a", "b", "c"))
    table = jobs_table.jobs_table(database=database, principal=OPEN_PRINCIPAL)
    assert list(table[jobs_table.TICK]) == [False, False, False]  # nothing ticked yet
    ticked = jobs_table.toggled(jobs_table.toggled([], first), third)
    assert ticked == [first, third]
    assert list(jobs_table.with_ticks(table, ticked)[jobs_table.TICK]) == [True, False, True]
    assert jobs_table.toggled(ticked, first) == [third]  # a second click unticks
    # A tick on a job the table no longer lists (filtered out, deleted) stays, unshown and
    # not acted on.
    listed_two = table[table["id"] != job_link(first)]
    assert list(jobs_table.with_ticks(listed_two, ticked)[jobs_table.TICK]) == [True, False]
    assert jobs_table.ticked_jobs(listed_two, ticked) == [third]
    assert jobs_table.ticked_jobs(table, [second, first]) == [second, first]
    assert jobs_table.ticked_jobs(None, ticked) == []
    assert jobs_table.with_ticks(jobs_table.empty_jobs_table(), ticked).empty


# The job page


def test_job_page_of_a_running_job(database):
    job_id = create_job(database)
    add_steps(database, job_id, [3.0, 2.0, 1.5])
    add_steps(database, job_id, [9.0], rank=1)  # only rank 0's steps make the series
    add_memory(database, job_id, [(0, 1000.0, {"allocated_mb": None, "rss_mb": 900.0}),
                                  (1, 1000.1, {"allocated_mb": None, "rss_mb": 950.0}),
                                  (0, 1002.0, {"allocated_mb": 120.0, "rss_mb": 990.0}),
                                  (1, 1002.1, {"allocated_mb": None, "rss_mb": 960.0})])
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL,
                                      view=step_charts.ChartView(smoothing=0.0))
    assert page.status == "queued" and not page.finished and page.cancellable
    assert "step 3 / 20" in page.headline and "loss 1.5000" in page.headline
    assert page.loss.to_dict("list") == {"step": [1, 2, 3], "loss": [3.0, 2.0, 1.5],
                                         "series": ["train"] * 3}
    assert page.throughput["tokens_per_second"].tolist() == [500.0, 501.0, 502.0]
    assert page.events["message"].tolist() == ["queued"]
    assert json.loads(page.config_json)["zero_optimization"]["stage"] == 2
    assert "--run-dir RUN_DIR" in page.command_line
    assert page.error is None and page.downloads_html == ""


def test_a_job_without_worker_samples_charts_its_ranks_own_rss(database):
    job_id = create_job(database)
    add_memory(database, job_id, [(0, 1000.0, {"allocated_mb": None, "rss_mb": 900.0}),
                                  (1, 1000.5, {"allocated_mb": None, "rss_mb": 950.0}),
                                  (0, 1002.0, {"allocated_mb": 120.0, "rss_mb": 990.0})])
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    memory = page.live.sampled_memory.dropna()
    by_rank = {rank: group["memory_mb"].tolist() for rank, group in memory.groupby("series")}
    assert by_rank == {"rank 0": [900.0, 990.0], "rank 1": [950.0]}
    assert page.live.sampled_memory_title == "Memory per rank process (RSS)"


def test_long_lines_are_thinned_keeping_the_newest_point():
    assert step_charts.thin_points(list(range(10)), limit=20) == list(range(10))
    thinned = step_charts.thin_points(list(range(10_001)), limit=1000)
    assert len(thinned) <= 1001 and thinned[0] == 0 and thinned[-1] == 10_000
    assert step_charts.thin_points(list(range(9)), limit=4) == [0, 3, 6, 8]


def test_job_page_of_a_failed_job_shows_its_error(database):
    job_id = create_job(database)
    with database.transaction() as session:
        job_store.mark_job_failed(session=session, job_id=job_id, error="torchrun exited 1")
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert page.status == "failed" and page.finished and not page.cancellable
    assert page.error == "torchrun exited 1"
    assert "torchrun exited 1" in job_handlers.error_html(page.error)
    assert job_handlers.error_html(None) == ""


def test_job_page_of_a_succeeded_job_links_its_artifacts(database, tmp_path):
    job_id = create_job(database)
    run = RunFolder(tmp_path / f"job-{job_id}")
    (run.merged_dir).mkdir(parents=True)
    (run.adapter_dir).mkdir(parents=True)
    run.logs_dir.mkdir()
    run.launcher_log_file.write_text("line 1\nline 2\n")
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
        job_store.mark_job_succeeded(session=session, job_id=job_id)
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert page.status == "succeeded" and page.finished
    assert f'href="/api/jobs/{job_id}/artifacts/merged"' in page.downloads_html
    assert f'href="/api/jobs/{job_id}/artifacts/adapter"' in page.downloads_html
    assert "download=" in page.downloads_html
    assert page.log_tail == "line 1\nline 2"


def test_job_page_without_a_job(database):
    assert job_handlers.load_job_page(None, database=database, principal=OPEN_PRINCIPAL).status is None
    missing = job_handlers.load_job_page(99, database=database, principal=OPEN_PRINCIPAL)
    assert missing.status is None and "no job 99" in missing.headline and missing.finished


def test_cancel_from_the_page_ends_a_queued_job(database):
    job_id = create_job(database)
    assert "cancelled" in job_actions.cancel_from_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL).status == "cancelled"
    assert "no job 42" in job_actions.cancel_from_page(42, database=database, principal=OPEN_PRINCIPAL)


def test_build_ui_builds(database):
    blocks = build_ui(database=database, celery_app=RecordingCelery())
    element_ids = {getattr(block, "elem_id", None) for block in blocks.blocks.values()}
    for element_id in ("new-job-submit", "new-job-model", "new-job-config", "jobs-table",
                       "job-id", "job-status", "job-loss-plot", "job-memory-plot", "job-cancel",
                       "job-compare-backends", "compare-ids", "compare-loss-plot",
                       "compare-memory-plot", "compare-diff"):
        assert element_id in element_ids


def test_ui_modules_do_not_import_torch_or_the_worker():
    ui_folder = Path(__file__).resolve().parents[2] / "app" / "ui"
    source = "\n".join(path.read_text() for path in ui_folder.rglob("*.py"))
    assert "def build_ui" in source
    assert "import torch" not in source and "from worker" not in source


def test_eval_loss_is_a_second_line_of_the_loss_chart(database):
    job_id = create_job(database, eval_split=0.1, eval_every_steps=2)
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL,
                                      view=step_charts.ChartView(smoothing=0.0))
    # Before any point, each line is one empty row, so the chart knows both colours at once.
    assert page.loss["series"].tolist() == ["train", "eval"] and page.loss["loss"].isna().all()
    add_steps(database, job_id, [3.0, 2.0, 1.5])
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=[
            (100, {"kind": "eval", "rank": 0, "time": 2000.0, "step": 2, "eval_loss": 2.5,
                   "eval_tokens": 80})])
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL,
                                      view=step_charts.ChartView(smoothing=0.0))
    assert page.loss.dropna().to_dict("list") == {"step": [1, 2, 3, 2], "loss": [3.0, 2.0, 1.5, 2.5],
                                                  "series": ["train"] * 3 + ["eval"]}
    assert str(page.loss["step"].dtype) == "float64"
    assert "eval loss 2.5000 (step 2)" in page.headline


def test_loss_and_throughput_are_smoothed_with_the_raw_line_behind_and_loss_can_be_log():
    train = [{"step": step, "loss": loss, "tokens_per_second": rate}
             for step, (loss, rate) in enumerate([(4.0, 100.0), (2.0, 300.0), (4.0, 100.0),
                                                  (2.0, 300.0)], start=1)]
    view = step_charts.ChartView(smoothing=0.5)
    loss = step_charts.loss_frame(train, view=view)
    lines = {name: rows["loss"].tolist() for name, rows in loss.groupby("series")}
    assert lines["train (raw)"] == [4.0, 2.0, 4.0, 2.0]
    # Debiased EMA: the first point is the first value, not half of it.
    assert lines["train"] == pytest.approx([4.0, 2.6666667, 3.4285714, 2.6666667])
    assert loss["series"].tolist()[:4] == ["train (raw)"] * 4  # drawn first, under it
    rates = step_charts.throughput_frame(train, view=view)
    assert sorted(rates["series"].unique()) == ["tokens/s", "tokens/s (raw)"]
    # The log scale is the chart's axis (ticks at 1, 2, 5 of each decade); the values stay.
    log_chart = step_charts.loss_chart_html(loss, log_scale=True)
    assert [tick for tick in re.findall(r'class="td-y-tick"[^>]*>([^<]*)<', log_chart)] == \
        ["2", "3", "4"]
    evaluated = step_charts.loss_frame(train, [{"step": 2, "eval_loss": 3.0},
                                                {"step": 4, "eval_loss": 2.5}], view=view)
    # Eval losses are points as measured: not smoothed, no raw twin.
    assert evaluated[evaluated["series"] == "eval"]["loss"].tolist() == [3.0, 2.5]
    assert "eval (raw)" not in set(evaluated["series"])
    drawn = step_charts.loss_chart_html(evaluated)
    assert re.search(r'class="td-series td-points" data-series="eval"', drawn)
    assert re.search(r'class="td-series td-faint" data-series="train \(raw\)"', drawn)
    assert step_charts.ChartView.of("0.3", "on") == step_charts.ChartView(0.3, True)
    assert step_charts.ChartView.of(5, None).smoothing == step_charts.MAX_SMOOTHING
    assert step_charts.ChartView.of(None, None).smoothing == step_charts.ChartView.smoothing


def test_a_finished_jobs_empty_charts_are_hidden(database):
    job_id = create_job(database)
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert page.charts_shown(page.loss)  # queued: its points are coming
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r", worker_host="h")
        job_store.mark_job_failed(session=session, job_id=job_id, error="boom")
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert not page.charts_shown(page.loss) and not page.charts_shown(page.throughput)
    add_steps(database, job_id, [3.0])
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert page.charts_shown(page.loss)


def test_a_job_without_eval_draws_one_loss_line():
    frame = step_charts.loss_frame([{"step": 1, "loss": 2.0}], [])
    assert frame.to_dict("list") == {"step": [1.0], "loss": [2.0], "series": ["train"]}


# The memory plan in the form


def test_preview_carries_the_memory_plan_for_the_forms_gpus():
    preview = form_handlers.preview_form(make_form(gpu_memory_gb=80), principal=OPEN_PRINCIPAL, settings=Settings())
    assert "Recommended: <strong>zero2</strong>" in preview.plan.html
    assert 'data-strategy="fsdp_offload"' in preview.plan.html
    frame = preview.plan.frame
    assert set(frame["backend"]) == {"ddp", "zero2", "zero2_offload", "fsdp", "fsdp_offload"}
    assert set(frame["part"]) == {"weights", "grads", "optimizer", "activations", "buffers"}
    assert preview.message == "" and preview.plan.warning == ""


def test_a_job_that_will_not_fit_is_warned_about_before_and_at_submit(database):
    form = make_form(model="meta-llama/Llama-2-13b-hf", method="full", gpu_memory_gb=24,
                     num_gpus=2)
    preview = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings())
    assert preview.plan.warning.startswith("⚠ zero2 will not fit: it needs about")
    assert preview.message == preview.plan.warning
    job_id, message = form_handlers.submit_form(form, database=database, celery_app=RecordingCelery(),
                                                principal=OPEN_PRINCIPAL, settings=Settings())
    assert job_id is not None and "⚠ zero2 will not fit" in message
    unknown = form_handlers.preview_form(make_form(model="/nowhere/model"), principal=OPEN_PRINCIPAL, settings=Settings())
    assert unknown.plan.html.startswith("<p>No memory plan: model /nowhere/model")


# Checkpoints and Resume on the job page


def test_job_page_lists_checkpoints_and_resumes_a_failed_job_from_the_newest(database, tmp_path):
    job_id = create_job(database, checkpoint_every_steps=5)
    run = RunFolder(tmp_path / f"job-{job_id}")
    for step in (5, 10):
        folder = run.checkpoint_dir(step)
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"step": step}))
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
    running = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert list(running.checkpoints["step"]) == [10, 5] and not running.resumable
    with database.transaction() as session:
        job_store.mark_job_failed(session=session, job_id=job_id, error="worker lost")
    assert job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL).resumable
    celery = RecordingCelery()
    message = job_actions.resume_from_page(job_id, database=database, celery_app=celery, principal=OPEN_PRINCIPAL)
    assert message == f"Job {job_id} is queued again; it resumes from its latest checkpoint."
    assert [(name, args) for name, args, _ in celery.sent] == [(RUN_JOB_TASK, [job_id])]
    assert job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL).status == "queued"
    assert job_actions.resume_from_page(job_id, database=database,
                                        celery_app=celery, principal=OPEN_PRINCIPAL).startswith("Not resumed: job")
    no_checkpoints = create_job(database)
    with database.transaction() as session:
        job_store.request_cancel(session=session, job_id=no_checkpoints)
    assert not job_handlers.load_job_page(no_checkpoints, database=database, principal=OPEN_PRINCIPAL).resumable


def test_job_page_sets_each_ranks_measured_bytes_beside_the_plan(database):
    from tunedeck.metrics.events import decode_event, encode_event

    job_id = create_job(database, backend="fsdp", method="full")
    assert job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL).memory_comparison == ""
    lines = [encode_event("footprint", rank=rank, time=1.0, step=1, params_bytes=246_400,
                          grads_bytes=246_400, optimizer_bytes=492_800) for rank in (0, 1)]
    lines.append(encode_event("memory", rank=1, time=1.0, step=1, peak_reserved_mb=2048.0))
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id,
                                       events=[(seq, decode_event(line)) for seq, line in enumerate(lines)])
    table = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL).memory_comparison
    assert "Planned for `fsdp`" in table
    # builtin:tiny-llama full under FSDP on 2 ranks: 123,200 fp32 weights / 2 = 0.25 MB each.
    assert "| 0 | 0.25 (0.25) | 0.25 (0.25) | 0.49 (0.49) | n/a on CPU" in table
    assert "| 1 | 0.25 (0.25) | 0.25 (0.25) | 0.49 (0.49) | 2.15 (" in table
