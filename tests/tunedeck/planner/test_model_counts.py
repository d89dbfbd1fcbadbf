"""The planner's parameter counts: its formulas against transformers' own models (built on the
meta device) and peft's adapters on them, the bundled table against published sizes, and
exact counts from safetensors headers."""
import json

import pytest

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.architectures import KNOWN_MODEL_TYPES, shape_from_config
from tunedeck.planner.shape_source import KNOWN_SHAPES, known_shape, resolve_model_shape

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 100, "pad_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2}
MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
LATENT = {"kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 12,
          "n_routed_experts": 4, "n_shared_experts": 2, "n_group": 2, "topk_group": 1,
          "num_key_value_heads": 4, "first_k_dense_replace": 1}
# model_type -> its fields beyond SMALL: every family the formulas know, with its quirks
# (dense first layers, dense-only layers, shared experts, q/k norms, latent attention).
FAMILIES = {
    "llama": {"num_hidden_layers": 2},
    "mistral": {"num_hidden_layers": 2},
    "qwen2": {"num_hidden_layers": 2},
    "qwen3": {"num_hidden_layers": 2, "head_dim": 24},
    "gemma": {"num_hidden_layers": 2, "head_dim": 24},
    "gemma2": {"num_hidden_layers": 2, "head_dim": 24},
    "mixtral": {"num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_hidden_layers": 4, **MOE, "num_experts": 4, "decoder_sparse_step": 2,
                  "mlp_only_layers": [3], "shared_expert_intermediate_size": 80},
    "qwen3_moe": {"num_hidden_layers": 2, **MOE, "num_experts": 4, "head_dim": 24},
    "olmoe": {"num_hidden_layers": 2, "num_experts": 4, "num_experts_per_tok": 2,
              "intermediate_size": 32},
    "deepseek_v2": {"num_hidden_layers": 3, **MOE, **LATENT, "q_lora_rank": None},
    "deepseek_v3": {"num_hidden_layers": 3, **MOE, **LATENT, "q_lora_rank": 24},
}
LORA_SETTINGS = [{}, {"target_modules": ["q_proj", "v_proj"]}, {"experts": False},
                 {"train_router": True, "r": 4}, {"target_modules": ["down_proj"]}]


def test_every_known_model_type_has_a_family_here():
    assert set(FAMILIES) == set(KNOWN_MODEL_TYPES)


def meta_model(model_type: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **{**SMALL, **FAMILIES[model_type]})
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_formulas_count_every_parameter_of_transformers_own_model(model_type):
    model = meta_model(model_type)
    shape = shape_from_config(model_type, {**SMALL, **FAMILIES[model_type],
                                           "model_type": model_type})
    assert shape.formula_parameters == sum(p.numel() for p in model.parameters())
    matmul = sum(m.in_features * m.out_features for m in model.modules()
                 if isinstance(m, __import__("torch").nn.Linear))
    if not shape.moe_layers:  # every weight a token passes is a Linear (the head included)
        assert shape.active_matmul_parameters == matmul


@pytest.mark.parametrize("model_type", ["llama", "qwen3", "mixtral", "qwen2_moe", "olmoe",
                                        "deepseek_v3"])
@pytest.mark.parametrize("lora", LORA_SETTINGS, ids=lambda lora: ",".join(lora) or "default")
def test_lora_counts_are_what_peft_trains(model_type, lora):
    from trainer.model.lora_targets import resolve_lora_targets
    from trainer.model.method import apply_method

    spec = JobSpec(max_steps=1, method="lora", lora=lora)
    shape = shape_from_config(model_type, {**SMALL, **FAMILIES[model_type],
                                           "model_type": model_type})
    model = meta_model(model_type)
    try:
        resolve_lora_targets(model, spec.lora)
    except ValueError:  # e.g. down_proj with experts off on a model of experts only
        pytest.skip("the trainer refuses this combination before launch")
    adapted = apply_method(model, spec)
    trained = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    assert shape.lora_trainable(spec.lora) == trained


