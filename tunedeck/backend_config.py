"""Pure generators: the DeepSpeed ZeRO-2 config, the FSDP settings and the torchrun argv.

Each is a function of the job spec alone (no I/O, no environment), so the form's preview,
the API's `/config`, the run folder and the trainer all see the same bytes.
"""
from __future__ import annotations

from typing import Any

from tunedeck.job_spec import JobSpec
from tunedeck.run_folder import LOGS_DIR, RANK_LOGS_DIR

ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8

TORCH_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# The spec's attention -> transformers' attn_implementation.
ATTENTION_IMPLEMENTATIONS = {"sdpa": "sdpa", "flash": "flash_attention_2"}


def zero2_config(spec: JobSpec) -> dict[str, Any]:
    """The DeepSpeed JSON for a ZeRO-2 run of this spec."""
    zero_optimization: dict[str, Any] = {
        "stage": 2,
        "overlap_comm": spec.zero2.overlap_comm,
        "contiguous_gradients": spec.zero2.contiguous_gradients,
        "reduce_scatter": True,
        "reduce_bucket_size": spec.zero2.reduce_bucket_size,
        "allgather_bucket_size": spec.zero2.allgather_bucket_size,
    }
    if spec.zero2.offload_optimizer:
        zero_optimization["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": spec.micro_batch_size,
        "gradient_accumulation_steps": spec.grad_accum,
        "train_batch_size": spec.micro_batch_size * spec.grad_accum * spec.world_size,
        # 0 turns DeepSpeed's clipping off, as it does the spec's.
        "gradient_clipping": spec.max_grad_norm,
        "zero_optimization": zero_optimization,
        **_deepspeed_precision(spec.precision),
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": spec.learning_rate,
                "betas": list(ADAM_BETAS),
                "eps": ADAM_EPSILON,
                "weight_decay": spec.weight_decay,
                # With offload DeepSpeed must step its own CPU Adam; otherwise torch's
                # AdamW runs on any accelerator without compiling FusedAdam first.
                "torch_adam": not spec.zero2.offload_optimizer,
                # DeepSpeed hands the keys it does not know to torch's AdamW: fused=True is
                # its one-kernel step, as DeepSpeed's FusedAdam is, with no op to compile
                # (FusedAdam JIT-builds with nvcc, which a pip-installed torch lacks).
                # Offloaded, DeepSpeed steps its own CPU Adam, which takes no such key.
                **({"fused": True} if spec.fused_optimizer and not spec.zero2.offload_optimizer
                   else {}),
            },
        },
        # The trainer sets the learning rate each step from one schedule for both backends.
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }


def _deepspeed_precision(precision: str) -> dict[str, Any]:
    if precision == "bf16":
        return {"bf16": {"enabled": True}}
    if precision == "fp16":
        # loss_scale 0 selects dynamic loss scaling.
        return {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}}
    return {}


def fsdp_settings(spec: JobSpec) -> dict[str, Any]:
    """How the trainer applies FSDP2 `fully_shard`, as plain data the preview can show."""
    return {
        "api": "fully_shard (FSDP2)",
        "wrap": ["each decoder layer", "root module"],
        "sharding_strategy": spec.fsdp.sharding_strategy,
        # FSDP2 spells SHARD_GRAD_OP as keeping parameters gathered after forward.
        "reshard_after_forward": spec.fsdp.sharding_strategy != "shard_grad_op",
        "mixed_precision": {
            "param_dtype": TORCH_DTYPE_NAMES[spec.fsdp.param_dtype or spec.precision],
            "reduce_dtype": TORCH_DTYPE_NAMES[spec.fsdp.reduce_dtype],
            "buffer_dtype": TORCH_DTYPE_NAMES[spec.fsdp.buffer_dtype],
            # Always: a bf16-only run can fail to converge where DeepSpeed (fp32 masters)
            # converges.
            "master_weights_dtype": "float32",
        },
        # fp16 needs loss scaling: FSDP2's gradients are scaled by a sharded grad scaler.
        "loss_scaling": "dynamic" if (spec.fsdp.param_dtype or spec.precision) == "fp16" else "none",
        "backward_prefetch": spec.fsdp.backward_prefetch,
        "forward_prefetch": spec.fsdp.forward_prefetch,
        "compile": spec.fsdp.compile,
        "cpu_offload": spec.fsdp.cpu_offload,
        "activation_checkpointing": spec.fsdp.activation_checkpointing,
        "gradient_clipping": spec.max_grad_norm,
        "micro_batch_size": spec.micro_batch_size,
        "gradient_accumulation_steps": spec.grad_accum,
        "optimizer": {
            "type": "AdamW",
            "lr": spec.learning_rate,
            "betas": list(ADAM_BETAS),
            "eps": ADAM_EPSILON,
            "weight_decay": spec.weight_decay,
            # torch.optim.AdamW(fused=True): one kernel over FSDP2's per-parameter shards.
            "fused": spec.fused_optimizer,
        },
    }


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
                         "format": "deepspeed" if spec.backend == "zero2"
                         else "torch.distributed.checkpoint"}
                        if spec.checkpoint_every_steps else None),
    }


def backend_config(spec: JobSpec) -> dict[str, Any]:
    return zero2_config(spec) if spec.backend == "zero2" else fsdp_settings(spec)


def build_torchrun_argv(spec: JobSpec, run_dir: str, *, torchrun: str = "torchrun",
                        resume: bool = False, node_rank: int = 0, rendezvous: str | None = None,
                        job_id: int | None = None, start_timeout_seconds: float = 300) -> list[str]:
    """The exact launch command; `torchrun` may be an absolute path to the worker's own.
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
        "trainer",
        "--run-dir",
        str(run_dir),
        *(["--resume"] if resume else []),
    ]
