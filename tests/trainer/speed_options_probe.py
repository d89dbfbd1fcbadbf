"""The fused optimizer as each backend builds it: run by torchrun (2 CPU ranks) from
test_speed_options.py. Each case wraps the built-in model with the trainer's backend from
the generated config and takes two steps; rank 0 writes whether the optimizer that steps
is torch's fused AdamW, and whether the weights stayed finite. (fp16 under FSDP2 with the
fused optimizer is refused by the spec: `fused_fp16_fails` shows why, on these ranks.)"""
import json
import sys

import torch

from tunedeck.launch_config import backend_config
from tunedeck.spec.job_spec import JobSpec

from trainer.backends import backend_class
from trainer.token_loss import IGNORE_INDEX
from trainer.data.datasets import TokenizedExample, collate
from trainer.model.method import apply_method, set_training_mode
from trainer.objectives import build_objective
from trainer.model.model_source import load_base_model
from trainer.rank import rank_context_from_environment, seed_everything
from trainer.token_loss import loss_token_count

CASES = {
    "fsdp_fused": {"backend": "fsdp", "fused_optimizer": True},
    "fsdp_plain": {"backend": "fsdp"},
    "zero2_fused": {"backend": "zero2", "fused_optimizer": True, "precision": "fp32"},
    "zero2_plain": {"backend": "zero2", "precision": "fp32"},
}


def stepping_optimizer(backend) -> torch.optim.Optimizer:
    if hasattr(backend, "_engine"):
        # DeepSpeed's ZeRO optimizer wraps the torch optimizer that steps its partitions.
        return backend._engine.optimizer.optimizer
    return backend._optimizer


def run_case(name: str, fields: dict, model_dir: str, context) -> dict:
    spec = JobSpec(max_steps=2, num_gpus=2, method="full", **fields)
    seed_everything(0)
    model = apply_method(load_base_model(model_dir), spec)
    set_training_mode(model, spec)
    backend_type = backend_class(spec.backend)
    backend = backend_type.wrap(model, backend_config(spec), context,
                                objective=build_objective(spec, model))
    rows = [TokenizedExample(input_ids=list(range(5, 5 + length)),
                             labels=[IGNORE_INDEX] + list(range(6, 5 + length)))
            for length in (6, 9)]
    batch = collate(rows, pad_token_id=0)
    for _ in range(2):
        backend.step(batch, loss_weight=2 / loss_token_count(batch["labels"]))
        backend.optimizer_step()
    optimizer = stepping_optimizer(backend)
    finite = all(bool(torch.isfinite(parameter.detach().float().to_local()
                                     if hasattr(parameter, "to_local") else
                                     parameter.detach().float()).all())
                 for parameter in model.parameters())
    return {"optimizer": type(optimizer).__name__, "fused": bool(optimizer.defaults.get("fused")),
            "finite": finite}


def fused_fp16_fails(model_dir: str, context) -> str | None:
    """The error a fused AdamW meets under FSDP2's sharded grad scaler (fp16), or None. The
    spec refuses the pair, so the backend is driven here with the settings it would get."""
    from tunedeck.backends.fsdp import fsdp_settings

    spec = JobSpec(max_steps=2, num_gpus=2, method="full", backend="fsdp", precision="fp16")
    settings = fsdp_settings(spec)
    settings["optimizer"]["fused"] = True
    seed_everything(0)
    model = apply_method(load_base_model(model_dir), spec)
    set_training_mode(model, spec)
    backend = backend_class("fsdp").wrap(model, settings, context,
                                        objective=build_objective(spec, model))
    rows = [TokenizedExample(input_ids=list(range(5, 11)), labels=[IGNORE_INDEX, *range(6, 11)])]
    batch = collate(rows, pad_token_id=0)
    try:
        backend.step(batch, loss_weight=2 / loss_token_count(batch["labels"]))
        backend.optimizer_step()
    except RuntimeError as error:
        return str(error)
    return None


def main(model_dir: str, report_file: str) -> None:
    """One backend a launch (TUNEDECK_PROBE_BACKEND): a process group is joined once."""
    import os

    backend_name = os.environ["TUNEDECK_PROBE_BACKEND"]
    context = rank_context_from_environment()
    backend_class(backend_name).init_distributed(context)
    report = {name: run_case(name, fields, model_dir, context)
              for name, fields in CASES.items() if fields["backend"] == backend_name}
    if backend_name == "fsdp":
        # Last: a failed step leaves the ranks' FSDP state behind it.
        report["fused_fp16_error"] = fused_fp16_fails(model_dir, context)
    if context.is_main:
        with open(report_file, "w", encoding="utf-8") as file:
            json.dump(report, file)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
