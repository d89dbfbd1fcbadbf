"""PyTorch FSDP2 (`fully_shard`): parameters, gradients and optimizer state are all sharded.

How the model is sharded lives in fsdp_sharding. Master weights stay fp32 and the optimizer
steps on them; only the forward/backward compute runs in `param_dtype`. An fp16 compute
dtype scales the loss (dynamic loss scaling), so small gradients do not flush to zero.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from trainer.backends.fsdp_sharding import shard_model
from trainer.footprint import Footprint, gradient_bytes, optimizer_state_bytes, parameter_bytes
from trainer.model.method import trainable_parameters
from trainer.rank import RankContext


class FsdpBackend:
    def __init__(self, model, optimizer, *, objective, grad_accum: int, max_grad_norm: float,
                 scaler=None):
        self._model = model
        self._objective = objective  # trainer/objectives/: the loss of a micro-batch
        self._optimizer = optimizer
        self._grad_accum = grad_accum
        self._max_grad_norm = max_grad_norm
        # A ShardedGradScaler when the compute dtype is fp16, else None.
        self._scaler = scaler
        self._micro_step = 0
        self._gradient_bytes: int | None = None  # measured once, before the first update
        self._forwarded = False  # whether `sample` has run a forward through the root

    @classmethod
    def startup_notice(cls, settings: dict[str, Any], context: RankContext) -> None:
        return None  # nothing to build: FSDP is torch's own

    @classmethod
    def init_distributed(cls, context: RankContext) -> None:
        import torch
        import torch.distributed as dist

        if context.uses_cuda:
            torch.cuda.set_device(context.device)
        dist.init_process_group(backend=context.communication_backend)

    @classmethod
    def wrap(cls, model, settings: dict[str, Any], context: RankContext, *,
             objective) -> "FsdpBackend":
        import torch

        shard_model(model, settings, context)
        optimizer_settings = settings["optimizer"]
        optimizer = torch.optim.AdamW(
            trainable_parameters(model), lr=optimizer_settings["lr"],
            betas=tuple(optimizer_settings["betas"]), eps=optimizer_settings["eps"],
            weight_decay=optimizer_settings["weight_decay"],
            # One kernel over every shard (CUDA and CPU alike); a run folder written before
            # the setting existed has no key, and ran the default (foreach) then.
            fused=optimizer_settings.get("fused", False) or None,
        )
        return cls(model, optimizer, objective=objective,
                   grad_accum=settings["gradient_accumulation_steps"],
                   max_grad_norm=settings["gradient_clipping"],
                   scaler=loss_scaler(settings["loss_scaling"], context))

    @classmethod
    def wrap_frozen(cls, model, settings: dict[str, Any], context: RankContext):
        """A frozen model (a DPO reference copy), sharded as the trained one is: its weights
        kept in the compute dtype (nothing steps on them), each layer gathered for its
        forward and freed after."""
        import torch

        param_dtype = getattr(torch, settings["mixed_precision"]["param_dtype"])
        model.requires_grad_(False)
        for parameter in model.parameters():  # buffers: as shard_model casts the model's
            parameter.data = parameter.data.to(param_dtype)
        # Resharded after each forward whatever the strategy: with no backward, nothing
        # else would free a gathered layer (shard_grad_op leaves that to the backward).
        shard_model(model, {**settings, "compile": False, "reshard_after_forward": True},
                    context)
        return model.eval()

    def set_learning_rate(self, learning_rate: float) -> None:
        for group in self._optimizer.param_groups:
            group["lr"] = learning_rate

    def step(self, batch: dict[str, Any], *, loss_weight: float):
        self._micro_step += 1
        # Reduce-scatter gradients only after the last micro-batch of the step; FSDP
        # averages them over ranks there, which the weight counts on.
        self._model.set_requires_gradient_sync(self._micro_step % self._grad_accum == 0)
        objective, sums = self._objective.loss(self._model, batch, loss_weight=loss_weight)
        if self._scaler is not None:
            objective = self._scaler.scale(objective)
        objective.backward()
        return sums

    def evaluate(self, batch: dict[str, Any]):
        """(summed loss, loss units) of one micro-batch: eval mode, no gradients. FSDP
        gathers parameters in forward, so every rank must call it alike."""
        return self.forward_only(lambda model: self._objective.score(model, batch))

    def forward_only(self, function):
        from trainer.evaluation import forward_only

        return forward_only(self._model, function)

    def sample(self, function):
        """`generate` calls the causal LM inside a peft model directly, past the root's
        forward hook: the root's own parameters (embeddings, final norm, head) are gathered
        for the whole call and freed after; each decoder layer still gathers its own in its
        forward, so no second copy of the weights is held. The root's first forward must
        have run (it is what makes it the root): a one-token forward does that before a
        job's first sample, which comes before its first step."""
        import torch

        def whole(model):
            if not self._forwarded:
                model(input_ids=torch.zeros((1, 1), dtype=torch.long,
                                            device=next(model.parameters()).device))
                self._forwarded = True
            model.unshard()
            try:
                return function(model)
            finally:
                model.reshard()

        return self.forward_only(whole)

    def optimizer_step(self):
        import torch
        from torch.distributed.tensor import DTensor

        if self._scaler is not None:
            self._scaler.unscale_(self._optimizer)  # clip and measure true gradients
        # A max norm of 0 means no clipping; an infinite one still measures the norm.
        if self._gradient_bytes is None:
            self._gradient_bytes = gradient_bytes(trainable_parameters(self._model))
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(self._model),
                                                   self._max_grad_norm or math.inf)
        if self._scaler is not None:
            # Skips the update when any rank's gradients overflowed, then adjusts the scale.
            self._scaler.step(self._optimizer)
            self._scaler.update()
        else:
            self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        # Over sharded gradients the norm is a DTensor; full_tensor() sums the shards' parts.
        return grad_norm.full_tensor() if isinstance(grad_norm, DTensor) else grad_norm

    def footprint(self) -> Footprint:
        """What this rank holds: its shards of the fp32 weights (frozen base too), of the
        gradients and of Adam's state."""
        return Footprint(params_bytes=parameter_bytes(self._model.parameters()),
                         grads_bytes=self._gradient_bytes or 0,
                         optimizer_bytes=optimizer_state_bytes(self._optimizer))

    def gather_trainable_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # Every rank joins the all-gather; with cpu_offload only rank 0 keeps the result.
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        return get_model_state_dict(self._model, options=options)

    def save_checkpoint(self, path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        # Sharded: each rank writes only its own shards, nothing is gathered.
        dcp.save(self._checkpoint_state(), checkpoint_id=path)

    def load_checkpoint(self, path: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._checkpoint_state()
        dcp.load(state, checkpoint_id=path)  # in place, into this rank's shards
        set_state_dict(self._model, self._optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"], options=checkpoint_options())
        if "scaler" in state:
            self._scaler.load_state_dict(state["scaler"])

    def _checkpoint_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self._model, self._optimizer,
                                                      options=checkpoint_options())
        state = {"model": model_state, "optimizer": optimizer_state}
        if self._scaler is not None:
            state["scaler"] = self._scaler.state_dict()  # fp16: the loss scale goes on where it was
        return state


def checkpoint_options():
    """Trainable weights only: a LoRA checkpoint holds the adapter and its optimizer state,
    and the frozen base comes from the model source again (so loading is not strict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=False)


def loss_scaler(loss_scaling: str, context: RankContext):
    """fp16 overflows above 65504 and flushes gradients below ~6e-8 to zero, so its loss is
    scaled up before backward and the gradients unscaled before clipping. The sharded
    scaler checks each rank's gradient shards (DTensors under FSDP2) for inf/NaN and
    all-reduces the verdict, so every rank skips or takes the same step."""
    if loss_scaling == "none":
        return None
    if loss_scaling != "dynamic":
        raise ValueError(f"fsdp: loss_scaling {loss_scaling!r} unknown; expected dynamic or none")
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device=context.device.type)
