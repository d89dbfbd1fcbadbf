"""The job spec: the one typed description of what to train.

The form builds it, the API validates it, the database stores it unchanged, the worker
writes it as `spec.json`, and the trainer reads only that. Unknown keys are an error.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Method = Literal["lora", "qlora", "full"]
Backend = Literal["zero2", "fsdp"]
Precision = Literal["bf16", "fp16", "fp32"]
LearningRateSchedule = Literal["cosine", "linear", "constant"]
ShardingStrategy = Literal["full_shard", "shard_grad_op", "hybrid_shard"]
DType = Literal["bf16", "fp16", "fp32"]
# The dtype merged/ is saved in; auto: the base model's stored dtype (see trainer/export_dtype.py).
ExportDType = Literal["auto", "bf16", "fp16", "fp32"]

METHODS: tuple[str, ...] = Method.__args__
BACKENDS: tuple[str, ...] = Backend.__args__
PRECISIONS: tuple[str, ...] = Precision.__args__
LEARNING_RATE_SCHEDULES: tuple[str, ...] = LearningRateSchedule.__args__
SHARDING_STRATEGIES: tuple[str, ...] = ShardingStrategy.__args__
DTYPES: tuple[str, ...] = DType.__args__
EXPORT_DTYPES: tuple[str, ...] = ExportDType.__args__
# DeepSpeed's default bucket size, in elements.
DEFAULT_BUCKET_ELEMENTS = 500_000_000


# A queue or host name: it becomes part of a broker queue name, so letters, digits and
# . _ - only.
PLACEMENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
# A `datasets` split: a name, a slice of one ("train[:10%]", "train[100:200]"), or a sum.
SPLIT_PATTERN = r"^[A-Za-z0-9_.-]{1,64}(\[[0-9:%-]{0,32}\])?(\+[A-Za-z0-9_.-]{1,64}(\[[0-9:%-]{0,32}\])?){0,8}$"


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


class JobSpec(StrictModel):
    name: str | None = Field(None, max_length=200)
    model: str = Field("builtin:tiny-llama", min_length=1, max_length=1000)
    dataset: str = Field("builtin:arithmetic", min_length=1, max_length=1000)
    # A Hugging Face dataset id's (or dataset folder's) configuration and split, e.g.
    # "train[:10%]"; a single file (.jsonl, .csv, .parquet, ...) is read whole.
    dataset_config: str | None = Field(None, min_length=1, max_length=200)
    dataset_split: str = Field("train", pattern=SPLIT_PATTERN)
    # The dataset's own column names, where they differ (eval_dataset is read with them too).
    columns: ColumnMapping = ColumnMapping()
    method: Method = "lora"
    backend: Backend = "zero2"
    num_gpus: int = Field(1, ge=1, le=64)
    num_nodes: int = Field(1, ge=1, le=64)
    max_steps: int | None = Field(None, ge=1, le=10_000_000)
    epochs: float | None = Field(None, gt=0, le=10_000)
    learning_rate: float = Field(2.0e-4, gt=0, le=1.0)
    warmup_steps: int = Field(0, ge=0, le=1_000_000)
    lr_schedule: LearningRateSchedule = "cosine"
    weight_decay: float = Field(0.0, ge=0, le=1)
    # Gradients are clipped to this global norm; 0 turns clipping off.
    max_grad_norm: float = Field(1.0, ge=0, le=1_000_000)
    micro_batch_size: int = Field(4, ge=1, le=4096)
    grad_accum: int = Field(1, ge=1, le=4096)
    seq_len: int = Field(256, ge=8, le=1_048_576)
    precision: Precision = "bf16"
    seed: int = Field(42, ge=0, le=2**31 - 1)
    # Evaluation: hold out a fraction of the dataset, or name a separate file (not both);
    # the eval loss is measured every `eval_every_steps` optimizer steps and at the end.
    eval_split: float = Field(0.0, ge=0, le=0.5)
    eval_dataset: str | None = Field(None, min_length=1, max_length=1000)
    # eval_dataset's split when it is a Hugging Face id or a dataset folder (with dataset_config).
    eval_dataset_split: str = Field("test", pattern=SPLIT_PATTERN)
    eval_every_steps: int = Field(0, ge=0, le=10_000_000)
    # Pack several examples into each seq_len row (fewer pad tokens; attention still stops
    # at each example's boundary through per-example position ids).
    packing: bool = False
    # Save a checkpoint every N optimizer steps (0: none) and keep the newest K.
    checkpoint_every_steps: int = Field(0, ge=0, le=10_000_000)
    keep_checkpoints: int = Field(2, ge=1, le=1000)
    # Where it runs: a worker queue (workers serve the queues TUNEDECK_WORKER_QUEUES names)
    # or one host; with neither, any worker of the "default" queue with enough free GPUs.
    queue: str | None = Field(None, pattern=PLACEMENT_NAME)
    host: str | None = Field(None, pattern=PLACEMENT_NAME)
    # When the worker running it is lost, queue it again (from its latest checkpoint, on
    # any worker) up to this many times; 0: it fails with "worker lost".
    max_restarts: int = Field(0, ge=0, le=100)
    # Let transformers run Python code shipped with the model (its own modeling files): only
    # an admin may submit a spec with it on (the web refuses it for anyone else).
    trust_remote_code: bool = False
    # The dtype of the merged weights (merging itself is fp32, cast once at the end). auto:
    # what the base stores (its safetensors headers, else its config.json, else fp32), so a
    # LoRA on a bf16 base downloads bf16, not twice the base's bytes in fp32.
    export_dtype: ExportDType = "auto"
    lora: LoraSettings = LoraSettings()
    zero2: Zero2Settings = Zero2Settings()
    fsdp: FsdpSettings = FsdpSettings()

    @field_validator("name", "model", "dataset", "eval_dataset", "dataset_config")
    @classmethod
    def _text_without_nul(cls, text: str | None) -> str | None:
        return _no_nul(text) if text is not None else None

    @model_validator(mode="after")
    def _one_training_length(self) -> "JobSpec":
        if self.max_steps is None and self.epochs is None:
            raise ValueError("set max_steps or epochs (one of them)")
        if self.max_steps is not None and self.epochs is not None:
            raise ValueError("set max_steps or epochs, not both")
        return self

    @field_validator("backend")
    @classmethod
    def _qlora_needs_zero2(cls, backend: str, info) -> str:
        if backend == "fsdp" and info.data.get("method") == "qlora":
            # What tests/trainer/test_qlora_under_fsdp.py shows, in one sentence.
            raise ValueError(
                "qlora under fsdp: FSDP2 turns each packed 4-bit weight into a plain uint8 "
                "shard without its quantization state, and only a bitsandbytes fallback that "
                "rebuilds the state on every forward keeps the numbers right (on 2 CPU ranks: "
                "exact while the weights keep their layout, logits off by over 5 once "
                "bitsandbytes repacks them for an eval forward; not verified on GPUs); use "
                "backend zero2 (it keeps the frozen 4-bit base whole on each rank), or method "
                "lora under fsdp")
        return backend

    @field_validator("eval_dataset")
    @classmethod
    def _one_eval_source(cls, eval_dataset: str | None, info) -> str | None:
        if eval_dataset is not None and info.data.get("eval_split", 0) > 0:
            raise ValueError("set eval_split or eval_dataset, not both")
        return eval_dataset

    @model_validator(mode="after")
    def _eval_is_not_the_training_split(self) -> "JobSpec":
        if self.eval_dataset == self.dataset and self.eval_dataset_split == self.dataset_split:
            raise ValueError(f"eval_dataset is the dataset itself, split {self.dataset_split!r} "
                             "too: set eval_dataset_split to a held-out split (e.g. test)")
        return self

    @field_validator("eval_every_steps")
    @classmethod
    def _eval_needs_a_set(cls, every: int, info) -> int:
        if every > 0 and not (info.data.get("eval_split", 0) > 0 or info.data.get("eval_dataset")):
            raise ValueError("eval_every_steps needs an eval set: set eval_split or eval_dataset")
        return every

    @field_validator("fsdp")
    @classmethod
    def _hybrid_needs_nodes(cls, fsdp: FsdpSettings, info) -> FsdpSettings:
        if fsdp.sharding_strategy == "hybrid_shard" and info.data.get("num_nodes", 1) < 2:
            raise ValueError("hybrid_shard replicates across nodes and needs num_nodes > 1; "
                             "on one node use full_shard or shard_grad_op")
        if fsdp.sharding_strategy == "hybrid_shard":
            # The trainer shards over one flat mesh of every rank; a 2D (node x GPU) mesh
            # is not built, and a silently flat "hybrid" would be a lie.
            raise ValueError("hybrid_shard is not available yet; use full_shard (it shards "
                             "across every rank of every node) or shard_grad_op")
        return fsdp

    @model_validator(mode="after")
    def _one_host_for_one_node(self) -> "JobSpec":
        if self.host is not None and self.num_nodes > 1:
            raise ValueError(f"host pins a job to one host, and num_nodes {self.num_nodes} needs "
                             f"{self.num_nodes} workers: drop host, or name a queue")
        return self

    @property
    def activation_checkpointing(self) -> bool:
        """The chosen backend's setting (each backend has its own switch in the form)."""
        settings = self.zero2 if self.backend == "zero2" else self.fsdp
        return settings.activation_checkpointing

    @property
    def has_eval(self) -> bool:
        return self.eval_split > 0 or self.eval_dataset is not None

    @property
    def world_size(self) -> int:
        return self.num_gpus * self.num_nodes

    @property
    def display_name(self) -> str:
        return self.name or f"{self.method}-{self.backend}"


def parse_spec_text(text: str, *, source: str = "spec") -> JobSpec:
    """YAML or JSON text to a JobSpec (JSON is YAML, so one parser reads both)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{source}: not valid YAML or JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a mapping of spec keys, got {type(data).__name__}")
    return JobSpec.model_validate(data)


def load_spec_file(path: str | Path) -> JobSpec:
    path = Path(path)
    return parse_spec_text(path.read_text(encoding="utf-8"), source=str(path))


def spec_to_json(spec: JobSpec) -> str:
    return json.dumps(spec.model_dump(mode="json"), indent=2, sort_keys=True)


def format_validation_error(error: Exception) -> str:
    """One line per problem, each naming its field, for the form and the CLI."""
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return str(error)
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{field}: {message}")
    return "\n".join(lines)
