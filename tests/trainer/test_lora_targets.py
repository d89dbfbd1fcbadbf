"""What LoRA adapts on each model family (trainer.model.lora_targets, trainer.model.method), on tiny CPU
and meta-device models: no torchrun."""
import pytest
import torch

from tunedeck.spec.job_spec import JobSpec

from tests.trainer.model_families import FAMILIES, MOE_FAMILIES, build_family_model, write_family_model
from trainer.model.lora_targets import resolve_lora_targets
from trainer.model.method import apply_method, trainable_parameter_count

DENSE_FAMILIES = [family for family in FAMILIES if family not in MOE_FAMILIES]


def lora_spec(**lora) -> JobSpec:
    return JobSpec(max_steps=1, lora={"r": 4, **lora})


def adapted_names(model) -> set[str]:
    base = model.base_model
    return set(base.targeted_module_names) | set(base.targeted_parameter_names)


def trainable_names(model) -> list[str]:
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


def dropout_kinds(model) -> dict[str, str]:
    """Adapted name -> the class of its LoRA dropout."""
    from peft.tuners.lora.layer import LoraLayer

    return {name: type(module.lora_dropout["default"]).__name__
            for name, module in model.named_modules()
            if isinstance(module, LoraLayer) and "default" in module.lora_dropout}


