"""The job spec: the one typed description of what to train.

The form builds it, the API validates it, the database stores it unchanged, the worker
writes it as `spec.json`, and the trainer reads only that. Unknown keys are an error.
Its fields (and their words) are tunedeck/spec/fields.py's; here are the rules that read
more than one of them, and what a spec says about itself.
"""
from __future__ import annotations

import re

from pydantic import field_validator, model_validator
from pydantic.fields import FieldInfo

from tunedeck.spec.fields import SINGLE_FILE_SUFFIXES, TAG_PATTERN, JobSpecFields
from tunedeck.spec.backend_sections import BackendSettings, FsdpSettings
from tunedeck.spec.sections import SPEED_PACKAGES, SpeedPackage, _no_nul


def backend_section(backend: str | None) -> type[BackendSettings] | None:
    """The section class of a backend's name (`zero2` -> Zero2Settings); None for another
    name, which the spec refuses by its own type."""
    field = JobSpecFields.model_fields.get(backend or "")
    annotation = field.annotation if field is not None else None
    return annotation if isinstance(annotation, type) and issubclass(
        annotation, BackendSettings) else None


class JobSpec(JobSpecFields):
    @field_validator("name", "model", "dataset", "eval_dataset", "dataset_config")
    @classmethod
    def _text_without_nul(cls, text: str | None) -> str | None:
        return _no_nul(text) if text is not None else None

    @field_validator("tags")
    @classmethod
    def _tags_are_short_labels(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            _no_nul(tag)
            if not re.fullmatch(TAG_PATTERN, tag):
                raise ValueError(f"{tag!r} is not a tag: 1 to 32 letters, digits or - _ . :")
        return tags

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
    def _backend_trains_the_method(cls, backend: str, info) -> str:
        problem = backend_section(backend).method_problem(info.data.get("method"))
        if problem:
            raise ValueError(problem)
        return backend

    @field_validator("attention")
    @classmethod
    def _flash_needs_half_precision(cls, attention: str, info) -> str:
        # A backend whose section sets the compute dtype (fsdp.param_dtype) is checked with it.
        section = backend_section(info.data.get("backend"))
        if attention == "flash" and info.data.get("precision") == "fp32" \
                and section is not None and not section.sets_compute_dtype:
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
        if info.data.get("backend") != info.field_name:  # a section checked only when chosen
            return fsdp
        if compute == "fp32" and info.data.get("attention") == "flash":
            raise ValueError("attention flash runs in bf16 or fp16 only, and the compute dtype "
                             "(param_dtype, else precision) is fp32: set param_dtype or "
                             "precision to bf16, or attention to sdpa")
        if compute == "fp16" and info.data.get("fused_optimizer"):
            # tests/trainer/test_speed_options.py::test_each_backend_steps_torchs_fused_adamw_
            # when_asked shows it on CPU ranks (speed_options_probe.py's fused_fp16_fails); the
            # same Python wrapper runs on CUDA.
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
    def _objective_fits_its_data_layout(self) -> "JobSpec":
        if self.objective == "dpo":
            # A pair's two answers go through one padded forward, each row one answer.
            for field in ("packing", "padding_free"):
                if getattr(self, field):
                    raise ValueError(f"{field}: objective dpo lays each answer of a pair out as "
                                     f"a row of its own; turn {field} off")
            if self.columns.messages or self.columns.response:
                raise ValueError("columns.messages/response name supervised examples; objective "
                                 "dpo reads columns.prompt, columns.chosen and columns.rejected")
        elif self.columns.chosen or self.columns.rejected:
            raise ValueError("columns.chosen/rejected name preference pairs: set objective dpo, "
                             "or map columns.prompt/response for sft")
        if self.objective == "grpo":
            _check_grpo(self)
        # The dpo and grpo sections, like a backend's, are read only when chosen (a Retry
        # may switch).
        return self

    @property
    def uses_reference_model(self) -> bool:
        """A DPO-family loss that compares with a reference (not simpo or orpo), or GRPO
        with a KL term (beta above 0)."""
        if self.objective == "grpo":
            return self.grpo.beta > 0
        return self.objective == "dpo" and self.dpo.uses_reference

    @property
    def reference_mode(self) -> str | None:
        """How the reference is held: `auto` (the adapter switched off, or a frozen copy),
        `precomputed` (dpo's table of log-probabilities), or None when there is none."""
        if not self.uses_reference_model:
            return None
        return self.dpo.reference if self.objective == "dpo" else "auto"

    @model_validator(mode="after")
    def _one_host_for_one_node(self) -> "JobSpec":
        if self.host is not None and self.num_nodes > 1:
            raise ValueError(f"host pins a job to one host, and num_nodes {self.num_nodes} needs "
                             f"{self.num_nodes} workers: drop host, or name a queue")
        return self

    @property
    def activation_checkpointing(self) -> bool:
        """The chosen backend's setting (each backend has its own switch in the form)."""
        return getattr(self, self.backend).activation_checkpointing

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
    def training_words(self) -> str:
        """What it trains, for a list or a legend: "lora", or "dpo lora" (SFT goes unsaid:
        it is every job that names no objective)."""
        return self.method if self.objective == "sft" else f"{self.objective} {self.method}"

    @property
    def display_name(self) -> str:
        """The spec's name, or one saying what it trains: "tiny-llama-lora-zero2",
        "tiny-llama-dpo-lora-zero2"."""
        return self.name or "-".join([model_stem(self.model), *self.training_words.split(),
                                      self.backend])


def _check_grpo(spec: "JobSpec") -> None:
    """objective grpo's rules between fields, each naming the field to change."""
    for field in ("packing", "padding_free"):
        if getattr(spec, field):
            raise ValueError(f"{field}: objective grpo lays each completion out as a row of its "
                             f"own; turn {field} off")
    if spec.columns.response or spec.columns.chosen or spec.columns.rejected:
        raise ValueError("columns.response/chosen/rejected name answers to learn; objective grpo "
                         "reads prompts (columns.prompt or columns.messages), and its rewards "
                         "read their own columns")
    if spec.has_eval:
        raise ValueError("eval_split/eval_dataset: objective grpo has no eval loss; its rewards "
                         "on the training prompts are its figures (leave both unset)")
    grpo = spec.grpo
    per_rank = spec.micro_batch_size * spec.grad_accum
    if per_rank % grpo.num_generations:
        raise ValueError(
            f"grpo.num_generations {grpo.num_generations} must divide the completions a rank "
            f"takes a step, micro_batch_size × grad_accum = {spec.micro_batch_size} × "
            f"{spec.grad_accum} = {per_rank}: e.g. micro_batch_size {grpo.num_generations}, or "
            f"grpo.num_generations {_largest_divisor_from_2(per_rank)}")
    if grpo.max_completion_length >= spec.seq_len:
        raise ValueError(f"grpo.max_completion_length {grpo.max_completion_length} leaves no room "
                         f"for a prompt in seq_len {spec.seq_len}: the prompt and its completion "
                         "share a row; raise seq_len or shorten the completion")


def _largest_divisor_from_2(number: int) -> int:
    return max((value for value in range(2, number + 1) if number % value == 0), default=2)


def spec_field(location: str) -> FieldInfo:
    """The field at a dotted location (`learning_rate`, `lora.r`), with its own words: its
    `title` is the form's label, its `description` the reference's and the API schema's."""
    model: type = JobSpec
    *sections, name = location.split(".")
    for section in sections:
        model = model.model_fields[section].annotation
    return model.model_fields[name]


def model_stem(model: str) -> str:
    """A model reference's last part: "builtin:tiny-llama", "Qwen/Qwen2-0.5B" and
    "/models/qwen2-0.5b/" give "tiny-llama", "Qwen2-0.5B" and "qwen2-0.5b"; another job's
    weights, "job:12", give "job-12"."""
    if model.startswith("job:"):
        return model.replace(":", "-", 1)
    return model.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1] or model


def is_single_file(source: str) -> bool:
    """A dataset reference that names one data file (no splits in it)."""
    return source.lower().endswith(SINGLE_FILE_SUFFIXES)
