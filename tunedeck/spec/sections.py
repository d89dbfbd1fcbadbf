"""The job spec's sections: LoRA, the dataset's column names and DPO's settings, each a
strict model of its own (tunedeck/spec/job_spec.py composes them; unknown keys are an error), and
the speed options' choices with the package each GPU choice needs."""
from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import (BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, ValidationError,
                      field_validator, model_validator)

from tunedeck.spec.unknown_fields import with_unknown_fields_named

# GPU speed options (trainer/speed/): Liger Kernel's Triton kernels, and which attention
# kernel the model runs (PyTorch's scaled_dot_product_attention, or flash-attn 2).
# kernels auto: Liger's where a GPU run measured them to win, else none
# (tunedeck/training_plan.py's `auto_kernels`).
Kernels = Literal["auto", "none", "liger"]
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

    @model_validator(mode="wrap")
    @classmethod
    def _name_unknown_fields(cls, data: Any, handler: ModelWrapValidatorHandler) -> Any:
        """An unknown key's error says which field was likely meant
        (tunedeck.spec.unknown_fields)."""
        try:
            return handler(data)
        except ValidationError as error:
            raise with_unknown_fields_named(error, cls.model_fields) from None


def _no_nul(text: str) -> str:
    # PostgreSQL text refuses a NUL character (a job's name column: psycopg raises, a 500),
    # and a model or dataset path with one makes open() raise in the trainer. No name,
    # path or module name holds one: refused here, as a 422 naming the field.
    if "\x00" in text:
        raise ValueError("must not contain a NUL character (\\u0000)")
    return text


class LoraSettings(StrictModel):
    r: int = Field(
        16, ge=1, le=1024, title="LoRA rank",
        description="The adapter's rank.")
    alpha: float = Field(
        32, gt=0, le=4096, title="LoRA alpha",
        description="LoRA's scaling numerator (the update is scaled by alpha / r).")
    dropout: float = Field(
        0.05, ge=0, lt=1, title="LoRA dropout",
        description="Dropout on the adapters' input (not on fused expert weights).")
    # "all-linear" is peft's own shorthand for every linear layer but the output head.
    target_modules: Literal["all-linear"] | list[str] = Field(
        "all-linear", title="LoRA target modules",
        description="`all-linear` (every linear layer but the output head) or a list of module "
                    "names.")
    # Mixture-of-experts models: adapters on the routed experts' fused weights too, with no
    # dropout (peft cannot drop out inside a fused expert matmul); off leaves them frozen.
    experts: bool = Field(
        True, title="Adapters on expert weights",
        description="Mixture-of-experts models: adapters on the routed experts' fused weights "
                    "too (without dropout); off leaves them frozen.")
    train_router: bool = Field(
        False, title="Train the router",
        description="Train the MoE router (the gate) in full; off, it stays frozen.")

    @field_validator("target_modules")
    @classmethod
    def _modules_without_nul(cls, modules: str | list[str]) -> str | list[str]:
        return modules if isinstance(modules, str) else [_no_nul(module) for module in modules]


