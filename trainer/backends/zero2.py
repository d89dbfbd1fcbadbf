"""DeepSpeed ZeRO-2: every rank keeps the full weights; optimizer state and gradients are
sharded. DeepSpeed owns precision (it casts the module to bf16/fp16 and keeps fp32 masters
in the optimizer), gradient accumulation and clipping, all from the run's deepspeed.json."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tunedeck.backends.zero2 import zero2_reduce_bucket_elements
from tunedeck.torch_extensions import environment_extensions_dir

from trainer.footprint import Footprint, parameter_bytes, zero2_gradient_bytes, zero2_optimizer_bytes
from trainer.model.method import trainable_parameters
from trainer.rank import RankContext

# The sub-folder of a checkpoint that holds DeepSpeed's files.
DEEPSPEED_CHECKPOINT_TAG = "deepspeed"


# DeepSpeed's shared-memory all-reduce for CPU ranks (csrc/cpu/comm/shm.cpp).
SHARED_MEMORY_COLLECTIVES_OP = "deepspeed_shm_comm"

# A JIT build of a DeepSpeed op takes a few minutes at most; a lock older than this was left
# by a process killed mid-build (a cancelled job), and torch would wait on it forever.
STALE_BUILD_LOCK_SECONDS = 20 * 60


def extensions_dir() -> Path:
    """Where DeepSpeed JIT-compiles its ops (about 40-90 s cold) and finds them later: the
    launch's TORCH_EXTENSIONS_DIR (the worker sets it); a trainer launched by hand gets its
    Python environment's own folder, as the worker would give it."""
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(environment_extensions_dir()))
    return Path(os.environ["TORCH_EXTENSIONS_DIR"])


def remove_stale_build_locks(extensions_dir: Path, *, now: float | None = None) -> list[Path]:
    """Remove torch extension build locks older than STALE_BUILD_LOCK_SECONDS."""
    import time

    now = time.time() if now is None else now
    removed = []
    for lock in extensions_dir.glob("*/lock"):
        try:
            if now - lock.stat().st_mtime > STALE_BUILD_LOCK_SECONDS:
                lock.unlink()
                removed.append(lock)
        except FileNotFoundError:  # another rank removed it first
            continue
    return removed


def config_for_host(settings: dict[str, Any], context: RankContext, *,
                    trainable: int) -> dict[str, Any]:
    """The generated config, less what this host cannot do and what the model does not
    need. Pinned (page-locked) host memory only speeds copies between host and GPU, and
    pinning needs CUDA: on a CPU-only host the offloaded optimizer state stays in plain
    memory (the same rule as FSDP's CPU offload). DeepSpeed's CPU accelerator ignores the
    flag by default, but not with DS_PIN_MEMORY_BACKEND=native, and the run should not
    depend on that. The reduce bucket is no larger than the `trainable` parameters
    (tunedeck.backends.zero2.zero2_reduce_bucket_elements, which the planner counts too)."""
    zero_optimization = dict(settings.get("zero_optimization", {}))
    if "reduce_bucket_size" in zero_optimization:
        zero_optimization["reduce_bucket_size"] = zero2_reduce_bucket_elements(
            zero_optimization["reduce_bucket_size"], trainable)
    offload = zero_optimization.get("offload_optimizer")
    if offload and offload.get("pin_memory") and not context.uses_cuda:
        zero_optimization["offload_optimizer"] = {**offload, "pin_memory": False}
    return {**settings, "zero_optimization": zero_optimization}


def announce_bucket(settings: dict[str, Any], config: dict[str, Any]) -> None:
    """Say so in the job's log when DeepSpeed gets a smaller bucket than deepspeed.json's
    (the run folder's config is the spec's; this is what runs)."""
    configured = settings.get("zero_optimization", {}).get("reduce_bucket_size")
    used = config["zero_optimization"].get("reduce_bucket_size")
    if configured is not None and used != configured:
        print(f"DeepSpeed's reduce bucket: {used:,} elements, the trainable parameters' size "
              f"rounded up, not deepspeed.json's {configured:,} (DeepSpeed allocates a bucket "
              "whole)", flush=True)


def skip_shared_memory_collectives() -> None:
    """Keep DeepSpeed from JIT-compiling its shared-memory all-reduce as a CPU rank joins
    the process group (about two minutes cold on 2 cores, before step 1 of a fresh clone's
    first job). Only inference's tensor-parallel layers call it (inference_all_reduce);
    ZeRO-2's gradient reduce-scatter and all-gather go through torch.distributed (gloo)
    with or without it, so training is unchanged. `__compatible_ops__` is what DeepSpeed's
    comm/torch.py asks before it builds the op (DeepSpeed caches that probe in the module
    so that edits to it persist); an op marked there as incompatible is never built."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__[SHARED_MEMORY_COLLECTIVES_OP] = False


def ops_to_compile(settings: dict[str, Any], context: RankContext, extensions_dir: Path) -> list[str]:
    """The DeepSpeed ops this launch will JIT-compile: those it loads (CPU Adam with an
    offloaded optimizer; torch's own AdamW otherwise, and never the shared-memory
    collectives: skip_shared_memory_collectives) that are neither installed prebuilt nor
    built in `extensions_dir` yet."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops

    wanted = []
    if settings.get("zero_optimization", {}).get("offload_optimizer"):
        wanted.append("CPUAdamBuilder")
    missing = []
    for class_name in wanted:
        builder = get_accelerator().create_op_builder(class_name)
        if builder is None or installed_ops.get(builder.NAME, False):
            continue  # not on this accelerator, or installed prebuilt
        if any((extensions_dir / builder.name).glob("*.so")):
            continue  # built before
        # Only the builders wanted are probed (DeepSpeed's own __compatible_ops__ probes
        # every op, running compilers): an incompatible one is never built at all.
        if builder.is_compatible(verbose=False):
            missing.append(builder.NAME)
    return missing


