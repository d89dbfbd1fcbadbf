"""POST /api/lora-targets and the form's "What LoRA adapts": the trainer's own resolution,
run in a subprocess (the web process never imports torch)."""
import pytest

from app.auth.principal import Principal
from app.ui.new_job import form_handlers
from app.ui.new_job.target_handlers import lora_targets_view
from tests.trainer.model_families import family_config
from tunedeck.lora_targets_text import preview_as_markdown
from tunedeck.settings import Settings


@pytest.fixture
def mixtral_folder(tmp_path):
    """config.json alone: the resolver builds the model on the meta device, no weights."""
    folder = tmp_path / "tiny-mixtral"
    family_config("mixtral").save_pretrained(folder)
    return folder


def test_the_api_answers_what_all_linear_resolves_to_on_a_moe_model(client, mixtral_folder):
    response = client.post("/api/lora-targets", json={
        "model": str(mixtral_folder), "max_steps": 1, "lora": {"r": 4}})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["architecture"] == "MixtralForCausalLM"
    assert answer["linear_modules"] == [f"model.layers.*.self_attn.{p}_proj" for p in "qkvo"]
    assert answer["expert_parameters"] == ["model.layers.*.mlp.experts.gate_up_proj",
                                           "model.layers.*.mlp.experts.down_proj"]
    assert answer["routers"] == ["model.layers.*.mlp.gate"] and answer["router"] == "frozen"
    # r x (in + out) per attention linear, and per expert of each fused weight, 2 layers:
    attention = 4 * ((32 + 32) + (32 + 16) + (32 + 16) + (32 + 32))
    experts = 4 * 4 * ((32 + 128) + (64 + 32))
    assert answer["trainable_parameters"] == 2 * (attention + experts)


def test_a_model_outside_the_allowed_roots_or_unknown_is_refused_by_field(client, tmp_path_factory):
    outside = client.post("/api/lora-targets", json={"model": "/etc", "max_steps": 1})
    assert outside.status_code == 422 and outside.json()["detail"][0]["loc"] == ["body", "model"]
    unknown = tmp_path_factory.mktemp("unknown-family")
    (unknown / "config.json").write_text('{"model_type": "no-such-family"}')
    refused = client.post("/api/lora-targets", json={"model": str(unknown), "max_steps": 1})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["msg"].startswith(f"model {unknown}: ")
    assert "no-such-family" in refused.json()["detail"][0]["msg"]


def test_a_web_host_without_torch_says_it_cannot_answer(client, mixtral_folder, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "torch" else real_find_spec(name, *rest))
    response = client.post("/api/lora-targets", json={"model": str(mixtral_folder), "max_steps": 1})
    assert response.status_code == 503 and "no torch" in response.json()["detail"]


def test_a_model_with_its_own_code_is_never_built_on_the_web_host(client, mixtral_folder):
    response = client.post("/api/lora-targets", json={
        "model": str(mixtral_folder), "max_steps": 1, "trust_remote_code": True})
    assert response.status_code == 503 and "trust_remote_code" in response.json()["detail"]


def test_the_form_sends_the_expert_and_router_switches():
    form = {**form_handlers.default_form(), "lora_experts": False, "lora_train_router": True}
    spec, problems = form_handlers.form_to_spec(form)
    assert problems == "" and spec.lora.experts is False and spec.lora.train_router is True


def test_the_form_shows_the_resolution_or_why_not(tmp_path):
    settings, admin = Settings(home=tmp_path), Principal(name="admin", is_admin=True)
    full = {**form_handlers.default_form(), "method": "full"}
    assert lora_targets_view(full, principal=admin, settings=settings) == \
        "A full fine-tune trains every weight."
    outside = {**form_handlers.default_form(), "model": "/etc"}
    assert "/etc" in lora_targets_view(outside, principal=admin, settings=settings)
    shown = preview_as_markdown({
        "architecture": "MixtralForCausalLM", "model_type": "mixtral", "trainable_parameters": 500,
        "total_parameters": 1000, "linear_modules": ["model.layers.*.self_attn.q_proj"],
        "expert_parameters": ["model.layers.*.mlp.experts.down_proj"],
        "experts_left_out": [], "routers": ["model.layers.*.mlp.gate"], "router": "frozen"},
        dropout=0.05)
    assert shown.splitlines() == [
        "**MixtralForCausalLM** (mixtral): 500 trainable parameters of 1,000 (50.00%)",
        "- linear layers (dropout 0.05): `model.layers.*.self_attn.q_proj`",
        "- expert weights (no dropout): `model.layers.*.mlp.experts.down_proj`",
        "- router, frozen: `model.layers.*.mlp.gate`"]
    # `tunedeck lora-targets` prints the same as a plain text table.
    from cli.lora_targets_command import preview_as_text

    printed = preview_as_text({
        "architecture": "MixtralForCausalLM", "model_type": "mixtral", "trainable_parameters": 500,
        "total_parameters": 1000, "linear_modules": ["q_proj", "v_proj"],
        "routers": ["model.layers.*.mlp.gate"], "router": "frozen"}, dropout=0.05)
    assert printed.splitlines() == [
        "MixtralForCausalLM (mixtral): 500 trainable parameters of 1,000 (50.00%)",
        "",
        "ADAPTED                       NAMES",
        "linear layers (dropout 0.05)  q_proj, v_proj",
        "router, frozen                model.layers.*.mlp.gate"]


def test_the_resolver_process_is_kept_between_answers_and_restarted_when_it_dies(tmp_path, mixtral_folder):
    import os
    import signal
    import time

    from app.actions.lora_preview import _resolver_server

    resolver = _resolver_server(tmp_path / "home")
    ask = {"model": str(mixtral_folder), "max_steps": 1, "lora": {"r": 4}}
    first = resolver.ask(ask)
    pid = resolver.pid
    started = time.monotonic()
    again = resolver.ask({**ask, "lora": {"r": 8}})
    assert time.monotonic() - started < 5 and resolver.pid == pid  # no new imports
    assert again["trainable_parameters"] == 2 * first["trainable_parameters"]
    assert "error" in resolver.ask({**ask, "lora": {"target_modules": ["nothing_like_this"]}})
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    assert resolver.ask(ask) == first and resolver.pid != pid
    resolver.stop()


def test_the_form_offers_the_expert_options_only_for_a_model_with_experts(tmp_path, mixtral_folder):
    from app.ui.new_job.target_handlers import model_has_experts

    settings, user = Settings(home=tmp_path), Principal(name="someone", is_admin=False)
    assert model_has_experts(str(mixtral_folder), principal=user, settings=settings) is True
    assert model_has_experts("builtin:tiny-llama", principal=user, settings=settings) is False
    for unread in ("/etc", "", str(tmp_path / "missing")):  # refused, empty, not there
        assert model_has_experts(unread, principal=user, settings=settings) is None
    # A dense model's boxes go off and hidden; a MoE model's expert box takes the default,
    # unless a preset just set it; an unread model's stay as they are.
    assert form_handlers.expert_options(False) == (False, False, False)
    assert form_handlers.expert_options(True) == (True, True, None)
    assert form_handlers.expert_options(True, keep_value=True) == (True, None, None)
    assert form_handlers.expert_options(None) == (True, None, None)
    assert form_handlers.default_form()["lora_experts"] is False  # the built-in is dense
