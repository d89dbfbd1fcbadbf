"""DeepSpeed ZeRO-2: every rank keeps the full weights; optimizer state and gradients are
sharded. DeepSpeed owns precision (it casts the module to bf16/fp16 and keeps fp32 masters
in the optimizer), gradient accumulation and clipping, all from the run's deepspeed.json."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.method import trainable_parameters
from trainer.rank import RankContext


def default_torch_extensions_dir() -> str:
    # DeepSpeed JIT-compiles its ops (about 40-90 s cold); a shared cache outside the repo
    # makes every later run start in seconds.
    return str(Path.home() / ".cache" / "tunedeck" / "torch_extensions")


class Zero2Backend:
    def __init__(self, engine):
        self._engine = engine

    @classmethod
    def init_distributed(cls, context: RankContext) -> None:
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", default_torch_extensions_dir())
        import deepspeed
        import torch

        if context.uses_cuda:
            torch.cuda.set_device(context.device)
        deepspeed.init_distributed(dist_backend=context.communication_backend)

    @classmethod
    def wrap(cls, model, settings: dict[str, Any], context: RankContext) -> "Zero2Backend":
        import deepspeed

        engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=trainable_parameters(model), config=settings)
        return cls(engine)

    def set_learning_rate(self, learning_rate: float) -> None:
        for group in self._engine.optimizer.param_groups:
            group["lr"] = learning_rate

    def step(self, batch: dict[str, Any]):
        loss = self._engine(**batch).loss
        # DeepSpeed divides by gradient_accumulation_steps and reduces at the boundary;
        # engine.step() counts micro-batches and applies the optimizer only on the last.
        self._engine.backward(loss)
        self._engine.step()
        return loss.detach().float()

    def optimizer_step(self):
        import torch

        # The optimizer already ran inside the last step(); its norm is global and unclipped
        # (None only before any optimizer step, or after an fp16 overflow skipped one).
        grad_norm = self._engine.get_global_grad_norm()
        return torch.as_tensor(0.0 if grad_norm is None else grad_norm, dtype=torch.float32)

    def gather_trainable_state(self) -> dict[str, Any]:
        from deepspeed.utils import safe_get_full_fp32_param

        state = {}
        for name, parameter in self._engine.module.named_parameters():
            if parameter.requires_grad:
                # A collective on every rank: the fp32 master is partitioned across ranks.
                full = safe_get_full_fp32_param(parameter)
                if self._engine.global_rank == 0:
                    state[name] = full.detach().cpu().clone()
        return state
