"""The FSDP knobs as FSDP2 carries them out: run by torchrun (2 CPU ranks) from
test_fsdp_knobs.py. Each case wraps the built-in model with the trainer's FsdpBackend from
the generated settings, profiles one training step and records, per rank, which module's
hooks issued each all-gather, plus what the backend kept. Rank 0 writes the JSON report.
"""
import json
import sys

import torch
import torch.distributed as dist

from tunedeck.backends.fsdp import fsdp_settings
from tunedeck.spec.job_spec import JobSpec

from trainer.backends.fsdp import FsdpBackend
from trainer.model.method import apply_method
from trainer.objectives import build_objective
from trainer.model.model_source import load_base_model
from trainer.rank import rank_context_from_environment, seed_everything
from trainer.token_loss import loss_token_count

CASES = {
    "defaults": {"precision": "fp32"},
    "forward_prefetch_no_backward_prefetch": {
        "precision": "fp32", "fsdp": {"forward_prefetch": True, "backward_prefetch": False}},
    "fp16_bf16_buffers": {"precision": "fp16", "fsdp": {"buffer_dtype": "bf16"}},
}


def enclosing_hook(event) -> str | None:
    """The FSDP pre-forward/pre-backward/prefetch record an event ran inside, if any."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(("FSDP::pre_forward", "FSDP::pre_backward",
                                   "FSDP::forward_prefetch", "FSDP::backward_prefetch")):
            return parent.name
        parent = parent.cpu_parent
    return None


def profiled_step(backend, batch) -> list[list]:
    """[all-gather record, the hook record it ran in] for one forward and backward."""
    from torch.profiler import ProfilerActivity, profile

    # Every rank has the same batch: the weight the training loop would give its tokens.
    loss_weight = 1.0 / loss_token_count(batch["labels"])
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        backend.step(batch, loss_weight=loss_weight)
    return [[event.name, enclosing_hook(event)] for event in profiler.events()
            if event.name.startswith("FSDP::all_gather (")]


def run_case(source: str, context, spec_fields: dict) -> dict:
    spec = JobSpec(method="full", backend="fsdp", max_steps=1, **spec_fields)
    seed_everything(spec.seed)
    model = apply_method(load_base_model(source), spec)
    backend = FsdpBackend.wrap(model, fsdp_settings(spec), context,
                               objective=build_objective(spec, model))
    input_ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
             "labels": input_ids}
    all_gathers = profiled_step(backend, batch)
    grad_norm = backend.optimizer_step()
    return {
        "all_gathers": all_gathers,
        "scaler": type(backend._scaler).__name__ if backend._scaler is not None else None,
        "grad_norm_is_finite": bool(torch.isfinite(grad_norm)),
        "buffers": {name: str(buffer.dtype) for name, buffer in model.named_buffers()},
        "parameter_dtypes": sorted({str(parameter.dtype) for parameter in model.parameters()}),
        "gathered_names": len(backend.gather_trainable_state()),
    }


def main(source: str, report_file: str) -> None:
    context = rank_context_from_environment()
    FsdpBackend.init_distributed(context)
    report = {name: run_case(source, context, fields) for name, fields in CASES.items()}
    reports = [None] * context.world_size
    dist.all_gather_object(reports, report)
    if context.is_main:
        with open(report_file, "w", encoding="utf-8") as file:
            json.dump(reports, file, indent=2)
    # Leave together: a rank that tears gloo down while rank 0 still writes can abort.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
