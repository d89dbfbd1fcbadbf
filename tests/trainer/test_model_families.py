"""Every common decoder family trains (real torchrun, 2 CPU ranks): LoRA under FSDP and
ZeRO-2 on a tiny random model of each, mixture-of-experts ones with adapters on their fused
expert weights, and a full fine-tune of each MoE one; every merged folder loads back."""
from statistics import mean

import pytest
import torch

from tests.trainer.conftest import launch_trainer, write_run
from tests.trainer.model_families import FAMILIES, MOE_FAMILIES, write_family_model

pytestmark = pytest.mark.torchrun

STEPS = 10
# Tiny random models: a high constant rate makes the fall plain within STEPS.
LORA = {"method": "lora", "learning_rate": 2e-2, "lr_schedule": "constant", "max_steps": STEPS,
        "precision": "bf16", "lora": {"r": 8, "alpha": 16}}
FULL = {**LORA, "method": "full", "learning_rate": 5e-3}
FALL = 1.0  # nats, first three steps' mean to the last three's (observed: 2.5 to 3.5)


@pytest.fixture(scope="session")
def family_model(tmp_path_factory, builtin_tokenizer):
    """family -> its model folder under pytest's tmp dir, written once a session."""
    folders = {}

    def folder_of(family: str):
        if family not in folders:
            folders[family] = write_family_model(
                family, tmp_path_factory.mktemp(f"model-{family}"), builtin_tokenizer)
        return folders[family]

    return folder_of


def train(folder, tmp_path, tunedeck_home, **spec):
    result = launch_trainer(write_run(tmp_path / "run", model=str(folder), **spec), tunedeck_home)
    assert result.returncode == 0, result.output
    print(f"{folder.name} {spec['backend']} {spec['method']}: {result.seconds:.1f} s")
    losses = [event["loss"] for event in result.events_of_kind(0, "step")]
    assert len(losses) == STEPS
    assert mean(losses[-3:]) < mean(losses[:3]) - FALL, losses
    return result.run


def result_events(run, kind: str) -> list[dict]:
    """Rank 0's events of one kind, from the run folder."""
    from tunedeck.metrics.events import decode_event

    lines = run.rank_metrics_file(0).read_text(encoding="utf-8").splitlines()
    return [event for event in map(decode_event, lines) if event is not None and event["kind"] == kind]


def logits_of(model) -> torch.Tensor:
    ids = torch.randint(3, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model.eval()(ids).logits


@pytest.mark.parametrize("backend", ["fsdp", "zero2"])
@pytest.mark.parametrize("family", FAMILIES)
def test_lora_trains_and_its_merge_is_base_plus_adapter(family, backend, family_model, tmp_path,
                                                        tunedeck_home):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder = family_model(family)
    run = train(folder, tmp_path, tunedeck_home, backend=backend, **LORA)

    merged = AutoModelForCausalLM.from_pretrained(run.merged_dir)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(folder), run.adapter_dir)
    assert type(merged).__name__ == type(adapted.get_base_model()).__name__
    assert torch.allclose(logits_of(merged), logits_of(adapted), atol=1e-4)
    with adapted.disable_adapter():
        assert not torch.allclose(logits_of(merged), logits_of(adapted), atol=1e-2)
    (targets_notice,) = [event["message"] for event in result_events(run, "notice")
                         if event["message"].startswith("LoRA adapts ")]
    assert ("expert weights" in targets_notice) == (family in MOE_FAMILIES), targets_notice
    if family in MOE_FAMILIES:  # the experts trained; the router did not
        assert "router frozen" in targets_notice
        trained = adapted.base_model.targeted_parameter_names
        assert "model.layers.0.mlp.experts.gate_up_proj" in trained
        base = AutoModelForCausalLM.from_pretrained(folder)
        assert torch.equal(merged.model.layers[0].mlp.gate.weight, base.model.layers[0].mlp.gate.weight)


@pytest.mark.parametrize("family, backend", [("mixtral", "fsdp"), ("qwen2_moe", "zero2")])
def test_moe_full_finetune_trains_experts_and_router(family, backend, family_model, tmp_path,
                                                     tunedeck_home):
    from transformers import AutoModelForCausalLM

    folder = family_model(family)
    run = train(folder, tmp_path, tunedeck_home, backend=backend, **FULL)

    merged, base = (AutoModelForCausalLM.from_pretrained(path) for path in (run.merged_dir, folder))
    changed = {name for (name, after), before in zip(merged.named_parameters(), base.parameters())
               if not torch.equal(after, before)}
    assert {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.gate.weight"} <= changed
