"""DeepSpeed ZeRO-2: the optimizer state and gradients sharded over the ranks, the weights
whole on each. Its config is DeepSpeed's JSON."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunedeck.backends.base import (ADAM_BETAS, ADAM_EPSILON, ADAM_STATE_BYTES, Backend,
                                    ModelStates, RankStates, adam_step_bytes)
from tunedeck.training_steps import BatchLayout
from tunedeck.units import FP32_BYTES, compute_bytes

if TYPE_CHECKING:
    from tunedeck.spec.job_spec import JobSpec
    from tunedeck.planner.model_shapes import ModelShape

# A reduce bucket is sized in whole MiB of elements.
BUCKET_ROUNDING_ELEMENTS = 2**20
DEEPSPEED_CPU_ADAM_PARAMETERS_PER_S = 1e9  # per rank, with its share of the host's cores
# DeepSpeed's advice for small cards: 2e8-element buckets cost 3.6 GB with overlap_comm.
SMALL_BUCKET_ELEMENTS = 200_000_000


def zero2_reduce_bucket_elements(configured: int, trainable: int) -> int:
    """The gradient reduce bucket DeepSpeed gets: the spec's, but never more than the
    trainable parameters (rounded up). DeepSpeed allocates its buckets whole (two with
    overlap_comm) however few parameters train: a LoRA adapter of 20M parameters under the
    default 5e8-element buckets would leave about 2 GB of a GPU unused."""
    needed = -(-max(trainable, 1) // BUCKET_ROUNDING_ELEMENTS) * BUCKET_ROUNDING_ELEMENTS
    return min(configured, needed)


def zero2_bucket_bytes(spec: JobSpec, trainable: int) -> float:
    """DeepSpeed's gradient reduce buckets in the compute dtype, each allocated whole: two
    with overlap_comm (one fills while the other is reduced), else one, of the size the
    trainer gives DeepSpeed (no larger than the trainable parameters). Its parameter
    all-gather writes into the weights in place and needs none."""
    buckets = 2 if spec.zero2.overlap_comm else 1
    elements = zero2_reduce_bucket_elements(spec.zero2.reduce_bucket_size, trainable)
    return buckets * compute_bytes(spec.precision) * elements


def zero2_config(spec: JobSpec) -> dict[str, Any]:
    """The DeepSpeed JSON for a ZeRO-2 run of this spec."""
    zero_optimization: dict[str, Any] = {
        "stage": 2,
        "overlap_comm": spec.zero2.overlap_comm,
        "contiguous_gradients": spec.zero2.contiguous_gradients,
        "reduce_scatter": True,
        "reduce_bucket_size": spec.zero2.reduce_bucket_size,
        "allgather_bucket_size": spec.zero2.allgather_bucket_size,
    }
    if spec.zero2.offload_optimizer:
        zero_optimization["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": spec.micro_batch_size,
        "gradient_accumulation_steps": spec.grad_accum,
        # DeepSpeed checks it is micro-batch x accumulation x world size: the layout's.
        "train_batch_size": BatchLayout.of(spec).units_per_step,
        # 0 turns DeepSpeed's clipping off, as it does the spec's.
        "gradient_clipping": spec.max_grad_norm,
        "zero_optimization": zero_optimization,
        **_deepspeed_precision(spec.precision),
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": spec.learning_rate,
                "betas": list(ADAM_BETAS),
                "eps": ADAM_EPSILON,
                "weight_decay": spec.weight_decay,
                # With offload DeepSpeed must step its own CPU Adam; otherwise torch's
                # AdamW runs on any accelerator without compiling FusedAdam first.
                "torch_adam": not spec.zero2.offload_optimizer,
                # DeepSpeed hands the keys it does not know to torch's AdamW: fused=True is
                # its one-kernel step, as DeepSpeed's FusedAdam is, with no op to compile
                # (FusedAdam JIT-builds with nvcc, which a pip-installed torch lacks).
                # Offloaded, DeepSpeed steps its own CPU Adam, which takes no such key.
                **({"fused": True} if spec.fused_optimizer and not spec.zero2.offload_optimizer
                   else {}),
            },
        },
        # The trainer sets the learning rate each step from one schedule for both backends.
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }


def _deepspeed_precision(precision: str) -> dict[str, Any]:
    if precision == "bf16":
        return {"bf16": {"enabled": True}}
    if precision == "fp16":
        # loss_scale 0 selects dynamic loss scaling.
        return {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}}
    return {}


class Zero2(Backend):
    name = "zero2"
    title = "DeepSpeed ZeRO-2"
    config_title = "DeepSpeed ZeRO-2 config"
    config_file = "deepspeed.json"
    checkpoint_format = "deepspeed"
    offload_field = "zero2.offload_optimizer"
    offload_words = "optimizer offload"
    offloaded_state_words = "optimizer"
    offloaded_words = "optimizer step"
    collective_words = "gradient reduction"
    reference_words = "keeps it whole on every rank, as it keeps the weights"
    engine = "trainer.backends.zero2:Zero2Backend"

    def config(self, spec: JobSpec) -> dict[str, Any]:
        return zero2_config(spec)

    def state_bytes_per_rank(self, spec: JobSpec, states: ModelStates, shape: ModelShape,
                             ranks: int, *, offloaded: bool) -> RankStates:
        """The ZeRO paper's 2P + 14P/N: the weights whole on every rank (DeepSpeed casts the
        module to the compute dtype), the gradients partitioned (cT/N), the optimizer
        partitioned (12T/N: DeepSpeed keeps its own fp32 partition even in fp32).
        DeepSpeed's estimator says 2P + 18P/N: its extra 4T/N is the fp32 gradient
        partition the optimizer step makes, counted with the step's other temporaries.
        Offloaded, the optimizer's partitions are in host memory and it steps there."""
        trainable = states.trainable
        buckets = zero2_bucket_bytes(spec, trainable)
        if offloaded:
            # fp32 master, momentum, variance and gradient partitions.
            return RankStates(states.weight_bytes_compute, 0.0, 0.0, buckets, step=None,
                              host=(2 * FP32_BYTES + ADAM_STATE_BYTES) * trainable / ranks)
        shard = trainable / ranks
        return RankStates(
            states.weight_bytes_compute, compute_bytes(spec.precision) * trainable / ranks,
            (FP32_BYTES + ADAM_STATE_BYTES) * trainable / ranks, buckets,
            # ZeRO-2 steps an fp32 copy of its compute-dtype gradient partition.
            step=FP32_BYTES * shard + adam_step_bytes(spec, shard))

    def reference_bytes_per_rank(self, spec: JobSpec, parameters: float, ranks: int, *,
                                 offloaded: bool) -> tuple[float, float]:
        """ZeRO-2 shards no parameters: a whole frozen copy in the compute dtype on every
        rank, whether or not the optimizer is offloaded (the copy has no optimizer)."""
        return compute_bytes(spec.precision) * parameters, 0.0

    def communication_bytes(self, spec: JobSpec, parameters: float,
                            trainable: float) -> tuple[float, float]:
        # A reduce-scatter of the gradients each micro-batch, an all-gather of the updated
        # weights each step.
        moved = compute_bytes(spec.precision) * trainable
        return moved, moved

    def offload_traffic(self, spec: JobSpec, parameters_shard: float,
                        trainable_shard: float) -> tuple[float, float]:
        # Each micro-batch's gradients down and the updated weights back up; DeepSpeed's CPU
        # Adam steps the fp32 state.
        copies = (spec.grad_accum + 1) * compute_bytes(spec.precision) * trainable_shard
        return copies, DEEPSPEED_CPU_ADAM_PARAMETERS_PER_S

    def cpu_precision_problem(self, precision: str | None) -> str | None:
        # DeepSpeed's engine refuses fp16 at startup ("Type fp16 is not supported on your
        # device") when its CPU accelerator reports no fp16.
        return "DeepSpeed's CPU accelerator has no fp16 support" if precision == "fp16" else None

    def smaller_buckets(self, spec: JobSpec) -> tuple[dict, str] | None:
        if max(spec.zero2.reduce_bucket_size,
               spec.zero2.allgather_bucket_size) <= SMALL_BUCKET_ELEMENTS:
            return None
        return ({"zero2.reduce_bucket_size": SMALL_BUCKET_ELEMENTS,
                 "zero2.allgather_bucket_size": SMALL_BUCKET_ELEMENTS},
                "DeepSpeed buckets of 2e8 elements")


ZERO2 = Zero2()
