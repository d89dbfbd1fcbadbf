"""What a job spec holds: each field with its type, default, bounds, label (`title`) and help
(`description`), the one place a field's words are written (the form, the API schema and the
reference page read them). Which combinations of values are allowed is tunedeck/spec/job_spec.py's.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from tunedeck.spec.backend_sections import DType, FsdpSettings, ShardingStrategy, Zero2Settings
from tunedeck.spec.rl_section import GrpoSettings
from tunedeck.spec.sections import (Attention, ColumnMapping, DpoSettings, Kernels, LoraSettings,
                                    Objective, StrictModel)

Method = Literal["lora", "qlora", "full"]
# A backend's name (its object, with what it answers, is tunedeck/backends/'s `Backend`).
BackendName = Literal["zero2", "fsdp"]
Precision = Literal["bf16", "fp16", "fp32"]
LearningRateSchedule = Literal["cosine", "linear", "constant"]
# The dtype merged/ is saved in; auto: the base model's stored dtype (see trainer/model/export_dtype.py).
ExportDType = Literal["auto", "bf16", "fp16", "fp32"]

METHODS: tuple[str, ...] = Method.__args__
BACKEND_NAMES: tuple[str, ...] = BackendName.__args__
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
# A tag: a label of the user's own (letters, digits and - _ . :).
TAG_PATTERN = r"^[A-Za-z0-9_.:-]{1,32}$"
# Data files read whole, as one split.
SINGLE_FILE_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".parquet", ".csv")
# A `datasets` split: a name (starting with a letter or digit, so never ".."), a slice of one
# ("train[:10%]", "train[100:200]"), or a sum.
SPLIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(\[[0-9:%-]{0,32}\])?(\+[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(\[[0-9:%-]{0,32}\])?){0,8}$"


class JobSpecFields(StrictModel):
    name: str | None = Field(
        None, max_length=200, title="Name",
        description="A name for the job's page and table; unset: its model, objective "
                    "(unless sft), method and backend (`tiny-llama-lora-zero2`, "
                    "`tiny-llama-dpo-lora-zero2`).")
    tags: list[str] = Field(
        default_factory=list, max_length=16, title="Tags",
        json_schema_extra={"items": {"type": "string", "pattern": TAG_PATTERN}},
        description="Labels of your own, shown in the jobs list and on the job page, for "
                    "sorting your jobs: at most 16, each 1 to 32 letters, digits or `-_.:`.")
    model: str = Field(
        "builtin:tiny-llama", min_length=1, max_length=1000, title="Model",
        description="The base model: `builtin:tiny-llama` (a tiny random Llama made offline), "
                    "a Hugging Face id, an absolute local folder inside the allowed roots, or "
                    "`job:ID`: the merged weights of a succeeded job you may read (SFT, then "
                    "DPO or GRPO on its result).")
    dataset: str = Field(
        "builtin:arithmetic", min_length=1, max_length=1000, title="Dataset",
        description="The training data: `builtin:arithmetic`, a .jsonl, .json, .jsonl.gz, "
                    ".parquet or .csv file, a dataset folder, or a Hugging Face dataset id.")
    # A Hugging Face dataset id's (or dataset folder's) configuration and split, e.g.
    # "train[:10%]"; a single file (.jsonl, .csv, .parquet, ...) is read whole.
    dataset_config: str | None = Field(
        None, min_length=1, max_length=200, title="Dataset config",
        description="A Hugging Face dataset id's (or dataset folder's) configuration.")
    dataset_split: str = Field(
        "train", pattern=SPLIT_PATTERN, title="Dataset split",
        description="The split of an id or a folder, e.g. `train[:10%]`; a single file is read "
                    "whole and takes no split.")
    columns: ColumnMapping = Field(
        ColumnMapping(), title="Columns",
        description="The dataset's own column names where they differ from the usual ones "
                    "(`eval_dataset` is read with them too).")
    objective: Objective = Field(
        "sft", title="Objective",
        description="`sft`: supervised fine-tuning on prompt/answer examples; `dpo`: "
                    "preference tuning on prompt/chosen/rejected pairs (the `dpo` section "
                    "picks the loss: DPO, IPO, hinge, SimPO or ORPO); `grpo`: reinforcement "
                    "learning from rewards on the model's own completions to prompts (the "
                    "`grpo` section picks the sampling, the rewards and the loss).")
    method: Method = Field(
        "lora", title="Method",
        description="`lora` (an adapter), `qlora` (an adapter on a 4-bit NF4 base; zero2 only) "
                    "or `full` (every weight).")
    backend: BackendName = Field(
        "zero2", title="Backend",
        description="DeepSpeed ZeRO-2 or PyTorch FSDP.")
    num_gpus: int = Field(
        1, ge=1, le=64, title="GPUs",
        description="Processes per node: GPUs, or CPU ranks on a host without GPUs.")
    num_nodes: int = Field(
        1, ge=1, le=64, title="Nodes",
        description="Nodes, each run by its own worker.")
    max_steps: int | None = Field(
        None, ge=1, le=10_000_000, title="Steps",
        description="Optimizer steps to train; set this or `epochs`.")
    epochs: float | None = Field(
        None, gt=0, le=10_000, title="Epochs",
        description="Passes over the training rows; set this or `max_steps`.")
    learning_rate: float = Field(
        2.0e-4, gt=0, le=1.0, title="Learning rate",
        description="The peak learning rate.")
    warmup_steps: int = Field(
        0, ge=0, le=1_000_000, title="Warmup steps",
        description="Steps of linear warmup before the schedule.")
    lr_schedule: LearningRateSchedule = Field(
        "cosine", title="Learning-rate schedule",
        description="After warmup: cosine or linear decay, or constant.")
    weight_decay: float = Field(
        0.0, ge=0, le=1, title="Weight decay",
        description="AdamW's decoupled weight decay.")
    max_grad_norm: float = Field(
        1.0, ge=0, le=1_000_000, title="Max gradient norm",
        description="Gradients are clipped to this global norm; 0 turns clipping off.")
    micro_batch_size: int = Field(
        4, ge=1, le=4096, title="Micro batch size",
        description="Rows per rank per forward.")
    grad_accum: int = Field(
        1, ge=1, le=4096, title="Gradient accumulation",
        description="Micro-batches accumulated into one optimizer step.")
    seq_len: int = Field(
        256, ge=8, le=1_048_576, title="Sequence length",
        description="Tokens per row; longer examples are truncated.")
    precision: Precision = Field(
        "bf16", title="Precision",
        description="Training precision (fp16 uses loss scaling).")
    seed: int = Field(
        42, ge=0, le=2**31 - 1, title="Seed",
        description="Seeds initialisation, data order and dropout.")
    # Evaluation: hold out a fraction of the dataset, or name a separate file (not both);
    # the eval loss is measured every `eval_every_steps` optimizer steps and at the end.
    eval_split: float = Field(
        0.0, ge=0, le=0.5, title="Eval split",
        description="Fraction of the dataset held out for the eval loss (0: none); not "
                    "together with `eval_dataset`.")
    eval_dataset: str | None = Field(
        None, min_length=1, max_length=1000, title="Eval dataset",
        description="A separate eval dataset, in any form `dataset` takes; not together with "
                    "`eval_split`.")
    eval_dataset_split: str = Field(
        "test", pattern=SPLIT_PATTERN, title="Eval dataset split",
        description="`eval_dataset`'s split when it is a Hugging Face id or a dataset folder.")
    eval_every_steps: int = Field(
        0, ge=0, le=10_000_000, title="Eval every (steps)",
        description="Measure the eval loss every N optimizer steps and at the end (0: at the "
                    "end only); needs an eval set.")
    packing: bool = Field(
        False, title="Pack sequences",
        description="Pack several examples into each `seq_len` row (fewer pad tokens; "
                    "attention still stops at each example's boundary).")
    # GPU speed options (docs/user-guide.md, "Speed options"). liger: Liger Kernel's fused
    # kernels (no whole logits); auto: liger where measured to win (auto_kernels), else none.
    kernels: Kernels = Field(
        "auto", title="Kernels",
        description="GPU speed: `liger` patches the model with Liger Kernel's RMSNorm, RoPE, "
                    "SwiGLU and fused linear cross-entropy (the logits are never made whole; "
                    "the memory plan drops them); it needs a CUDA GPU with `liger-kernel` "
                    "installed, and a model family Liger patches. `auto` runs `liger` for LoRA "
                    "and QLoRA where the host and the family allow it (measured 20-38% faster "
                    "on an H200) and `none` elsewhere, and the job's events say which.")
    # flash: flash-attn 2 (its varlen kernel for padding-free rows); sdpa: PyTorch's own.
    attention: Attention = Field(
        "sdpa", title="Attention",
        description="The attention kernel: `sdpa` (PyTorch's scaled_dot_product_attention, "
                    "transformers' default) or `flash` (flash-attn 2, bf16/fp16 only; needs a "
                    "CUDA GPU with `flash-attn` installed).")
    padding_free: bool = Field(
        False, validate_default=True, title="Padding-free batches",
        description="Lay each micro-batch's rows end to end in one row with no pad token; "
                    "position ids restart at every example, so examples still do not see each "
                    "other. Meant for `flash`: under `sdpa` the row's block mask costs "
                    "(micro-batch x seq_len)^2 bytes, and a bias of that size in the compute "
                    "dtype for each layer.")
    # AdamW's fused kernel (torch.optim.AdamW(fused=True)): one launch for every tensor
    # instead of a few per tensor; both backends (ZeRO-2 through DeepSpeed's torch_adam).
    # zero2.offload_optimizer steps DeepSpeed's CPU Adam instead, vectorised already.
    fused_optimizer: bool = Field(
        False, title="Fused AdamW",
        description="AdamW's fused kernel (`torch.optim.AdamW(fused=True)`), under FSDP and, "
                    "through DeepSpeed's `torch_adam`, ZeRO-2 (not with "
                    "`zero2.offload_optimizer`, which steps DeepSpeed's CPU Adam).")
    checkpoint_every_steps: int = Field(
        0, ge=0, le=10_000_000, title="Checkpoint every (steps)",
        description="Save a checkpoint every N optimizer steps (0: none; Resume needs one).")
    keep_checkpoints: int = Field(
        2, ge=1, le=1000, title="Keep checkpoints",
        description="Keep the newest K checkpoints.")
    # Where it runs: a worker queue (workers serve the queues TUNEDECK_WORKER_QUEUES names)
    # or one host; with neither, any worker of the "default" queue with enough free GPUs.
    queue: str | None = Field(
        None, pattern=PLACEMENT_NAME, title="Queue",
        description="The worker queue to run on (workers serve the queues "
                    "`TUNEDECK_WORKER_QUEUES` names); unset: `default`.")
    host: str | None = Field(
        None, pattern=PLACEMENT_NAME, title="Host",
        description="Pin the job to one host; unset: any host of the queue.")
    max_restarts: int = Field(
        0, ge=0, le=100, title="Restarts after a lost worker",
        description="When the job's worker is lost, queue it again (from its latest "
                    "checkpoint, on any worker) up to N times; 0: it fails as worker lost.")
    trust_remote_code: bool = Field(
        False, title="Trust the model's own code",
        description="Let transformers run Python code shipped with the model; only an admin "
                    "may submit a spec with it on.")
    # The dtype of the merged weights (merging itself is fp32, cast once at the end). auto:
    # what the base stores (its safetensors headers, else its config.json, else fp32), so a
    # LoRA on a bf16 base downloads bf16, not twice the base's bytes in fp32.
    export_dtype: ExportDType = Field(
        "auto", title="Merged weights dtype",
        description="The merged weights' dtype (the merge itself runs in fp32). auto: what the "
                    "base stores (its safetensors headers, else its config.json, else fp32).")
    # Trackers the worker writes the job's metrics to as it stores them (none by default):
    # TensorBoard event files in the run folder, an MLflow run, a W&B run.
    report_to: list[Tracker] = Field(
        default_factory=list, max_length=len(TRACKERS), title="Report to",
        description="Trackers the worker also writes the job's metrics to, each at most once: "
                    "tensorboard (event files in the run folder's tensorboard/), mlflow (a run "
                    "on TUNEDECK_MLFLOW_TRACKING_URI), wandb (a run, offline unless "
                    "TUNEDECK_WANDB_MODE=online). Empty: none.")
    dpo: DpoSettings = Field(
        DpoSettings(), title="Preference tuning",
        description="The preference loss and its reference model (objective dpo).")
    grpo: GrpoSettings = Field(
        GrpoSettings(), title="Reinforcement learning (GRPO)",
        description="Sampling, rewards and loss of objective grpo.")
    lora: LoraSettings = Field(
        LoraSettings(), title="LoRA",
        description="The adapter's settings (methods lora and qlora).")
    zero2: Zero2Settings = Field(
        Zero2Settings(), title="DeepSpeed ZeRO-2",
        description="DeepSpeed ZeRO-2's settings (backend zero2).")
    # Validated when left out too: its rules read other fields (flash's compute dtype).
    fsdp: FsdpSettings = Field(
        FsdpSettings(), validate_default=True, title="FSDP",
        description="FSDP's settings (backend fsdp).")
