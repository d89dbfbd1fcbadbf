"""What every training backend answers, and the words both backends' configs share.

A backend (zero2.py, fsdp.py) is one object; code elsewhere asks it (`backend_of(spec)`)
instead of comparing the spec's backend name, so what is specific to one backend is
written in its own module only (tests/test_backend_names.py holds that rule)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunedeck.spec.fields import JobSpecFields
from tunedeck.spec.backend_sections import BackendSettings
from tunedeck.units import FP32_BYTES

if TYPE_CHECKING:
    from tunedeck.spec.job_spec import JobSpec
    from tunedeck.planner.model_shapes import ModelShape

ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8
TORCH_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ADAM_STATE_BYTES = 8  # fp32 momentum + variance per trainable parameter
# The planner's name for a backend's set-up with its offload on: "zero2_offload".
OFFLOAD_SUFFIX = "_offload"


@dataclass(frozen=True)
class ModelStates:
    """What the method makes of the model: parameter counts and the bytes of its weights
    (tunedeck.planner.memory_plan.model_states counts them; a backend shards them)."""

    parameters: int
    trainable: int
    weight_bytes_compute: float  # all weights in the compute dtype (4-bit base for QLoRA)


@dataclass(frozen=True)
class RankStates:
    """Bytes of the model states one rank holds under a backend, as the planner's breakdown
    counts them (the activations are the planner's own)."""

    params: float
    grads: float
    optimizer: float
    buffers: float  # the backend's own on the GPU: DeepSpeed's buckets, FSDP's gathered layers
    # The optimizer step's temporary copies on the GPU; None where it steps on the host.
    step: float | None
    host: float = 0.0  # what the rank offloads to host memory


def adam_step_bytes(spec: JobSpec, trainable_shard: float) -> float:
    """Torch's foreach AdamW's temporary copy in its step, for the `trainable_shard`
    parameters a rank steps: the fp32 square root of the variance (none with the fused
    kernel, `fused_optimizer`)."""
    return 0.0 if spec.fused_optimizer else FP32_BYTES * trainable_shard


class Backend:
    name: str  # the spec's `backend`, and the name of its settings section
    title: str  # for people: "DeepSpeed ZeRO-2"
    config_file: str  # the generated config's name in the run folder
    checkpoint_format: str
    # The spec field that moves the optimizer state (and more) to host memory, and its words.
    offload_field: str
    offload_words: str
    # The trainer's engine for it, "module:class" (imported there, on demand: a ZeRO-2 run
    # never loads FSDP code, an FSDP run never DeepSpeed).
    engine: str
    # The planner's words: what sits in host memory and what crosses PCIe when it offloads,
    # what its ranks wait on.
    offloaded_state_words: str
    offloaded_words: str
    collective_words: str
    # How it holds a frozen copy of the weights (DPO's reference model of a full fine-tune),
    # for the planner's reasons: "sharded over the ranks like the weights".
    reference_words: str
    # The trainer wraps each decoder layer on its own (the LoRA preview names the class).
    shards_decoder_layers: bool = False

    @property
    def preview_title(self) -> str:
        """The New job form's heading over the generated config."""
        return f"{self.config_title} (`{self.config_file}`)"

    config_title: str

    def settings(self, spec: JobSpec):
        """The spec's section of this backend (`spec.zero2`, `spec.fsdp`)."""
        return getattr(spec, self.name)

    def config(self, spec: JobSpec) -> dict[str, Any]:
        """The generated config the run folder holds and the trainer applies."""
        raise NotImplementedError

    def strategy(self, offloaded: bool) -> str:
        """The planner's name for this backend's set-up: "zero2", "zero2_offload"."""
        return self.name + OFFLOAD_SUFFIX if offloaded else self.name

    @property
    def strategies(self) -> tuple[str, str]:
        """Its set-ups the planner counts: on the GPUs, then offloaded."""
        return self.strategy(False), self.strategy(True)

    def state_bytes_per_rank(self, spec: JobSpec, states: ModelStates, shape: ModelShape,
                             ranks: int, *, offloaded: bool) -> RankStates:
        """How this backend spreads the weights, gradients and optimizer state of `states`
        over `ranks` (and, `offloaded`, into host memory): one rank's bytes, by the
        planner's convention (tunedeck/planner/memory_plan.py)."""
        raise NotImplementedError

    def reference_bytes_per_rank(self, spec: JobSpec, parameters: float, ranks: int, *,
                                 offloaded: bool) -> tuple[float, float]:
        """(bytes on the GPU, bytes in host memory) one rank holds of a frozen copy of
        `parameters` weights in the compute dtype, held as this backend holds the model's
        weights: the reference model of a DPO full fine-tune with reference auto. Frozen,
        it has no gradients and no optimizer state."""
        raise NotImplementedError

    def forward_gather_bytes(self, spec: JobSpec, parameters: float) -> float:
        """Bytes each rank gathers for one more forward, without backward, of a model of
        `parameters` held as this backend holds the weights (DPO's reference forward, every
        micro-batch); 0 where every rank holds the weights whole."""
        return 0.0

    def unsupported_method_note(self, method: str | None) -> str | None:
        """The planner's note on a method this backend cannot train (`method_problem`
        says why at length), or None."""
        return None

    def communication_bytes(self, spec: JobSpec, parameters: float,
                            trainable: float) -> tuple[float, float]:
        """(bytes each rank moves in collectives per micro-batch, once per step), for a
        model of `parameters` of which `trainable` train."""
        raise NotImplementedError

    def offload_traffic(self, spec: JobSpec, parameters_shard: float,
                        trainable_shard: float) -> tuple[float, float]:
        """Offloaded, a rank's step: (bytes it moves over PCIe, parameters its CPU optimizer
        updates a second), for its shard of the parameters and of the trainable ones."""
        raise NotImplementedError

    def offloaded(self, spec: JobSpec) -> bool:
        return getattr(self.settings(spec), self.offload_field.partition(".")[2])

    def with_offload(self, spec: JobSpec) -> JobSpec:
        return spec.model_copy(update={self.name: self.settings(spec).model_copy(
            update={self.offload_field.partition(".")[2]: True})})

    @property
    def section(self) -> type[BackendSettings]:
        """The spec's section class of this backend, which holds what the spec's own rules
        need of it (its compute dtype, the methods it refuses)."""
        return JobSpecFields.model_fields[self.name].annotation

    def method_problem(self, method: str | None) -> str | None:
        """Why this backend cannot train `method`, or None."""
        return self.section.method_problem(method)

    def cpu_precision_problem(self, precision: str | None) -> str | None:
        """Why `precision` needs a GPU under this backend, or None: a host without one
        refuses the job before it starts."""
        return None

    def compiles(self, spec: JobSpec) -> bool:
        """The job runs `torch.compile` for this backend."""
        return False

    def smaller_buckets(self, spec: JobSpec) -> tuple[dict, str] | None:
        """The spec changes (dotted fields) and their words for smaller communication
        buckets, a set-up the planner tries on a small card; None when there are none."""
        return None
