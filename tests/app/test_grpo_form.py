"""Objective GRPO from the New job form and on the job page: its options in three groups
(sampling, rewards, loss) shown for GRPO only, the rewards as YAML beside the scorers they may
name, a first GRPO click that makes a valid spec; the job page's RL charts and rollouts table;
the kept rollouts through GET /api/jobs/{id}/rollouts."""
from __future__ import annotations

import html
import json

import gradio as gr

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.build_ui import build_ui
from app.ui.job_page.live_charts import LiveCharts, live_charts
from app.ui.job_page.live_panel import preference_panel_html, rollouts_html, show_preference
from app.ui.new_job import form_handlers, option_visibility
from tests.app.test_ui_handlers import RecordingCelery
from tunedeck.jobs import store as job_store
from tunedeck.metrics import store as metric_store
from tunedeck.metrics.events import ROLLOUT
from tunedeck.rewards.scorers import SCORERS
from tunedeck.spec.job_spec import JobSpec, spec_field
from tunedeck.settings import Settings

GRPO_GROUPS = ("new-job-grpo-sampling-options", "new-job-grpo-rewards-options",
               "new-job-grpo-loss-options")


def picked_grpo(form: dict) -> dict:
    """The form after a user picks GRPO, as the tab applies it."""
    switch = option_visibility.objective_picked("grpo", form["dataset"], form["packing"],
                                                form["padding_free"], form=form)
    changes = {name: getattr(switch, name) for name in
               ("dataset", "packing", "padding_free", "micro_batch_size", "seq_len")
               if getattr(switch, name) is not None}
    return {**form, "objective": "grpo", **changes}


def test_a_first_grpo_click_makes_a_valid_spec_with_the_rl_dataset():
    form = picked_grpo({**form_handlers.default_form(), "packing": True})
    assert form["dataset"] == "builtin:arithmetic-rl" and form["packing"] is False
    assert form["micro_batch_size"] == 8 and form["seq_len"] == 512  # whole groups, room
    spec, problems = form_handlers.form_to_spec(form)
    assert not problems, problems
    assert spec.objective == "grpo" and [reward.name for reward in spec.grpo.rewards] == [
        "numeric_match"]
    preview = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings())
    trainer = json.loads(preview.trainer_json)
    assert trainer["objective"] == "grpo" and trainer["grpo"]["num_generations"] == 8
    # Back to SFT: nothing of GRPO's stays in the spec.
    sft, problems = form_handlers.form_to_spec({**form, "objective": "sft",
                                                "dataset": "builtin:arithmetic"})
    assert not problems and sft.grpo == JobSpec.model_fields["grpo"].default


def test_the_rewards_are_yaml_a_line_each_and_round_trip():
    spec = JobSpec.model_validate({
        "objective": "grpo", "dataset": "builtin:arithmetic-rl", "max_steps": 3,
        "micro_batch_size": 8, "seq_len": 512, "grpo": {"rewards": [
            {"name": "regex_match", "pattern": "^\\d+$", "weight": 0.5},
            {"name": "numeric_match", "column": "result"}]}})
    form = form_handlers.spec_to_form(spec)
    assert form["grpo_rewards"].splitlines() == [
        "- {name: regex_match, weight: 0.5, pattern: ^\\d+$}",
        "- {name: numeric_match, column: result}"]
    again, problems = form_handlers.form_to_spec(form)
    assert not problems and again.grpo.rewards == spec.grpo.rewards
    bad, problems = form_handlers.form_to_spec({**form, "grpo_rewards": "- {name: bleu}"})
    assert bad is None and "grpo.rewards.0: Input tag 'bleu'" in str(problems), problems
    broken, problems = form_handlers.form_to_spec({**form, "grpo_rewards": "- {name: ["})
    assert broken is None and "grpo.rewards" in str(problems), problems


def test_the_grpo_groups_show_for_grpo_only_labelled_in_the_specs_words(database, tmp_path):
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    by_id = {block.elem_id: block for block in blocks.blocks.values() if block.elem_id}
    for group in GRPO_GROUPS:
        assert isinstance(by_id[group], gr.Group) and by_id[group].visible is False
    generations = by_id["new-job-grpo-num-generations"]
    assert (generations.label, generations.info) == (
        spec_field("grpo.num_generations").title, spec_field("grpo.num_generations").description)
    rewards = by_id["new-job-grpo-rewards"]
    assert isinstance(rewards, gr.Textbox) and rewards.value == "- {name: numeric_match}\n"
    scorers = by_id["new-job-grpo-scorers"].value
    for scorer in SCORERS:
        name = scorer.model_fields["name"].annotation.__args__[0]
        assert f"<code>{name}</code>: {html.escape(scorer.description)}" in scorers


