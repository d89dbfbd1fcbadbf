"""What each backend does to QLoRA's 4-bit weights: run by torchrun (2 CPU ranks) from
test_qlora_backends.py, with the trainer's own loading, QLoRA preparation and wrapping.

ZeRO-2: the trainer's Zero2Backend (bf16) wraps a QLoRA model; the 4-bit weights must come
through whole (same bytes, same quantization state, same dequantized values).
FSDP2: each rank builds the same QLoRA model twice, shards one copy with `fully_shard`
and keeps the other whole, feeds both the same batch, and compares.
Rank 0 writes what it saw to the JSON file named on the command line.
"""
import json
import sys

import torch
import torch.distributed as dist

from tunedeck.training_plan import quantization_config
from tunedeck.backends.fsdp import fsdp_settings
from tunedeck.backends.zero2 import zero2_config
from tunedeck.spec.job_spec import JobSpec

from trainer.backends.fsdp_sharding import shard_model
from trainer.backends.zero2 import Zero2Backend
from trainer.model.method import apply_method
from trainer.objectives import build_objective
from trainer.model.model_source import load_base_model
from trainer.rank import rank_context_from_environment, seed_everything

TRAIN_STEPS = 3
QLORA = JobSpec(method="qlora", backend="zero2", precision="fp32", max_steps=1, num_gpus=2,
                lora={"dropout": 0.0})
FSDP = JobSpec(method="lora", backend="fsdp", precision="fp32", max_steps=1)


def qlora_model(source: str, context, *, bitsandbytes_repacking: bool):
    seed_everything(QLORA.seed)  # the same LoRA initialisation for both copies
    model = apply_method(load_base_model(source, quantization=quantization_config(QLORA),
                                         device=context.device), QLORA)
    if bitsandbytes_repacking:  # bitsandbytes' default, which the trainer turns off
        for module in model.modules():
            if hasattr(module, "support_avx512bf16_for_cpu"):
                module.support_avx512bf16_for_cpu = True
    return model


def first_4bit_weight(model):
    return model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight


def max_difference(whole, sharded) -> float:
    return (whole.detach().float() - sharded.detach().float()).abs().max().item()


def compare(source: str, context, *, bitsandbytes_repacking: bool) -> dict:
    whole = qlora_model(source, context, bitsandbytes_repacking=bitsandbytes_repacking)
    sharded = qlora_model(source, context, bitsandbytes_repacking=bitsandbytes_repacking)
    before = first_4bit_weight(sharded)
    shard_model(sharded, fsdp_settings(FSDP), context)
    after = first_4bit_weight(sharded)
    report = {"before": {"type": type(before).__name__, "dtype": str(before.dtype),
                         "has_quant_state": getattr(before, "quant_state", None) is not None},
              "after": {"type": type(after).__name__, "dtype": str(after.dtype),
                        "has_quant_state": getattr(after, "quant_state", None) is not None}}
    input_ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    optimizers = [torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
                  for model in (whole, sharded)]
    report["train_loss_differences"] = []
    for _ in range(TRAIN_STEPS):
        losses = []
        for model, optimizer in zip((whole, sharded), optimizers):
            model.train()
            loss = model(input_ids=input_ids, labels=input_ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss)
        report["train_loss_differences"].append(max_difference(*losses))
    report["eval_then_train_logit_differences"] = eval_then_train(whole, sharded, input_ids)
    return report


def eval_then_train(whole, sharded, input_ids) -> list[float]:
    """Two eval-mode forwards without gradients (what an evaluation does), then one in
    train mode: the largest logit difference of each."""
    differences = []
    for mode in ("eval", "eval", "train"):
        logits = []
        for model in (whole, sharded):
            model.train(mode == "train")
            with torch.no_grad():
                logits.append(model(input_ids=input_ids).logits)
        differences.append(max_difference(*logits))
    return differences


def zero2_wrap(source: str, context) -> dict:
    from bitsandbytes.functional import dequantize_4bit

    spec = QLORA.model_copy(update={"precision": "bf16"})
    model = apply_method(load_base_model(source, quantization=quantization_config(spec),
                                         device=context.device), spec)
    weight = first_4bit_weight(model)
    data, quant_state = weight.data.clone(), weight.quant_state
    dequantized = dequantize_4bit(data, quant_state)
    Zero2Backend.wrap(model, zero2_config(spec), context, objective=build_objective(spec, model))
    weight = first_4bit_weight(model)
    return {"type": type(weight).__name__, "dtype": str(weight.dtype),
            "same_bytes": torch.equal(weight.data, data),
            "same_quant_state": weight.quant_state is quant_state,
            "same_dequantized": torch.equal(dequantize_4bit(weight.data, weight.quant_state),
                                            dequantized),
            "norm_dtype": str(model.base_model.model.model.norm.weight.dtype)}


def main(source: str, report_file: str) -> None:
    context = rank_context_from_environment()
    Zero2Backend.init_distributed(context)  # joins the process group for both backends
    from bitsandbytes.nn import Linear4bit

    report = {"repacks_on_this_cpu": bool(Linear4bit(4, 4).support_avx512bf16_for_cpu),
              "zero2": zero2_wrap(source, context),
              "as_trained": compare(source, context, bitsandbytes_repacking=False),
              "bitsandbytes_default": compare(source, context, bitsandbytes_repacking=True)}
    if context.is_main:
        with open(report_file, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=2)
    # Leave together: a rank that tears gloo down while rank 0 still writes can abort.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