PUBLISHED_BILLIONS = {
    "meta-llama/Llama-2-7b-hf": 6.74, "meta-llama/Llama-2-13b-hf": 13.02,
    "meta-llama/Llama-2-70b-hf": 68.98, "meta-llama/Meta-Llama-3-8B": 8.03,
    "meta-llama/Meta-Llama-3-70B": 70.55, "meta-llama/Llama-3.2-1B": 1.24,
    "meta-llama/Llama-3.2-3B": 3.21, "mistralai/Mistral-7B-v0.1": 7.24,
    "google/gemma-2-9b": 9.24, "Qwen/Qwen2.5-0.5B": 0.494, "Qwen/Qwen2.5-1.5B": 1.544,
    "Qwen/Qwen2.5-3B": 3.09, "Qwen/Qwen2.5-7B": 7.62, "Qwen/Qwen2.5-14B": 14.77,
    "Qwen/Qwen2.5-32B": 32.76, "Qwen/Qwen2.5-72B": 72.71, "Qwen/Qwen3-8B": 8.19,
    "mistralai/Mixtral-8x7B-v0.1": 46.7, "mistralai/Mixtral-8x22B-v0.1": 140.6,
    "Qwen/Qwen1.5-MoE-A2.7B": 14.3, "Qwen/Qwen3-30B-A3B": 30.5,
    "allenai/OLMoE-1B-7B-0924": 6.92, "deepseek-ai/DeepSeek-V2-Lite": 15.7,
}


def test_the_bundled_models_have_their_published_sizes():
    assert {shape.name for shape in KNOWN_SHAPES.values()} == set(PUBLISHED_BILLIONS)
    for name, billions in PUBLISHED_BILLIONS.items():
        assert known_shape(name).total_parameters / 1e9 == pytest.approx(billions, rel=0.01), name
    assert known_shape("qwen/qwen2.5-7b-instruct") == known_shape("Qwen/Qwen2.5-7B")


