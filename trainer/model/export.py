"""The run's deliverables, written by rank 0: `adapter/` (LoRA, QLoRA) and `merged/` (always).

Export starts from a fresh fp32 load of the base model and copies in the trained fp32
weights the backend gathered, so the merge never lands on a bf16 copy a backend made for
training, nor (QLoRA) on the 4-bit weights the adapter was trained over: rounding the merged
sum back to NF4 would undo much of what the adapter learned. `merged/` gives the same logits
as the fp32 base + `adapter/`, up to the rounding of the one cast at the end to the spec's
`export_dtype` (auto: the base's stored dtype, so a bf16 base is not downloaded as fp32 at
twice its bytes). `merged/` gets the tokenizer training used, whose `chat_template` is the
training one (trainer/data/chat_format.py), so `apply_chat_template` on a download gives the
prompt ids training and "Try it" use. `adapter/` stays fp32 (peft's default): it is small,
and it is what an exact reapplication needs. Each folder is written beside its final name and renamed into
place: a reader sees a whole model or none.
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder

from trainer.model.export_dtype import resolve_export_dtype, torch_dtype
from trainer.model.method import apply_method, uses_adapter
from trainer.model.model_source import load_base_model

# Hugging Face's usual shard size (transformers 5 defaults to 50GB): a large merged/ is
# several files named by model.safetensors.index.json, none of them tens of GB.
MAX_SHARD_SIZE = "5GB"


def export_weights(spec: JobSpec, run: RunFolder, *, trained_state: dict[str, Any], model_source: str,
                   tokenizer) -> None:
    model = apply_method(load_base_model(model_source, trust_remote_code=spec.trust_remote_code),
                         spec)  # never quantized: see above
    load_trained_state(model, trained_state)
    if uses_adapter(spec):
        with folder_written_in_place(run.adapter_dir) as staging:
            model.save_pretrained(staging)
        model = model.merge_and_unload()
    # Once, after the fp32 merge: save_pretrained records the dtype in config.json.
    model = model.to(torch_dtype(resolve_export_dtype(spec.export_dtype, model_source)))
    model.config.use_cache = True  # the exported model is for generation
    with folder_written_in_place(run.merged_dir) as staging:
        # safetensors: transformers 5 writes nothing else
        model.save_pretrained(staging, max_shard_size=MAX_SHARD_SIZE)
        tokenizer.save_pretrained(staging)


def load_trained_state(model, trained_state: dict[str, Any]) -> None:
    """Copy the gathered weights in; every trainable parameter must be among them."""
    trainable_names = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    missing = sorted(trainable_names - trained_state.keys())
    unexpected = sorted(trained_state.keys() - model.state_dict().keys())
    if missing or unexpected:
        raise RuntimeError(f"export: gathered weights do not match the model "
                           f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    model.load_state_dict(trained_state, strict=False)


@contextmanager
def folder_written_in_place(final_dir: Path):
    """Yield a staging folder beside `final_dir`; on success, replace `final_dir` with it."""
    staging_dir = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}-", dir=final_dir.parent))
    staging_dir.chmod(0o755)  # mkdtemp's 0700 would hide the result from other readers
    try:
        yield staging_dir
        if final_dir.exists():
            shutil.rmtree(final_dir)  # a rerun of the same run folder
        staging_dir.rename(final_dir)
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)