def learns(model) -> None:
    """One forward and backward: every trainable weight gets a gradient."""
    ids = torch.randint(3, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    assert [name for name, parameter in model.named_parameters()
            if parameter.requires_grad and parameter.grad is None] == []


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_moe_experts_get_adapters_without_dropout_and_the_router_stays_frozen(family):
    model = apply_method(build_family_model(family), lora_spec(dropout=0.05))

    adapted = adapted_names(model)
    assert {f"model.layers.{i}.mlp.experts.{weight}" for i in (0, 1)
            for weight in ("gate_up_proj", "down_proj")} <= adapted
    assert {f"model.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in "qkvo"} <= adapted
    assert not any(".gate." in name or name.endswith((".gate", "_gate")) for name in adapted)
    assert not any("gate.weight" in name for name in trainable_names(model))
    kinds = dropout_kinds(model)
    assert kinds["base_model.model.model.layers.0.self_attn.q_proj"] == "Dropout"
    assert {kind for name, kind in kinds.items() if "experts" in name} == {"Identity"}
    learns(model)


def test_qwen2_moe_shared_expert_is_adapted_and_its_gate_counts_as_a_router():
    targets = resolve_lora_targets(build_family_model("qwen2_moe"), lora_spec().lora)
    assert "model.layers.0.mlp.shared_expert.gate_proj" in targets.linear_modules
    assert targets.router_modules == ("model.layers.0.mlp.gate", "model.layers.0.mlp.shared_expert_gate",
                                      "model.layers.1.mlp.gate", "model.layers.1.mlp.shared_expert_gate")
    assert "model.layers.0.mlp.shared_expert_gate" not in targets.linear_modules


def test_experts_off_leaves_the_fused_weights_frozen_and_keeps_peft_dropout():
    model = apply_method(build_family_model("mixtral"), lora_spec(experts=False, dropout=0.05))
    assert not any("experts" in name for name in adapted_names(model))
    assert set(dropout_kinds(model).values()) == {"Dropout"}
    assert model.peft_config["default"].lora_dropout == 0.05
    targets = resolve_lora_targets(build_family_model("mixtral"), lora_spec(experts=False).lora)
    assert targets.as_json()["experts_left_out"] == ["model.layers.*.mlp.experts.gate_up_proj",
                                                     "model.layers.*.mlp.experts.down_proj"]


def test_train_router_trains_each_router_whole():
    frozen = apply_method(build_family_model("mixtral"), lora_spec())
    trained = apply_method(build_family_model("mixtral"), lora_spec(train_router=True))
    router_weights = [name for name in trainable_names(trained) if ".gate." in name]
    assert len(router_weights) == 2  # one (experts x hidden) matrix per layer
    assert trainable_parameter_count(trained) == trainable_parameter_count(frozen) + 2 * 4 * 32
    learns(trained)


def test_a_list_selects_modules_and_expert_weights_by_suffix():
    model = apply_method(build_family_model("mixtral"),
                         lora_spec(target_modules=["q_proj", "experts.down_proj"]))
    assert adapted_names(model) == {f"model.layers.{i}.{name}" for i in (0, 1)
                                    for name in ("self_attn.q_proj", "mlp.experts.down_proj")}


@pytest.mark.parametrize("names, message", [
    (["q_proj", "w9"], "lora.target_modules: w9 matches no linear layer"),
    (["gate"], "lora.target_modules: gate is the router of MixtralForCausalLM; .*train_router"),
])
def test_a_list_name_that_selects_nothing_is_refused_by_name(names, message):
    with pytest.raises(ValueError, match=message):
        resolve_lora_targets(build_family_model("mixtral"), lora_spec(target_modules=names).lora)


@pytest.mark.parametrize("family", DENSE_FAMILIES)
def test_dense_families_adapt_every_linear_but_the_head(family):
    model = build_family_model(family)
    linears = {name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    adapted = apply_method(model, lora_spec(dropout=0.05))
    assert adapted_names(adapted) == linears - {"lm_head"}
    assert set(dropout_kinds(adapted).values()) == {"Dropout"}


def test_a_dense_mlp_in_a_moe_model_peft_would_rename_is_still_adapted(tmp_path):
    """peft rewrites any target ending in .gate_proj of a Qwen3-MoE into the fused experts'
    parameter; the dense first layer's MLP is adapted (by its weight) all the same, and the
    saved adapter loads back onto the same weights."""
    from peft import PeftModel
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(vocab_size=384, hidden_size=32, intermediate_size=64,
                            moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=8, num_experts=4,
                            num_experts_per_tok=2, mlp_only_layers=[0], pad_token_id=0)
    torch.manual_seed(0)
    # What the form and the job's events say: those linears have no dropout.
    described = resolve_lora_targets(Qwen3MoeForCausalLM(config), lora_spec().lora).as_json()
    assert described["linear_modules_without_dropout"] == [
        f"model.layers.*.mlp.{name}_proj" for name in ("gate", "up", "down")]
    assert "model.layers.*.mlp.gate_proj" not in described["linear_modules"]
    model = apply_method(Qwen3MoeForCausalLM(config), lora_spec())
    assert {"model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.experts.gate_up_proj"} \
        <= adapted_names(model)
    learns(model)
    model.save_pretrained(tmp_path)
    reloaded = PeftModel.from_pretrained(Qwen3MoeForCausalLM(config), tmp_path)
    assert adapted_names(reloaded) == adapted_names(model)


def test_preview_on_the_meta_device_counts_what_the_trainer_trains(tmp_path, builtin_tokenizer):
    from trainer.model.target_preview import preview_targets

    folder = write_family_model("qwen2_moe", tmp_path / "qwen2-moe", builtin_tokenizer)
    spec = JobSpec(model=str(folder), max_steps=1, backend="fsdp", lora={"r": 4})
    preview = preview_targets(spec)

    from trainer.model.model_source import load_base_model

    trained = apply_method(load_base_model(str(folder)), spec)
    assert preview["trainable_parameters"] == trainable_parameter_count(trained)
    assert preview["decoder_layers"] == {"class": "Qwen2MoeDecoderLayer", "count": 2}
    assert preview["expert_parameters"] == ["model.layers.*.mlp.experts.gate_up_proj",
                                            "model.layers.*.mlp.experts.down_proj"]
    assert preview["router"] == "frozen"


def test_a_model_the_trainer_cannot_adapt_is_refused_before_launch(tmp_path, builtin_tokenizer):
    """The worker's input check (before any GPU is taken) names the family and the field."""
    from worker.input_check import find_input_problems

    folder = write_family_model("mixtral", tmp_path / "mixtral", builtin_tokenizer)
    assert find_input_problems(JobSpec(model=str(folder), max_steps=1)) == []
    (problem,) = find_input_problems(JobSpec(model=str(folder), max_steps=1,
                                             lora={"target_modules": ["mlp"]}))
    assert problem.startswith(f"model {folder} (mixtral): lora.target_modules: mlp matches no")


def test_fsdp_finds_decoder_layers_without_no_split_modules():
    from trainer.backends.fsdp_sharding import decoder_layers

    model = build_family_model("gpt_neox")
    model._no_split_modules = None
    assert decoder_layers(model) == list(model.gpt_neox.layers)
    model._no_split_modules = ["GPTNeoXLayer", "GPTNeoXMLP"]  # a block inside a block
    assert decoder_layers(model) == list(model.gpt_neox.layers)


def test_a_model_with_twenty_or_more_targets_is_adapted_as_resolved():
    """From 20 target names on, peft rewrites its config's target_modules into suffixes:
    the check against the resolved names must still hold (real models have 32+ layers)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    common = dict(vocab_size=384, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, pad_token_id=0)
    llama = apply_method(LlamaForCausalLM(LlamaConfig(**common)), lora_spec())
    assert len(llama.base_model.targeted_module_names) == 6 * 7
    moe = apply_method(Qwen3MoeForCausalLM(Qwen3MoeConfig(
        **common, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
        mlp_only_layers=[0])), lora_spec())
    assert "model.layers.5.mlp.experts.gate_up_proj" in moe.base_model.targeted_parameter_names
    assert "model.layers.0.mlp.gate_proj.weight" in moe.base_model.targeted_parameter_names