def test_mixture_of_experts_models_count_every_expert_and_route_top_k():
    mixtral = known_shape("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert mixtral.total_parameters / 1e9 == pytest.approx(46.7, rel=0.005)
    assert mixtral.active_parameters / 1e9 == pytest.approx(12.9, rel=0.01)  # 2 of 8 experts
    qwen = known_shape("Qwen/Qwen1.5-MoE-A2.7B")
    assert qwen.total_parameters / 1e9 == pytest.approx(14.3, rel=0.005)
    assert qwen.active_parameters / 1e9 == pytest.approx(2.7, rel=0.01)


def write_weights(folder, model_type="llama", **extra):
    """A model folder whose safetensors shards hold every tensor of a tiny model."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **{**SMALL, **FAMILIES[model_type], **extra})
    model = AutoModelForCausalLM.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    tensors = {name: tensor.to(torch.bfloat16) if "norm" not in name else tensor
               for name, tensor in model.state_dict().items()}
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    for file, members in shards.items():
        save_file({name: tensors[name].contiguous() for name in members}, str(folder / file))
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {name: file for file, members in shards.items() for name in members}}))
    return model


def test_a_folder_with_weights_is_counted_exactly_per_dtype(tmp_path):
    model = write_weights(tmp_path / "model")
    shape = resolve_model_shape(str(tmp_path / "model"))
    assert shape.total_parameters == sum(p.numel() for p in model.parameters())
    assert shape.counted_from == "safetensors headers (2 files)"
    by_dtype = dict(shape.parameters_by_dtype)
    assert set(by_dtype) == {"BF16", "F32"} and by_dtype["F32"] < by_dtype["BF16"]
    # The same weights again in one file beside the shards: only the index's files count.
    import shutil

    shutil.copy(tmp_path / "model" / "model-00001-of-00002.safetensors",
                tmp_path / "model" / "consolidated.safetensors")
    assert resolve_model_shape(str(tmp_path / "model")).total_parameters == shape.total_parameters
    # A pre-quantized checkpoint's headers count packed storage: the formulas count it.
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    quantized = tmp_path / "quantized"
    shutil.copytree(tmp_path / "model", quantized)
    (quantized / "config.json").write_text(json.dumps({**config, "quantization_config": {
        "quant_method": "gptq", "bits": 4}}))
    assert resolve_model_shape(str(quantized)).counted_from == "config formulas"
    # A cache holding some shards only would undercount: the formulas count instead.
    (tmp_path / "model" / "model-00002-of-00002.safetensors").unlink()
    partial = resolve_model_shape(str(tmp_path / "model"))
    assert partial.counted_from == "config formulas"
    assert partial.total_parameters == shape.total_parameters


def test_an_unknown_architecture_is_never_guessed(tmp_path):
    folder = tmp_path / "strange"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**SMALL, "model_type": "strange_lm",
                                                    "num_hidden_layers": 2}))
    with pytest.raises(ValueError, match=r"cannot count model_type 'strange_lm'.*safetensors"):
        resolve_model_shape(str(folder))
    weighted = tmp_path / "weighted"
    model = write_weights(weighted)
    config = json.loads((weighted / "config.json").read_text())
    (weighted / "config.json").write_text(json.dumps({**config, "model_type": "strange_lm"}))
    shape = resolve_model_shape(str(weighted))
    assert shape.total_parameters == sum(p.numel() for p in model.parameters())
    assert "safetensors headers" in shape.counted_from and "activations" in shape.counted_from


def test_shapes_come_from_the_hub_cache_with_its_weights(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "abc"
    model = write_weights(snapshot, "qwen2_moe")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    shape = resolve_model_shape("someone/tiny")
    assert shape.moe_layers == 1 and shape.experts.count == 4
    assert shape.total_parameters == sum(p.numel() for p in model.parameters())
    with pytest.raises(ValueError, match="model nobody/unknown: no config.json found"):
        resolve_model_shape("nobody/unknown")
    with pytest.raises(ValueError, match="lacks num_hidden_layers"):
        shape_from_config("odd", {"model_type": "llama", "vocab_size": 1, "hidden_size": 1,
                                  "num_attention_heads": 1})


def test_qlora_trains_the_routers_it_is_told_to_and_dropout_keeps_a_copy_per_adapter():
    from tunedeck.planner.activation_memory import layer_activation_bytes
    from tunedeck.planner.memory_plan import model_states

    mixtral = known_shape("mistralai/Mixtral-8x7B-v0.1")
    qlora = JobSpec(max_steps=1, method="qlora", lora={"train_router": True})
    assert model_states(qlora, mixtral).trainable == mixtral.lora_trainable(qlora.lora)
    deepseek = known_shape("deepseek-ai/DeepSeek-V2-Lite")
    dropped, kept = (JobSpec(max_steps=1, lora={"dropout": d}) for d in (0.1, 0.0))
    extra = (layer_activation_bytes(dropped, deepseek, sparse=True)
             - layer_activation_bytes(kept, deepseek, sparse=True))
    inputs = sum(n_in for n_in, _out, _layers in deepseek.adapted_linears(dropped.lora, sparse=True))
    # With dropout every adapted linear keeps its own dropped copy and a boolean mask (2 + 1
    # bytes an element); without, the inputs they share are kept once: the hidden state q
    # and the kv latent's projection read, the kv latent kv_b_proj reads (kv_lora_rank
    # 512), the hidden state the shared experts read, and their SwiGLU product (2 x 1408).
    # o_proj reads the attention's own output.
    shared = 2048 + 512 + 2048 + 2 * 1408
    assert extra == dropped.micro_batch_size * dropped.seq_len * (3 * inputs - 2 * shared)


def test_more_dense_first_layers_than_layers_is_no_negative_count():
    config = {**SMALL, **FAMILIES["deepseek_v3"], "model_type": "deepseek_v3",
              "num_hidden_layers": 1, "first_k_dense_replace": 3}
    shape = shape_from_config("odd", config)
    assert shape.moe_layers == 0 and shape.formula_parameters > 0
    with pytest.raises(ValueError, match="num_hidden_layers must be whole numbers of at least 1"):
        shape_from_config("empty", {**config, "num_hidden_layers": 0})
