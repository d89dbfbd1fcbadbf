"""PyTorch FSDP2 (`fully_shard`): weights, gradients and optimizer state sharded over the
ranks, each decoder layer gathered when it runs. Its config is the settings the trainer
applies, as plain data."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunedeck.backends.base import (ADAM_BETAS, ADAM_EPSILON, ADAM_STATE_BYTES, TORCH_DTYPE_NAMES,
                                    Backend, ModelStates, RankStates, adam_step_bytes)
from tunedeck.units import FP32_BYTES, compute_bytes

TORCH_CPU_ADAM_PARAMETERS_PER_S = 0.25e9  # per rank, with its share of the host's cores

if TYPE_CHECKING:
    from tunedeck.spec.job_spec import JobSpec
    from tunedeck.planner.model_shapes import ModelShape


def fsdp_settings(spec: JobSpec) -> dict[str, Any]:
    """How the trainer applies FSDP2 `fully_shard`, as plain data the preview can show."""
    return {
        "api": "fully_shard (FSDP2)",
        "wrap": ["each decoder layer", "root module"],
        "sharding_strategy": spec.fsdp.sharding_strategy,
        # FSDP2 spells SHARD_GRAD_OP as keeping parameters gathered after forward.
        "reshard_after_forward": spec.fsdp.sharding_strategy != "shard_grad_op",
        "mixed_precision": {
            "param_dtype": TORCH_DTYPE_NAMES[spec.fsdp.param_dtype or spec.precision],
            "reduce_dtype": TORCH_DTYPE_NAMES[spec.fsdp.reduce_dtype],
            "buffer_dtype": TORCH_DTYPE_NAMES[spec.fsdp.buffer_dtype],
            # Always: a bf16-only run can fail to converge where DeepSpeed (fp32 masters)
            # converges.
            "master_weights_dtype": "float32",
        },
        # fp16 needs loss scaling: FSDP2's gradients are scaled by a sharded grad scaler.
        "loss_scaling": "dynamic" if (spec.fsdp.param_dtype or spec.precision) == "fp16" else "none",
        "backward_prefetch": spec.fsdp.backward_prefetch,
        "forward_prefetch": spec.fsdp.forward_prefetch,
        "compile": spec.fsdp.compile,
        "cpu_offload": spec.fsdp.cpu_offload,
        "activation_checkpointing": spec.fsdp.activation_checkpointing,
        "gradient_clipping": spec.max_grad_norm,
        "micro_batch_size": spec.micro_batch_size,
        "gradient_accumulation_steps": spec.grad_accum,
        "optimizer": {
            "type": "AdamW",
            "lr": spec.learning_rate,
            "betas": list(ADAM_BETAS),
            "eps": ADAM_EPSILON,
            "weight_decay": spec.weight_decay,
            # torch.optim.AdamW(fused=True): one kernel over FSDP2's per-parameter shards.
            "fused": spec.fused_optimizer,
        },
    }


def fsdp_gathered_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """Unsharded copies FSDP2 makes while computing, in the compute dtype: the root's
    embedding and head (kept gathered through the step), and the running layer plus the one
    prefetched; with shard_grad_op every layer stays gathered from forward to backward.
    The running layer's unsharded gradient waits for its reduce-scatter, in reduce_dtype."""
    compute = compute_bytes(spec.fsdp.param_dtype or spec.precision)
    reduce = compute_bytes(spec.fsdp.reduce_dtype)
    layer = shape.layer_parameters
    if spec.method != "full":
        layer += shape.lora_parameters(spec.lora) // shape.num_layers
    root = shape.embedding_parameters + shape.head_parameters + shape.hidden_size
    prefetched = 1 if (spec.fsdp.backward_prefetch or spec.fsdp.forward_prefetch) else 0
    layers_gathered = (shape.num_layers if spec.fsdp.sharding_strategy == "shard_grad_op"
                       else 1 + prefetched)
    gradient_in_flight = (compute + reduce) * layer if spec.method == "full" else 0
    return compute * (root + layers_gathered * layer) + gradient_in_flight


