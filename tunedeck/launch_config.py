"""Pure generators: the backend's config (its own module's, tunedeck/backends/), the trainer's
settings and the torchrun argv.

Each is a function of the job spec alone (no I/O, no environment), so the form's preview,
the API's `/config`, the run folder and the trainer all see the same bytes.
"""
from __future__ import annotations

from typing import Any

from tunedeck.backends import backend_of
from tunedeck.backends.base import TORCH_DTYPE_NAMES
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import LOGS_DIR, RANK_LOGS_DIR

# The spec's attention -> transformers' attn_implementation.
ATTENTION_IMPLEMENTATIONS = {"sdpa": "sdpa", "flash": "flash_attention_2"}


def quantization_config(spec: JobSpec) -> dict[str, Any] | None:
    """QLoRA's bitsandbytes 4-bit settings (Hugging Face `BitsAndBytesConfig` keywords)."""
    if spec.method != "qlora":
        return None
    return {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
        "bnb_4bit_compute_dtype": TORCH_DTYPE_NAMES[spec.precision],
    }


def trainer_settings(spec: JobSpec) -> dict[str, Any]:
    """What the trainer does around the backend, in the same words the preview shows."""
    return {
        "method": spec.method,
        "quantization": quantization_config(spec),
        # Hugging Face gradient checkpointing (non-reentrant), under either backend.
        "activation_checkpointing": spec.activation_checkpointing,
        "precision": spec.precision,
        "seed": spec.seed,
        "training_length": ({"max_steps": spec.max_steps} if spec.max_steps is not None
                            else {"epochs": spec.epochs}),
        "lr_schedule": {"type": spec.lr_schedule, "peak": spec.learning_rate,
                        "warmup_steps": spec.warmup_steps},
        "packing": spec.packing,
        # The speed options (trainer/speed/): what the model runs on, each a spec field.
        "kernels": spec.kernels,
        "attention": ATTENTION_IMPLEMENTATIONS[spec.attention],
        "padding_free": spec.padding_free,
        "fused_optimizer": spec.fused_optimizer,
        "eval": ({"split": spec.eval_split, "dataset": spec.eval_dataset,
                  "every_steps": spec.eval_every_steps} if spec.has_eval else None),
        "checkpoints": ({"every_steps": spec.checkpoint_every_steps,
                         "keep": spec.keep_checkpoints,
                         "format": backend_of(spec).checkpoint_format}
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
