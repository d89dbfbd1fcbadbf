"""The job spec: the one typed description of what to train.

The form builds it, the API validates it, the database stores it unchanged, the worker
writes it as `spec.json`, and the trainer reads only that. Unknown keys are an error.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

# The spec's sections live in their own module; their names are the spec's too.
from tunedeck.spec_sections import (ATTENTIONS, DEFAULT_BUCKET_ELEMENTS, KERNELS,  # noqa: F401
                                    SPEED_PACKAGES, Attention, ColumnMapping, DType,
                                    FsdpSettings, Kernels, LoraSettings, ShardingStrategy,
                                    SpeedPackage, StrictModel, Zero2Settings, _no_nul)

Method = Literal["lora", "qlora", "full"]
Backend = Literal["zero2", "fsdp"]
Precision = Literal["bf16", "fp16", "fp32"]
LearningRateSchedule = Literal["cosine", "linear", "constant"]
# The dtype merged/ is saved in; auto: the base model's stored dtype (see trainer/export_dtype.py).
ExportDType = Literal["auto", "bf16", "fp16", "fp32"]

METHODS: tuple[str, ...] = Method.__args__
BACKENDS: tuple[str, ...] = Backend.__args__
PRECISIONS: tuple[str, ...] = Precision.__args__
LEARNING_RATE_SCHEDULES: tuple[str, ...] = LearningRateSchedule.__args__
SHARDING_STRATEGIES: tuple[str, ...] = ShardingStrategy.__args__
DTYPES: tuple[str, ...] = DType.__args__
EXPORT_DTYPES: tuple[str, ...] = ExportDType.__args__
# Where the worker also sends the job's metrics (worker/trackers/; servers in Settings).
Tracker = Literal["tensorboard", "mlflow", "wandb"]
TRACKERS: tuple[str, ...] = Tracker.__args__
# A queue or host name: it becomes part of a broker queue name, so letters, digits and
# . _ - only.
PLACEMENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
# Data files read whole, as one split.
SINGLE_FILE_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".parquet", ".csv")
# A `datasets` split: a name (starting with a letter or digit, so never ".."), a slice of one
# ("train[:10%]", "train[100:200]"), or a sum.
SPLIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(\[[0-9:%-]{0,32}\])?(\+[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(\[[0-9:%-]{0,32}\])?){0,8}$"


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
    # GPU speed options, each off until measured on a GPU (docs/user-guide.md, "Speed
    # options"). liger: Liger Kernel's RMSNorm, RoPE, SwiGLU and fused linear
    # cross-entropy (the logits are never made whole) on the architectures it patches.
    kernels: Kernels = "none"
    # flash: flash-attn 2 (its varlen kernel for padding-free rows); sdpa: PyTorch's own.
    attention: Attention = "sdpa"
    # A micro-batch's rows laid end to end in one row, with no pad token; position ids
    # restart at every example, so examples still do not see each other.
    padding_free: bool = Field(False, validate_default=True)
    # AdamW's fused kernel (torch.optim.AdamW(fused=True)): one launch for every tensor
    # instead of a few per tensor; both backends (ZeRO-2 through DeepSpeed's torch_adam).
    # zero2.offload_optimizer steps DeepSpeed's CPU Adam instead, vectorised already.
    fused_optimizer: bool = False
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
    # Trackers the worker writes the job's metrics to as it stores them (none by default):
    # TensorBoard event files in the run folder, an MLflow run, a W&B run.
    report_to: list[Tracker] = Field(default_factory=list, max_length=len(TRACKERS))
    lora: LoraSettings = LoraSettings()
    zero2: Zero2Settings = Zero2Settings()
    # Validated when left out too: its rules read other fields (flash's compute dtype).
    fsdp: FsdpSettings = Field(FsdpSettings(), validate_default=True)

    @field_validator("name", "model", "dataset", "eval_dataset", "dataset_config")
    @classmethod
    def _text_without_nul(cls, text: str | None) -> str | None:
        return _no_nul(text) if text is not None else None

    @field_validator("report_to")
    @classmethod
    def _each_tracker_once(cls, trackers: list[str]) -> list[str]:
        repeated = sorted({name for name in trackers if trackers.count(name) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} named more than once")
        return trackers

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

    @field_validator("attention")
    @classmethod
    def _flash_needs_half_precision(cls, attention: str, info) -> str:
        # Under fsdp the compute dtype is fsdp.param_dtype's when set: checked with it.
        if attention == "flash" and info.data.get("precision") == "fp32" \
                and info.data.get("backend") == "zero2":
            raise ValueError("flash runs in bf16 or fp16 only; pick precision bf16, or "
                             "attention sdpa for fp32")
        return attention

    @field_validator("padding_free")
    @classmethod
    def _flash_packing_is_padding_free(cls, padding_free: bool, info) -> bool:
        if info.data.get("attention") == "flash" and info.data.get("packing") \
                and not padding_free and info.data.get("micro_batch_size", 1) > 1:
            # transformers finds a packed row's examples from its position ids only in a
            # micro-batch of one row on the flash path; with more rows they would see each
            # other.
            raise ValueError("attention flash with packing and micro_batch_size above 1 needs "
                             "padding_free: true (flash attention keeps a packed row's examples "
                             "apart only when the micro-batch is one row)")
        return padding_free

    @field_validator("eval_dataset")
    @classmethod
    def _one_eval_source(cls, eval_dataset: str | None, info) -> str | None:
        if eval_dataset is not None and info.data.get("eval_split", 0) > 0:
            raise ValueError("set eval_split or eval_dataset, not both")
        return eval_dataset

    @model_validator(mode="after")
    def _eval_is_not_the_training_split(self) -> "JobSpec":
        if self.eval_dataset == self.dataset and is_single_file(self.dataset):
            raise ValueError("eval_dataset is the dataset file itself, which is read whole: "
                             "name a separate eval file, or hold some out with eval_split")
        if self.eval_dataset == self.dataset and self.eval_dataset_split == self.dataset_split:
            raise ValueError(f"eval_dataset is the dataset itself, split {self.dataset_split!r} "
                             "too: set eval_dataset_split to a held-out split (e.g. test)")
        return self

    @model_validator(mode="after")
    def _no_split_of_a_single_file(self) -> "JobSpec":
        # A single file is one split, read whole: a split named for it would be ignored.
        for field, source, split, default in (
                ("dataset_split", self.dataset, self.dataset_split, "train"),
                ("eval_dataset_split", self.eval_dataset, self.eval_dataset_split, "test")):
            if source is not None and is_single_file(source) and split != default:
                raise ValueError(f"{field} {split!r}: {source} is a single file, read whole; "
                                 f"leave {field} unset, or use a dataset folder or id")
        return self

    @field_validator("eval_every_steps")
    @classmethod
    def _eval_needs_a_set(cls, every: int, info) -> int:
        if every > 0 and not (info.data.get("eval_split", 0) > 0 or info.data.get("eval_dataset")):
            raise ValueError("eval_every_steps needs an eval set: set eval_split or eval_dataset")
        return every

    @field_validator("fsdp")
    @classmethod
    def _compute_dtype_fits_the_speed_options(cls, fsdp: FsdpSettings, info) -> FsdpSettings:
        compute = fsdp.param_dtype or info.data.get("precision")
        if info.data.get("backend") != "fsdp":
            return fsdp
        if compute == "fp32" and info.data.get("attention") == "flash":
            raise ValueError("attention flash runs in bf16 or fp16 only, and the compute dtype "
                             "(param_dtype, else precision) is fp32: set param_dtype or "
                             "precision to bf16, or attention to sdpa")
        if compute == "fp16" and info.data.get("fused_optimizer"):
            # tests/trainer/test_speed_options.py shows it on CPU ranks; the same Python
            # wrapper runs on CUDA.
            raise ValueError("fused_optimizer with an fp16 compute dtype: torch's fused AdamW "
                             "fails on FSDP's sharded grad scaler (its overflow flag has shape "
                             "[1], the fused step wants []); use bf16, or fused_optimizer off")
        return fsdp

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
    def speed_packages(self) -> tuple[SpeedPackage, ...]:
        """The GPU packages this spec's speed options need (none by default)."""
        return tuple(package for package in SPEED_PACKAGES
                     if getattr(self, package.field) == package.value)

    @property
    def has_eval(self) -> bool:
        return self.eval_split > 0 or self.eval_dataset is not None

    @property
    def world_size(self) -> int:
        return self.num_gpus * self.num_nodes

    @property
    def display_name(self) -> str:
        return self.name or f"{self.method}-{self.backend}"


def is_single_file(source: str) -> bool:
    """A dataset reference that names one data file (no splits in it)."""
    return source.lower().endswith(SINGLE_FILE_SUFFIXES)


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
