"""The job spec's sections: LoRA, the dataset's column names, ZeRO-2 and FSDP settings, each a
strict model of its own (tunedeck/job_spec.py composes them; unknown keys are an error), and
the speed options' choices with the package each GPU choice needs."""
from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ShardingStrategy = Literal["full_shard", "shard_grad_op", "hybrid_shard"]
DType = Literal["bf16", "fp16", "fp32"]
# DeepSpeed's default bucket size, in elements.
DEFAULT_BUCKET_ELEMENTS = 500_000_000
# GPU speed options (trainer/speed/): Liger Kernel's Triton kernels, and which attention
# kernel the model runs (PyTorch's scaled_dot_product_attention, or flash-attn 2).
Kernels = Literal["none", "liger"]
Attention = Literal["sdpa", "flash"]
KERNELS: tuple[str, ...] = Kernels.__args__
ATTENTIONS: tuple[str, ...] = Attention.__args__


class SpeedPackage(NamedTuple):
    """A speed option's choice that runs only on a CUDA host with a package installed."""

    field: str  # the spec field
    value: str  # its value that needs the package
    import_name: str  # what the worker's heartbeat and the trainer look for
    pip_name: str  # what to install


SPEED_PACKAGES = (SpeedPackage("kernels", "liger", "liger_kernel", "liger-kernel"),
                  SpeedPackage("attention", "flash", "flash_attn", "flash-attn"))


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _no_nul(text: str) -> str:
    # PostgreSQL text refuses a NUL character (a job's name column: psycopg raises, a 500),
    # and a model or dataset path with one makes open() raise in the trainer. No name,
    # path or module name holds one: refused here, as a 422 naming the field.
    if "\x00" in text:
        raise ValueError("must not contain a NUL character (\\u0000)")
    return text


class LoraSettings(StrictModel):
    r: int = Field(16, ge=1, le=1024)
    alpha: float = Field(32, gt=0, le=4096)
    dropout: float = Field(0.05, ge=0, lt=1)
    # "all-linear" is peft's own shorthand for every linear layer but the output head.
    target_modules: Literal["all-linear"] | list[str] = "all-linear"
    # Mixture-of-experts models: adapters on the routed experts' fused weights too, with no
    # dropout (peft cannot drop out inside a fused expert matmul); off leaves them frozen.
    experts: bool = True
    # The router (the MoE block's gate) is trained in full when on; off, it stays frozen.
    train_router: bool = False

    @field_validator("target_modules")
    @classmethod
    def _modules_without_nul(cls, modules: str | list[str]) -> str | list[str]:
        return modules if isinstance(modules, str) else [_no_nul(module) for module in modules]


class ColumnMapping(StrictModel):
    """Which columns hold the prompt, the response, a chat's messages and a system prompt,
    for a dataset that names them otherwise; unset, the usual names are looked for
    (instruction/input/output, prompt/response, messages)."""

    prompt: str | None = Field(None, min_length=1, max_length=200)
    response: str | None = Field(None, min_length=1, max_length=200)
    messages: str | None = Field(None, min_length=1, max_length=200)
    system: str | None = Field(None, min_length=1, max_length=200)

    @field_validator("prompt", "response", "messages", "system")
    @classmethod
    def _name_without_nul(cls, name: str | None) -> str | None:
        return _no_nul(name) if name is not None else None

    @model_validator(mode="after")
    def _one_shape(self) -> "ColumnMapping":
        if self.messages and (self.prompt or self.response):
            raise ValueError("set columns.messages (a chat) or columns.prompt/response "
                             "(one turn), not both")
        return self


class Zero2Settings(StrictModel):
    offload_optimizer: bool = False
    overlap_comm: bool = True
    contiguous_gradients: bool = True
    # Elements per gradient reduce / parameter all-gather bucket: smaller saves memory,
    # larger overlaps communication better.
    reduce_bucket_size: int = Field(DEFAULT_BUCKET_ELEMENTS, ge=1_000, le=10_000_000_000)
    allgather_bucket_size: int = Field(DEFAULT_BUCKET_ELEMENTS, ge=1_000, le=10_000_000_000)
    # Recompute each decoder layer's activations in backward (Hugging Face gradient
    # checkpointing): less activation memory for about a third more compute.
    activation_checkpointing: bool = False


class FsdpSettings(StrictModel):
    # full_shard: parameters resharded after forward (least memory); shard_grad_op: kept
    # gathered until backward (less communication); hybrid_shard: shard within a node,
    # replicate across nodes.
    sharding_strategy: ShardingStrategy = "full_shard"
    cpu_offload: bool = False
    activation_checkpointing: bool = False
    # Mixed precision. The sharded master weights stay fp32 whatever these say (a bf16-only
    # run can fail to converge where DeepSpeed, which keeps fp32 masters, converges).
    # param_dtype is the forward/backward compute dtype; unset, it follows `precision`.
    param_dtype: DType | None = None
    # Gradients are reduce-scattered in this dtype; fp32 costs bandwidth, not accuracy.
    reduce_dtype: DType = "fp32"
    # Buffers (e.g. rotary frequencies) are not sharded; this is the dtype they are kept in.
    buffer_dtype: DType = "fp32"
    # Issue the next layer's all-gather before the current layer's backward (on by default:
    # it hides communication at the cost of one more gathered layer in memory) ...
    backward_prefetch: bool = True
    # ... and, in forward, before the current layer runs (helps when the CPU thread
    # launching kernels cannot run ahead, e.g. with CPU offload).
    forward_prefetch: bool = False
    # torch.compile each decoder layer before sharding it.
    compile: bool = False