STEP = {"loss": 0.0, "learning_rate": 1e-3, "grad_norm": 0.1, "tokens_per_second": 100.0,
        "step_seconds": 0.2, "tokens": 100, "reward": 0.5, "reward_std": 0.2,
        "reward_means": {"contains": 0.4, "length": -0.1}, "clip_ratio_low": 0.0,
        "clip_ratio_high": 0.01, "entropy": 2.0, "completion_length": 5.0,
        "completion_length_min": 2.0, "completion_length_max": 8.0, "clipped_ratio": 0.1,
        "sampling_seconds": 0.12, "scoring_seconds": 0.01, "training_seconds": 0.07}
SAMPLES = [{"prompt": "What is 1 + 6?", "completions": [
    {"text": "7", "reward": 1.0, "rewards": {"contains": 1.0}},
    {"text": "<b>8</b>", "reward": 0.0, "rewards": {"contains": 0.0}}]}]


def test_an_rl_jobs_page_draws_its_charts_and_its_rollouts_newest_first():
    spec = JobSpec.model_validate({"objective": "grpo", "dataset": "builtin:arithmetic-rl",
                                   "max_steps": 3, "micro_batch_size": 8, "seq_len": 512})
    train = [{"step": step, "time": 100.0 + step, **STEP} for step in (1, 2, 3)]
    rollouts = [{"step": 2, "time": 2.0, "samples": SAMPLES},
                {"step": 1, "time": 1.0, "samples": SAMPLES}]
    live = live_charts(spec=spec, series={"train": train, "rollouts": rollouts}, status="running",
                       started_at=None, finished_at=None)
    drawn = {name for name, frame in live.preference.items() if not frame.dropna().empty}
    assert drawn == {"reward", "completion_length", "clip_ratio", "step_time_split"}  # no kl
    reward_lines = set(live.preference["reward"]["series"])
    assert {"reward", "contains", "length"} <= reward_lines
    panel = preference_panel_html(live)
    assert 'id="job-reward-plot"' in panel and 'id="job-kl-plot"' not in panel
    table = rollouts_html(rollouts)
    assert table.index("<td>2</td>") < table.index("<td>1</td>")  # newest first
    assert "&lt;b&gt;8&lt;/b&gt;" in table and '<tr class="rollout-best">' in table
    assert show_preference(live).visible and not show_preference(LiveCharts()).visible


def test_kept_rollouts_are_served_newest_first_a_step_once(client):
    database = client.app_state.database
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(
            objective="grpo", dataset="builtin:arithmetic-rl", max_steps=3, micro_batch_size=8,
            seq_len=512)).id
        # Steps 1 and 10, and step 10 again from a resumed launch (its later line wins).
        events = [(seq, {"kind": ROLLOUT, "rank": 0, "time": float(seq), "step": step,
                         "samples": [{**SAMPLES[0], "prompt": f"launch {seq}"}]})
                  for seq, step in enumerate((1, 10, 10))]
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
    rollouts = client.get(f"/api/jobs/{job_id}/rollouts").json()["rollouts"]
    assert [(rollout["step"], rollout["samples"][0]["prompt"]) for rollout in rollouts] == [
        (10, "launch 2"), (1, "launch 0")]
    assert client.get(f"/api/jobs/{job_id}/rollouts", params={"limit": 1}).json()[
        "rollouts"][0]["step"] == 10
    assert client.get("/api/jobs/999/rollouts").status_code == 404


def test_check_data_of_grpo_prompts_reads_as_prompts_against_their_room():
    from app.ui.new_job.preflight_handlers import preflight_html

    report = {"objective": "grpo", "records": 3, "seq_len": 64, "prompt_room": 48,
              "max_completion_length": 16,
              "sample": {"sampled": False, "tokenized": 3, "seed": 0},
              "lengths": {"min": 10, "p50": 12, "p90": 50, "p99": 50, "max": 50, "mean": 24.0},
              "histogram": [{"low": 0, "high": 48, "count": 2, "over_seq_len": False},
                            {"low": 49, "high": None, "count": 1, "over_seq_len": True}],
              "over_seq_len": {"count": 1, "share": 1 / 3},
              "prompt_tokens_cut": {"total": 72, "cut": 2},
              "duplicates": {"records": 0, "groups": 0, "largest": []},
              "reward_columns": ["answer"], "examples": [], "packing": None,
              "eval_held_out": 0, "warnings": ["1 prompts are longer than the 48 tokens"],
              "seconds": {"read": 0.1, "total": 0.2}}
    page = preflight_html({"status": "done", "id": 5, "worker_name": "w", "report": report})
    assert "3 prompts; all tokenized" in page
    assert "room for a prompt: 48 tokens (seq_len 64 less max_completion_length 16)" in page
    assert "rewards read the columns: answer" in page
    assert "prompt tokens (red: past the room seq_len leaves beside max_completion_length)" in page
