"""Objective grpo in the memory planner (tunedeck/planner/sampling_memory.py): a round's
sampling (the KV cache of micro_batch_size × grad_accum rows at seq_len, the prefill, the
new token's logits; FSDP's gathered root) counted where it exceeds the training step's
activations, the logits of the completion only, and the plan saying which sets the peak and
what shrinks it. The KV cache is held against what a real generation's cache holds."""
import pytest
import torch

from tunedeck.planner.activation_memory import logits_bytes
from tunedeck.planner.advice import plan_memory
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import plan_strategies
from tunedeck.planner.sampling_memory import kv_cache_bytes, sampling_bytes
from tunedeck.planner.shape_source import known_shape, resolve_model_shape
from tunedeck.spec.job_spec import JobSpec

MODEL = "meta-llama/Llama-3.1-8B"


def job(**fields) -> JobSpec:
    return JobSpec.model_validate({"max_steps": 1, "model": MODEL, "objective": "grpo",
                                   "dataset": "builtin:arithmetic-rl", "seq_len": 1024,
                                   "micro_batch_size": 8, **fields})


def test_the_kv_cache_is_every_layers_keys_and_values_for_the_whole_round():
    shape = known_shape(MODEL)  # 32 layers, 8 KV heads of 128
    spec = job(grad_accum=4)
    assert kv_cache_bytes(spec, shape) == 32 * 1024 * 32 * 2 * 8 * 128 * 2  # rows x tokens
    # Twice the rows a step, twice the cache; the split into micro-batches does not matter.
    assert kv_cache_bytes(job(micro_batch_size=16, grad_accum=4), shape) == \
        2 * kv_cache_bytes(spec, shape)
    assert kv_cache_bytes(job(micro_batch_size=32, grad_accum=1), shape) == \
        kv_cache_bytes(spec, shape)


def test_sampling_is_counted_where_it_exceeds_the_steps_activations():
    shape = known_shape(MODEL)
    gpus = GpuSet(8, 80)
    small_step = job(grad_accum=8, zero2={"activation_checkpointing": True})
    plans = plan_strategies(small_step, gpus, shape)
    sft = plan_strategies(JobSpec.model_validate({**small_step.model_dump(), "objective": "sft",
                                                  "dataset": "builtin:arithmetic"}), gpus, shape)
    sampling = sampling_bytes(small_step, shape, sharded=False)
    zero2 = plans["zero2"].breakdown
    assert sampling > zero2.activations
    assert zero2.other - sft["zero2"].breakdown.other == pytest.approx(
        sampling - zero2.activations)
    # FSDP also gathers its root (embeddings and head) for the call.
    assert sampling_bytes(small_step, shape, sharded=True) - sampling == \
        2 * shape.vocab_size * shape.hidden_size * 2
    note = next(note for note in plans["zero2"].notes if note.startswith("objective grpo"))
    assert "a round samples 64 completions at once" in note and "sampling sets the peak" in note
    assert "grpo.max_completion_length" in note


def test_the_loss_keeps_the_completions_logits_only():
    shape = known_shape(MODEL)
    spec = job(grpo={"max_completion_length": 255})
    assert logits_bytes(spec, shape) == 8 * 256 * shape.vocab_size * 3 * 4
    assert sampling_bytes(JobSpec(max_steps=1), shape, sharded=False) == 0.0


def test_a_real_generations_cache_is_the_planned_kv_cache(tmp_path):
    from transformers import AutoModelForCausalLM

    from trainer.model.builtin_model import ensure_builtin_model

    builtin_model_dir = ensure_builtin_model(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(builtin_model_dir, dtype=torch.bfloat16)
    spec = JobSpec.model_validate({"model": str(builtin_model_dir), "max_steps": 1,
                                   "objective": "grpo", "dataset": "builtin:arithmetic-rl",
                                   "seq_len": 48, "micro_batch_size": 4,
                                   "grpo": {"num_generations": 4, "max_completion_length": 16}})
    ids = torch.randint(3, 300, (4, spec.seq_len - 16))
    output = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                            max_new_tokens=16, min_new_tokens=16, return_dict_in_generate=True,
                            pad_token_id=0)
    cache = output.past_key_values
    held = sum(tensor.numel() * tensor.element_size() for layer in cache.layers
               for tensor in (layer.keys, layer.values))
    # The cache holds every token but the last one generated.
    planned = kv_cache_bytes(spec, resolve_model_shape(str(builtin_model_dir)))
    assert held == planned * (spec.seq_len - 1) / spec.seq_len


def test_a_grpo_plan_fits_an_8b_lora_on_one_h100_with_checkpointing():
    spec = job(num_gpus=1, grad_accum=2, zero2={"activation_checkpointing": True})
    result = plan_memory(spec, GpuSet(1, 80), known_shape(MODEL))
    assert result.verdicts["zero2"] == "fits"