class Zero2Backend:
    def __init__(self, engine, *, objective):
        self._engine = engine
        self._objective = objective  # trainer/objectives/: the loss of a micro-batch
        self._gradient_bytes: int | None = None  # measured once, at the first boundary

    @classmethod
    def startup_notice(cls, settings: dict[str, Any], context: RankContext) -> str | None:
        missing = ops_to_compile(settings, context, extensions_dir())
        if not missing:
            return None
        return (f"compiling DeepSpeed's ops ({', '.join(missing)}), first time in this Python "
                f"environment on this host: about a minute; later jobs reuse the build in "
                f"{extensions_dir()}")

    @classmethod
    def init_distributed(cls, context: RankContext) -> None:
        remove_stale_build_locks(extensions_dir())
        import deepspeed
        import torch

        if context.uses_cuda:
            torch.cuda.set_device(context.device)
        else:
            skip_shared_memory_collectives()
        deepspeed.init_distributed(dist_backend=context.communication_backend)

    @classmethod
    def wrap(cls, model, settings: dict[str, Any], context: RankContext, *,
             objective) -> "Zero2Backend":
        import deepspeed

        parameters = trainable_parameters(model)
        trainable = sum(parameter.numel() for parameter in parameters)
        config = config_for_host(settings, context, trainable=trainable)
        if context.is_main:
            announce_bucket(settings, config)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=parameters,
                                               config=config)
        return cls(engine, objective=objective)

    @classmethod
    def wrap_frozen(cls, model, settings: dict[str, Any], context: RankContext):
        """A frozen model (a DPO reference copy): ZeRO-2 shards no parameters, so each rank
        holds it whole, in the compute dtype DeepSpeed casts the trained model to."""
        import torch

        dtype = (torch.bfloat16 if settings.get("bf16", {}).get("enabled") else
                 torch.float16 if settings.get("fp16", {}).get("enabled") else torch.float32)
        model.requires_grad_(False)
        return model.to(device=context.device, dtype=dtype).eval()

    def set_learning_rate(self, learning_rate: float) -> None:
        for group in self._engine.optimizer.param_groups:
            group["lr"] = learning_rate

    def step(self, batch: dict[str, Any], *, loss_weight: float):
        objective, sums = self._objective.loss(self._engine, batch, loss_weight=loss_weight)
        # The weight already makes the step's sum its mean over answer tokens, so DeepSpeed
        # must not divide by gradient_accumulation_steps as well; it still averages over
        # ranks when it reduces at the boundary, and engine.step() counts micro-batches and
        # applies the optimizer only on the last.
        self._engine.backward(objective, scale_wrt_gas=False)
        if self._gradient_bytes is None and self._engine.is_gradient_accumulation_boundary():
            # The reduced gradient partition exists only from here to the optimizer step.
            self._gradient_bytes = zero2_gradient_bytes(self._engine.optimizer)
        self._engine.step()
        return sums

    def evaluate(self, batch: dict[str, Any]):
        """(summed loss, loss units) of one micro-batch: eval mode, no gradients, and
        nothing counted towards gradient accumulation."""
        return self.forward_only(lambda model: self._objective.score(model, batch))

    def forward_only(self, function):
        from trainer.evaluation import forward_only

        return forward_only(self._engine, function)

    def sample(self, function):
        # ZeRO-2 holds every weight whole on every rank: the engine's module generates as is.
        return self.forward_only(lambda engine: function(engine.module))

    def optimizer_step(self):
        import torch

        # The optimizer already ran inside the last step(); its norm is global and unclipped
        # (None only before any optimizer step, or after an fp16 overflow skipped one).
        grad_norm = self._engine.get_global_grad_norm()
        return torch.as_tensor(0.0 if grad_norm is None else grad_norm, dtype=torch.float32)

    def footprint(self) -> Footprint:
        """What this rank holds: the whole module in the compute dtype (frozen base too),
        the gradient partition, the fp32 master partition and its Adam state."""
        return Footprint(params_bytes=parameter_bytes(self._engine.module.parameters()),
                         grads_bytes=self._gradient_bytes or 0,
                         optimizer_bytes=zero2_optimizer_bytes(self._engine.optimizer))

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

    def save_checkpoint(self, path: Path) -> None:
        # DeepSpeed's own format, in `path/deepspeed/`: the module's trainable weights (a LoRA
        # checkpoint holds the adapter, not the frozen base) and each rank's ZeRO partition
        # of the fp32 masters and optimizer state. The `latest` file it writes lets the
        # zero_to_fp32.py it copies into `path` run without --tag.
        self._engine.save_checkpoint(str(path), tag=DEEPSPEED_CHECKPOINT_TAG,
                                     exclude_frozen_parameters=self._has_frozen_parameters())

    def load_checkpoint(self, path: Path) -> None:
        # Frozen weights were left out of the checkpoint: they come from the base model.
        loaded_path, _ = self._engine.load_checkpoint(
            str(path), tag=DEEPSPEED_CHECKPOINT_TAG,
            load_module_strict=not self._has_frozen_parameters())
        if loaded_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint in {path}")

    def _has_frozen_parameters(self) -> bool:
        return any(not parameter.requires_grad for parameter in self._engine.module.parameters())
