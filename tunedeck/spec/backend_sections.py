"""The spec's sections of the training backends, `zero2` and `fsdp`: each backend's settings,
and what the spec's own rules need of a backend (its compute dtype, the methods it refuses).
The backend objects (tunedeck/backends/) read these sections to make their configs."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from tunedeck.spec.sections import StrictModel

ShardingStrategy = Literal["full_shard", "shard_grad_op", "hybrid_shard"]
DType = Literal["bf16", "fp16", "fp32"]
# DeepSpeed's default bucket size, in elements.
DEFAULT_BUCKET_ELEMENTS = 500_000_000


class BackendSettings(StrictModel):
    """A backend's section (`zero2`, `fsdp`): what the spec's own rules need of a backend is
    said here, so the spec never asks the backend objects (tunedeck/backends/, which read
    these sections to make their configs)."""

    # The section sets the compute dtype itself (fsdp.param_dtype), so the precision rules
    # are checked with the section, not with `precision` alone.
    sets_compute_dtype: ClassVar[bool] = False
    activation_checkpointing: bool

    @classmethod
    def method_problem(cls, method: str | None) -> str | None:
        """Why this backend cannot train `method`, or None."""
        return None


class Zero2Settings(BackendSettings):
    offload_optimizer: bool = Field(
        False, title="Offload optimizer to CPU",
        description="Keep the optimizer state in host memory and step it on the CPU "
                    "(DeepSpeed's CPU Adam): fits smaller cards, slower.")
    overlap_comm: bool = Field(
        True, title="Overlap communication",
        description="Overlap the gradient reduction with the backward pass.")
    contiguous_gradients: bool = Field(
        True, title="Contiguous gradients",
        description="Copy gradients into one contiguous buffer as they are produced (less "
                    "fragmentation).")
    reduce_bucket_size: int = Field(
        DEFAULT_BUCKET_ELEMENTS, ge=1_000, le=10_000_000_000, title="Reduce bucket size",
        description="Elements per gradient reduce bucket: smaller saves memory, larger "
                    "overlaps communication better.")
    allgather_bucket_size: int = Field(
        DEFAULT_BUCKET_ELEMENTS, ge=1_000, le=10_000_000_000, title="All-gather bucket size",
        description="Elements per parameter all-gather bucket.")
    # Recompute each decoder layer's activations in backward (Hugging Face gradient
    # checkpointing): less activation memory for about a third more compute.
    activation_checkpointing: bool = Field(
        False, title="Activation checkpointing",
        description="Recompute each decoder layer's activations in backward: less activation "
                    "memory for about a third more compute.")


class FsdpSettings(BackendSettings):
    sets_compute_dtype: ClassVar[bool] = True  # param_dtype, else the spec's precision

    sharding_strategy: ShardingStrategy = Field(
        "full_shard", title="Sharding strategy",
        description="`full_shard`: parameters resharded after forward (least memory); "
                    "`shard_grad_op`: kept gathered until backward (less communication); "
                    "`hybrid_shard`: refused for now.")
    cpu_offload: bool = Field(
        False, title="CPU offload",
        description="Keep the sharded parameters and optimizer state in host memory.")
    activation_checkpointing: bool = Field(
        False, title="Activation checkpointing",
        description="Recompute each decoder layer's activations in backward.")
    # Mixed precision. The sharded master weights stay fp32 whatever these say (a bf16-only
    # run can fail to converge where DeepSpeed, which keeps fp32 masters, converges).
    # param_dtype is the forward/backward compute dtype; unset, it follows `precision`.
    param_dtype: DType | None = Field(
        None, title="Compute dtype",
        description="The forward/backward compute dtype; unset, it follows `precision`. Master "
                    "weights stay fp32 whatever it says.")
    # Gradients are reduce-scattered in this dtype; fp32 costs bandwidth, not accuracy.
    reduce_dtype: DType = Field(
        "fp32", title="Gradient reduce dtype",
        description="The dtype gradients are reduce-scattered in.")
    buffer_dtype: DType = Field(
        "fp32", title="Buffer dtype",
        description="The dtype unsharded buffers (e.g. rotary frequencies) are kept in.")
    # Issue the next layer's all-gather before the current layer's backward (on by default:
    # it hides communication at the cost of one more gathered layer in memory) ...
    backward_prefetch: bool = Field(
        True, title="Backward prefetch",
        description="Issue the next layer's all-gather before the current layer's backward "
                    "(hides communication, one more gathered layer in memory).")
    # ... and, in forward, before the current layer runs (helps when the CPU thread
    # launching kernels cannot run ahead, e.g. with CPU offload).
    forward_prefetch: bool = Field(
        False, title="Forward prefetch",
        description="In forward, issue the next all-gather before the current layer runs.")
    compile: bool = Field(
        False, title="torch.compile",
        description="`torch.compile` each decoder layer before sharding it.")

    @classmethod
    def method_problem(cls, method: str | None) -> str | None:
        if method != "qlora":
            return None
        # What tests/trainer/test_qlora_under_fsdp.py shows, in one sentence.
        return ("qlora under fsdp: FSDP2 turns each packed 4-bit weight into a plain uint8 "
                "shard without its quantization state, and only a bitsandbytes fallback that "
                "rebuilds the state on every forward keeps the numbers right (on 2 CPU ranks: "
                "exact while the weights keep their layout, logits off by over 5 once "
                "bitsandbytes repacks them for an eval forward; not verified on GPUs); use "
                "backend zero2 (it keeps the frozen 4-bit base whole on each rank), or method "
                "lora under fsdp")
