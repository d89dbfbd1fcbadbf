"""Which files answer a generation of each variant, and what is missing, as pure functions:
the web checks a job before it asks its worker, and the worker checks again where the run
folder is (the two may be different hosts)."""
from __future__ import annotations

from dataclasses import dataclass

from tunedeck.generation.request import Variant
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder

# What a Hugging Face model folder always has; a folder without it was never finished.
MODEL_CONFIG_FILE = "config.json"
ADAPTER_CONFIG_FILE = "adapter_config.json"


@dataclass(frozen=True)
class VariantWeights:
    """A model folder or id (the spec's model, as the trainer resolves it), and the adapter
    folder put on top of it (the adapter variant only)."""

    model_source: str
    adapter_dir: str | None = None


def variant_weights(spec: JobSpec, run: RunFolder, variant: Variant) -> VariantWeights:
    if variant == "merged":
        return VariantWeights(str(run.merged_dir))
    if variant == "adapter":
        return VariantWeights(spec.model, adapter_dir=str(run.adapter_dir))
    return VariantWeights(spec.model)


def missing_weights(spec: JobSpec, run: RunFolder, variant: Variant, *, job_id: int) -> str | None:
    """Why this job cannot answer as `variant` from `run`, naming the folder; None when its
    files are there. The base variant's model is the spec's own (its worker reads it)."""
    if variant == "adapter" and spec.method == "full":
        return (f"variant adapter: job {job_id} was a full fine-tune and has no adapter; "
                "use merged or base")
    if variant == "base":
        return None
    folder, marker = ((run.merged_dir, MODEL_CONFIG_FILE) if variant == "merged"
                      else (run.adapter_dir, ADAPTER_CONFIG_FILE))
    if not run.path.is_dir():
        return f"variant {variant}: job {job_id}'s run folder {run.path} was deleted"
    if not (folder / marker).is_file():
        return (f"variant {variant}: job {job_id}'s {variant} weights ({folder}) were deleted "
                f"or never written; try another variant")
    return None
