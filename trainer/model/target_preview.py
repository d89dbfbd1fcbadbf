"""What a spec trains on its model, without loading a weight: the model is built on the meta
device from its config.json, the trainer's own method is applied to it (trainer.model.method), and
the adapted names and trainable parameters are read back, so the answer is the trainer's.

The worker asks `model_family_problem` before a job takes its GPUs (a family the trainer
cannot adapt or shard is refused there, by name). The form and `POST /api/lora-targets` run
`python -m trainer.model.target_preview` (the spec's JSON on stdin, the answer's on stdout) in a
subprocess: the web process itself never imports torch.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tunedeck.backends import backend_of
from tunedeck.spec.job_spec import JobSpec

from trainer.model.lora_targets import resolve_lora_targets
from trainer.model.method import apply_method, trainable_parameter_count, uses_adapter
from trainer.model.model_source import resolve_model_source


def build_skeleton(source: str, *, trust_remote_code: bool = False, local_only: bool = False):
    """The model of `source` (a folder or hub id) with every tensor on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code,
                                        local_files_only=local_only)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code,
                                                dtype=torch.float32)


def preview_targets(spec: JobSpec, *, local_only: bool = False) -> dict:
    """The spec's adapted modules and expert weights, routers, trainable and total
    parameter counts, and (fsdp) the decoder layers it shards one by one."""
    skeleton = build_skeleton(resolve_model_source(spec.model),
                              trust_remote_code=spec.trust_remote_code, local_only=local_only)
    total = sum(parameter.numel() for parameter in skeleton.parameters())
    report = {"model": spec.model, "model_type": skeleton.config.model_type,
              "architecture": type(skeleton).__name__, "method": spec.method,
              "total_parameters": total}
    if backend_of(spec).shards_decoder_layers:
        from trainer.backends.fsdp_sharding import decoder_layers

        layers = decoder_layers(skeleton)
        report["decoder_layers"] = {"class": type(layers[0]).__name__, "count": len(layers)}
    if not uses_adapter(spec):
        return {**report, "trainable_parameters": total}
    targets = resolve_lora_targets(skeleton, spec.lora)
    adapted = apply_method(skeleton, spec)
    return {**report, **targets.as_json(),
            "trainable_parameters": trainable_parameter_count(adapted)}


def model_family_problem(spec: JobSpec) -> str | None:
    """Why the trainer cannot train this spec's local model folder, naming its family and
    what to do; None when it can. Not asked of the built-in model (tested on every commit),
    of a hub id (the ranks download it, and fail there by name), nor of a model that needs
    its own code to be built (trust_remote_code: never run by the worker itself)."""
    if spec.trust_remote_code or not Path(spec.model).expanduser().is_dir():
        return None
    try:
        preview_targets(spec, local_only=True)
    except (OSError, ValueError, KeyError, NotImplementedError) as error:
        return f"model {spec.model} ({family_of(spec.model)}): {error}"
    except Exception as error:  # noqa: BLE001 - transformers/peft on an odd config: a refusal, not a stuck job
        return (f"model {spec.model} ({family_of(spec.model)}): cannot be built or adapted "
                f"({type(error).__name__}: {error})")
    return None


def family_of(model: str) -> str:
    """The config's model_type, or "unknown family" where even that cannot be read."""
    config_file = Path(model).expanduser() / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    family = config.get("model_type") if isinstance(config, dict) else None
    return family or "unknown family"


def answer(request_json: str) -> tuple[dict, int]:
    """The preview of one spec's JSON, or {"error": ...} and exit status 2."""
    try:
        return preview_targets(JobSpec.model_validate_json(request_json)), 0
    except (OSError, ValueError, KeyError, NotImplementedError) as error:
        return {"error": str(error)}, 2


def main() -> int:
    """Spec JSON on stdin; on stdout the preview, or {"error": ...} (exit status 2). With
    --serve, one spec a line and one answer a line, until stdin closes (the web's resolver:
    the imports are paid once)."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "--serve" not in sys.argv[1:]:
        report, status = answer(sys.stdin.read())
        print(json.dumps(report))
        return status
    from tunedeck.services.line_server import serve_lines

    serve_lines(lambda spec: answer(json.dumps(spec))[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