class Fsdp(Backend):
    name = "fsdp"
    title = "PyTorch FSDP"
    config_title = "FSDP settings"
    config_file = "fsdp.json"
    checkpoint_format = "torch.distributed.checkpoint"
    offload_field = "fsdp.cpu_offload"
    offload_words = "CPU offload"
    offloaded_state_words = "weights and optimizer"
    offloaded_words = "weights and optimizer"
    collective_words = "all-gathers"
    reference_words = "shards it over the ranks as it shards the weights"
    engine = "trainer.backends.fsdp:FsdpBackend"
    shards_decoder_layers = True

    def config(self, spec: JobSpec) -> dict[str, Any]:
        return fsdp_settings(spec)

    def state_bytes_per_rank(self, spec: JobSpec, states: ModelStates, shape: ModelShape,
                             ranks: int, *, offloaded: bool) -> RankStates:
        """What TuneDeck's FSDP2 trainer holds: the fp32 master weights sharded (4P/N; they
        are the parameters), fp32 gradients sharded (4T/N), Adam's state sharded (8T/N): the
        ZeRO paper's 16P/N for full sharding, plus the layers gathered in the compute dtype
        while they run. Offloaded, all that sharded state is in host memory, stepped there."""
        gathered = fsdp_gathered_bytes(spec, shape)
        if offloaded:
            return RankStates(0.0, 0.0, 0.0, gathered, step=None, host=(
                FP32_BYTES * states.parameters
                + (FP32_BYTES + ADAM_STATE_BYTES) * states.trainable) / ranks)
        return RankStates(
            FP32_BYTES * states.parameters / ranks, FP32_BYTES * states.trainable / ranks,
            ADAM_STATE_BYTES * states.trainable / ranks, gathered,
            step=adam_step_bytes(spec, states.trainable / ranks))

    def reference_bytes_per_rank(self, spec: JobSpec, parameters: float, ranks: int, *,
                                 offloaded: bool) -> tuple[float, float]:
        """A frozen copy sharded as `fully_shard` shards the model, in its compute dtype
        (param_dtype), 1/N of it a rank; with CPU offload its shards sit in host memory
        with the model's. Each layer is gathered while the copy's no_grad forward runs and
        freed before the policy's forward."""
        shard = compute_bytes(spec.fsdp.param_dtype or spec.precision) * parameters / ranks
        return (0.0, shard) if offloaded else (shard, 0.0)

    def forward_gather_bytes(self, spec: JobSpec, parameters: float) -> float:
        return compute_bytes(spec.fsdp.param_dtype or spec.precision) * parameters

    def unsupported_method_note(self, method: str | None) -> str | None:
        return ("QLoRA runs under ZeRO-2 only: FSDP2 cannot shard the packed 4-bit weights"
                if self.method_problem(method) else None)

    def communication_bytes(self, spec: JobSpec, parameters: float,
                            trainable: float) -> tuple[float, float]:
        # Each micro-batch gathers the weights for forward (and again for backward unless
        # they stay gathered: shard_grad_op) and reduce-scatters the gradients.
        gathers = 1 if spec.fsdp.sharding_strategy == "shard_grad_op" else 2
        weights = compute_bytes(spec.fsdp.param_dtype or spec.precision) * parameters
        return gathers * weights + compute_bytes(spec.fsdp.reduce_dtype) * trainable, 0.0

    def offload_traffic(self, spec: JobSpec, parameters_shard: float,
                        trainable_shard: float) -> tuple[float, float]:
        # Each micro-batch brings the fp32 weights up and back, and the gradients down; torch's
        # AdamW steps on the CPU.
        weights = FP32_BYTES * parameters_shard
        copies = spec.grad_accum * (2 * weights + FP32_BYTES * trainable_shard)
        return copies, TORCH_CPU_ADAM_PARAMETERS_PER_S

    def compiles(self, spec: JobSpec) -> bool:
        return spec.fsdp.compile


FSDP = Fsdp()
