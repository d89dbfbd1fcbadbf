"""The activation planner against what autograd really keeps: tiny models of several real
architectures (transformers' own classes, random weights), one forward and backward of the
trainer's own objective on CPU, the peak of live tensor bytes against the planner's
activation figure for the same shape and spec. (The GPU's allocator adds its own caching on
top: tests/tunedeck/planner/test_measured_plans.py holds whole plans to GPU peaks.)"""
import pytest
import torch

from tests.tunedeck.planner.live_bytes import LiveBytes
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.activation_memory import activation_bytes
from tunedeck.planner.architectures import shape_from_config

# Sizes where no term is negligible: an MLP 2.7x the hidden width, a vocabulary 8x it.
SIZES = {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
         "head_dim": 64, "tie_word_embeddings": False}
FAMILIES = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
            "mistral": "MistralConfig", "gemma": "GemmaConfig"}
SEQ_LEN = 256
# CPU kernels are not CUDA's (the CPU attention keeps its output's layout differently):
# the count holds to a few percent, not to the byte.
TOLERANCE = 0.03


def family_model(family: str):
    import transformers

    config = getattr(transformers, FAMILIES[family])(**SIZES)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config), config


def measured_peak(model, spec: JobSpec) -> int:
    from trainer.model.method import apply_method, set_training_mode
    from trainer.token_loss import micro_batch_objective

    model = apply_method(model, spec).to(torch.bfloat16)  # both backends compute in bf16
    set_training_mode(model, spec)
    ids = torch.randint(0, SIZES["vocab_size"], (spec.micro_batch_size, spec.seq_len))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    # Each weight's gradient leaves as soon as it is made, as both backends take it into
    # their own buckets and shards: the planner counts those as the plan's "grads".
    for parameter in model.parameters():
        if parameter.requires_grad:
            parameter.register_post_accumulate_grad_hook(lambda weight: setattr(weight, "grad", None))
    counter = LiveBytes(existing=[*model.parameters(), *model.buffers()])
    with counter:
        objective, _loss = micro_batch_objective(model, batch, loss_weight=1.0)
        objective.backward()
    return counter.peak


# Checkpointing keeps each layer's input whatever the family: two families show it.
CASES = [(family, method, False) for family in sorted(FAMILIES) for method in ("lora", "full")] \
    + [(family, method, True) for family in ("llama", "qwen3") for method in ("lora", "full")]


@pytest.mark.parametrize("family, method, checkpointing", CASES,
                         ids=[f"{f}-{m}-{'ckpt' if c else 'no-ckpt'}" for f, m, c in CASES])
def test_the_planned_activations_are_what_autograd_keeps(family, method, checkpointing):
    # One row (no padding, so no mask, as the plan assumes for one row); LoRA's dropout
    # off: CPU's dropout keeps a bf16 mask where CUDA's keeps a boolean one.
    spec = JobSpec(max_steps=1, method=method, micro_batch_size=1, seq_len=SEQ_LEN,
                   precision="bf16", kernels="none", lora={"dropout": 0.0},
                   zero2={"activation_checkpointing": checkpointing})
    model, config = family_model(family)
    shape = shape_from_config(family, config.to_dict())
    planned = activation_bytes(spec, shape)
    assert measured_peak(model, spec) / planned == pytest.approx(1.0, abs=TOLERANCE)
