"""Pure generators: the backend's config (its own module's, tunedeck/backends/), the trainer's
settings (tunedeck/training_plan.py's plan) and the torchrun argv.

Each is a function of the job spec alone (no I/O, no environment), so the form's preview,
the API's `/config`, the run folder and the trainer all see the same bytes.
"""
from __future__ import annotations

from typing import Any

from tunedeck.backends import backend_of
from tunedeck.run_folder import LOGS_DIR, RANK_LOGS_DIR
from tunedeck.spec.job_spec import JobSpec
from tunedeck.training_plan import (attention_implementation, kernels_preview,
                                    objective_settings, quantization_config)
from tunedeck.training_steps import (BatchLayout, LearningRateSchedule, checkpoint_count,
                                     eval_count, run_length)


def trainer_settings(spec: JobSpec) -> dict[str, Any]:
    """What the trainer does around the backend, led by the objective, as the preview and
    /api/jobs/{id}/config show it: each part the answer of the function the ranks run
    (tunedeck/training_steps.py, tunedeck/training_plan.py), not a description of it."""
    layout = BatchLayout.of(spec)
    total_steps = spec.max_steps  # None for epochs: known once the data is tokenized
    return {
        **objective_settings(spec),
        "method": spec.method,
        "precision": spec.precision,
        "quantization": quantization_config(spec),
        # Hugging Face gradient checkpointing (non-reentrant), under either backend.
        "activation_checkpointing": spec.activation_checkpointing,
        "seed": spec.seed,
        "batch": layout.as_json(),
        "steps": run_length(spec, layout),
        "lr_schedule": LearningRateSchedule.of(spec).as_json(),
        "packing": spec.packing,
        # The speed options (trainer/speed/): what the model runs on, each a spec field.
        "kernels": kernels_preview(spec),
        "attention": {"spec": spec.attention,
                      "attn_implementation": attention_implementation(spec)},
        "padding_free": spec.padding_free,
        "fused_optimizer": spec.fused_optimizer,
        "eval": ({"split": spec.eval_split, "dataset": spec.eval_dataset,
                  "every_steps": spec.eval_every_steps,
                  "runs": None if total_steps is None else eval_count(
                      total_steps=total_steps, every_steps=spec.eval_every_steps)}
                 if spec.has_eval else None),
        "checkpoints": ({"every_steps": spec.checkpoint_every_steps,
                         "keep": spec.keep_checkpoints,
                         "format": backend_of(spec).checkpoint_format,
                         "saves": None if total_steps is None else checkpoint_count(
                             total_steps=total_steps, every_steps=spec.checkpoint_every_steps)}
                        if spec.checkpoint_every_steps else None),
    }


def backend_config(spec: JobSpec) -> dict[str, Any]:
    return backend_of(spec).config(spec)


def build_torchrun_argv(spec: JobSpec, run_dir: str, *, torchrun: str = "torchrun",
                        resume: bool = False, node_rank: int = 0, rendezvous: str | None = None,
                        job_id: int | None = None, start_timeout_seconds: float = 300,
                        trainer_module: str = "trainer") -> list[str]:
    """The exact launch command; `torchrun` may be an absolute path to the worker's own.
    `trainer_module` is what each rank runs (a bench's fake trainer; TuneDeck's otherwise).
    `resume` continues from the run folder's latest complete checkpoint. A job on several
    nodes runs this once per node: `rendezvous` ("host:port") is where node 0 hosts the
    store. The static rendezvous (a c10d TCPStore on node 0) keeps ranks in node order, so
    node 0 holds rank 0 and writes the outputs; a node missing after
    `start_timeout_seconds` makes every node give up."""
    if spec.num_nodes == 1:
        nodes = ["--standalone", "--nnodes", "1"]
    else:
        nodes = ["--nnodes", str(spec.num_nodes), "--node-rank", str(node_rank),
                 "--rdzv-backend", "static", "--rdzv-endpoint", str(rendezvous),
                 "--rdzv-id", f"tunedeck-job-{job_id}",
                 "--rdzv-conf", f"timeout={int(start_timeout_seconds)}"]
    return [
        torchrun,
        *nodes,
        "--nproc_per_node",
        str(spec.num_gpus),
        # Each rank's output also in its own files (tee keeps the combined torchrun.log),
        # so a failed job can show the log of the rank that failed first.
        "--log-dir",
        f"{run_dir}/{LOGS_DIR}/{RANK_LOGS_DIR}",
        "--tee",
        "3",
        "-m",
        trainer_module,
        "--run-dir",
        str(run_dir),
        *(["--resume"] if resume else []),
    ]