class ColumnMapping(StrictModel):
    """Which columns hold the prompt, the response, a chat's messages and a system prompt,
    for a dataset that names them otherwise; unset, the usual names are looked for
    (instruction/input/output, prompt/response, messages)."""

    prompt: str | None = Field(
        None, min_length=1, max_length=200, title="Prompt column",
        description="The column holding the prompt.")
    response: str | None = Field(
        None, min_length=1, max_length=200, title="Response column",
        description="The column holding the response.")
    messages: str | None = Field(
        None, min_length=1, max_length=200, title="Messages column",
        description="The column holding a chat's messages (`[{role, content}]`); not together "
                    "with prompt or response.")
    system: str | None = Field(
        None, min_length=1, max_length=200, title="System prompt column",
        description="A column whose text becomes the system prompt.")
    # Preference pairs (objective dpo): the two answers to one prompt.
    chosen: str | None = Field(
        None, min_length=1, max_length=200, title="Chosen column",
        description="Objective dpo: the column holding the preferred answer (text, or a chat "
                    "ending with it).")
    rejected: str | None = Field(
        None, min_length=1, max_length=200, title="Rejected column",
        description="Objective dpo: the column holding the dispreferred answer (text, or a "
                    "chat ending with it).")

    @field_validator("prompt", "response", "messages", "system", "chosen", "rejected")
    @classmethod
    def _name_without_nul(cls, name: str | None) -> str | None:
        return _no_nul(name) if name is not None else None

    @model_validator(mode="after")
    def _one_shape(self) -> "ColumnMapping":
        if self.messages and (self.prompt or self.response):
            raise ValueError("set columns.messages (a chat) or columns.prompt/response "
                             "(one turn), not both")
        if (self.chosen or self.rejected) and (self.messages or self.response):
            raise ValueError("columns.chosen/rejected name a preference pair's answers; "
                             "columns.messages and columns.response are for supervised "
                             "examples: set one kind")
        return self


Objective = Literal["sft", "dpo", "grpo"]
OBJECTIVES: tuple[str, ...] = Objective.__args__
# sigmoid is DPO itself; simpo and orpo compare the policy's answers with no reference model.
PreferenceLoss = Literal["sigmoid", "ipo", "hinge", "simpo", "orpo"]
PREFERENCE_LOSSES: tuple[str, ...] = PreferenceLoss.__args__
REFERENCE_FREE_LOSSES = frozenset({"simpo", "orpo"})
# auto: the base with the adapter off (lora/qlora: no second copy), a frozen copy (full);
# precomputed: the reference log-probabilities of every pair, in one pass before step 1.
Reference = Literal["auto", "precomputed"]
REFERENCES: tuple[str, ...] = Reference.__args__


class DpoSettings(StrictModel):
    beta: float = Field(
        0.1, gt=0, le=100, title="Beta",
        description="How far the policy may move from the reference: the temperature of the "
                    "preference loss (for orpo, the weight of its odds-ratio term).")
    loss: PreferenceLoss = Field(
        "sigmoid", title="Preference loss",
        description="`sigmoid` (DPO), `ipo`, `hinge`, or the reference-free `simpo` and "
                    "`orpo`.")
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, title="Label smoothing",
        description="Loss sigmoid: the share of pairs assumed mislabelled (conservative DPO).")
    reference: Reference = Field(
        "auto", title="Reference model",
        description="`auto`: the base with the adapter off for lora/qlora (no second copy), a "
                    "frozen copy for full; `precomputed`: the reference log-probabilities "
                    "computed once, before step 1, so a full fine-tune holds one model. Not "
                    "used by simpo and orpo.")
    sft_weight: float | None = Field(
        None, ge=0, le=100, title="SFT term weight",
        description="Weight of the chosen answer's cross-entropy added to the loss (RPO; "
                    "ORPO's SFT term); unset: 1 for orpo, 0 otherwise.")
    simpo_gamma: float = Field(
        0.5, ge=0, le=100, title="SimPO target margin",
        description="Loss simpo: the margin (gamma) the chosen answer's reward must beat.")

    @property
    def sft_term_weight(self) -> float:
        if self.sft_weight is not None:
            return self.sft_weight
        return 1.0 if self.loss == "orpo" else 0.0

    @property
    def uses_reference(self) -> bool:
        return self.loss not in REFERENCE_FREE_LOSSES

    @model_validator(mode="after")
    def _reference_fits_the_loss(self) -> "DpoSettings":
        if self.reference == "precomputed" and not self.uses_reference:
            raise ValueError(f"reference precomputed: loss {self.loss} has no reference model; "
                             "leave reference auto, or pick sigmoid, ipo or hinge")
        if self.label_smoothing > 0 and self.loss != "sigmoid":
            raise ValueError(f"label_smoothing applies to loss sigmoid only, not {self.loss}")
        return self
