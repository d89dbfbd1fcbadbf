"""job-spec.md: every field of `JobSpec.model_json_schema()`, section by section (following its
$refs into LoRA, columns, ZeRO-2, FSDP), and the rules across fields. Owns SPEC_FIELD_NOTES,
the description of each field whose code gives none, and SPEC_RULES."""
from __future__ import annotations

from typing import Any

from .markdown import GENERATED, anchor, code, paragraphs, table
from .schema_fields import ref_name, schema_constraints, schema_default, schema_type

# What each field means, in the words of the comments beside it in tunedeck/job_spec.py and
# tunedeck/spec_sections.py (a field's own `description=` in the code wins over its note).
SPEC_FIELD_NOTES: dict[str, str] = {
    "JobSpec.name": "A name for the job's page and table; unset: METHOD-BACKEND.",
    "JobSpec.model": "The base model: `builtin:tiny-llama` (a tiny random Llama made offline), "
                     "a Hugging Face id, or an absolute local folder inside the allowed roots.",
    "JobSpec.dataset": "The training data: `builtin:arithmetic`, a .jsonl, .json, .jsonl.gz, "
                       ".parquet or .csv file, a dataset folder, or a Hugging Face dataset id.",
    "JobSpec.dataset_config": "A Hugging Face dataset id's (or dataset folder's) configuration.",
    "JobSpec.dataset_split": "The split of an id or a folder, e.g. `train[:10%]`; a single file "
                             "is read whole and takes no split.",
    "JobSpec.columns": "The dataset's own column names where they differ from the usual ones "
                       "(`eval_dataset` is read with them too).",
    "JobSpec.method": "`lora` (an adapter), `qlora` (an adapter on a 4-bit NF4 base; zero2 only) "
                      "or `full` (every weight).",
    "JobSpec.backend": "DeepSpeed ZeRO-2 or PyTorch FSDP.",
    "JobSpec.num_gpus": "Processes per node: GPUs, or CPU ranks on a host without GPUs.",
    "JobSpec.num_nodes": "Nodes, each run by its own worker.",
    "JobSpec.max_steps": "Optimizer steps to train; set this or `epochs`.",
    "JobSpec.epochs": "Passes over the training rows; set this or `max_steps`.",
    "JobSpec.learning_rate": "The peak learning rate.",
    "JobSpec.warmup_steps": "Steps of linear warmup before the schedule.",
    "JobSpec.lr_schedule": "After warmup: cosine or linear decay, or constant.",
    "JobSpec.weight_decay": "AdamW's decoupled weight decay.",
    "JobSpec.max_grad_norm": "Gradients are clipped to this global norm; 0 turns clipping off.",
    "JobSpec.micro_batch_size": "Rows per rank per forward.",
    "JobSpec.grad_accum": "Micro-batches accumulated into one optimizer step.",
    "JobSpec.seq_len": "Tokens per row; longer examples are truncated.",
    "JobSpec.precision": "Training precision (fp16 uses loss scaling).",
    "JobSpec.seed": "Seeds initialisation, data order and dropout.",
    "JobSpec.eval_split": "Fraction of the dataset held out for the eval loss (0: none); "
                          "not together with `eval_dataset`.",
    "JobSpec.eval_dataset": "A separate eval dataset, in any form `dataset` takes; not together "
                            "with `eval_split`.",
    "JobSpec.eval_dataset_split": "`eval_dataset`'s split when it is a Hugging Face id or a "
                                  "dataset folder.",
    "JobSpec.eval_every_steps": "Measure the eval loss every N optimizer steps and at the end "
                                "(0: at the end only); needs an eval set.",
    "JobSpec.packing": "Pack several examples into each `seq_len` row (fewer pad tokens; "
                       "attention still stops at each example's boundary).",
    "JobSpec.kernels": "GPU speed: `liger` patches the model with Liger Kernel's RMSNorm, RoPE, "
                       "SwiGLU and fused linear cross-entropy (the logits are never made whole; "
                       "the memory plan drops them). Needs a CUDA GPU with `liger-kernel` "
                       "installed, and a model family Liger patches.",
    "JobSpec.attention": "The attention kernel: `sdpa` (PyTorch's scaled_dot_product_attention, "
                         "transformers' default) or `flash` (flash-attn 2, bf16/fp16 only; "
                         "needs a CUDA GPU with `flash-attn` installed).",
    "JobSpec.padding_free": "Lay each micro-batch's rows end to end in one row with no pad "
                            "token; position ids restart at every example, so examples still "
                            "do not see each other. Meant for `flash`: under `sdpa` the row's "
                            "block mask costs (micro-batch x seq_len)^2 bytes, and a bias of that "
                            "size in the compute dtype for each layer.",
    "JobSpec.fused_optimizer": "AdamW's fused kernel (`torch.optim.AdamW(fused=True)`), under "
                               "FSDP and, through DeepSpeed's `torch_adam`, ZeRO-2 (not with "
                               "`zero2.offload_optimizer`, which steps DeepSpeed's CPU Adam).",
    "JobSpec.checkpoint_every_steps": "Save a checkpoint every N optimizer steps (0: none; "
                                      "Resume needs one).",
    "JobSpec.keep_checkpoints": "Keep the newest K checkpoints.",
    "JobSpec.queue": "The worker queue to run on (workers serve the queues "
                     "`TUNEDECK_WORKER_QUEUES` names); unset: `default`.",
    "JobSpec.host": "Pin the job to one host; unset: any host of the queue.",
    "JobSpec.max_restarts": "When the job's worker is lost, queue it again (from its latest "
                            "checkpoint, on any worker) up to N times; 0: it fails as worker lost.",
    "JobSpec.trust_remote_code": "Let transformers run Python code shipped with the model; only "
                                 "an admin may submit a spec with it on.",
    "JobSpec.export_dtype": "The merged weights' dtype (the merge itself runs in fp32). auto: "
                            "what the base stores (its safetensors headers, else its config.json, "
                            "else fp32).",
    "JobSpec.report_to": "Trackers the worker also writes the job's metrics to, each at most "
                         "once: tensorboard (event files in the run folder's tensorboard/), "
                         "mlflow (a run on TUNEDECK_MLFLOW_TRACKING_URI), wandb (a run, "
                         "offline unless TUNEDECK_WANDB_MODE=online). Empty: none.",
    "JobSpec.lora": "The adapter's settings (methods lora and qlora).",
    "JobSpec.zero2": "DeepSpeed ZeRO-2's settings (backend zero2).",
    "JobSpec.fsdp": "FSDP's settings (backend fsdp).",
    "ColumnMapping.prompt": "The column holding the prompt.",
    "ColumnMapping.response": "The column holding the response.",
    "ColumnMapping.messages": "The column holding a chat's messages (`[{role, content}]`); not "
                              "together with prompt or response.",
    "ColumnMapping.system": "A column whose text becomes the system prompt.",
    "LoraSettings.r": "The adapter's rank.",
    "LoraSettings.alpha": "LoRA's scaling numerator (the update is scaled by alpha / r).",
    "LoraSettings.dropout": "Dropout on the adapters' input (not on fused expert weights).",
    "LoraSettings.target_modules": "`all-linear` (every linear layer but the output head) or a "
                                   "list of module names.",
    "LoraSettings.experts": "Mixture-of-experts models: adapters on the routed experts' fused "
                            "weights too (without dropout); off leaves them frozen.",
    "LoraSettings.train_router": "Train the MoE router (the gate) in full; off, it stays frozen.",
    "Zero2Settings.offload_optimizer": "Keep the optimizer state in host memory and step it on "
                                       "the CPU (DeepSpeed's CPU Adam): fits smaller cards, slower.",
    "Zero2Settings.overlap_comm": "Overlap the gradient reduction with the backward pass.",
    "Zero2Settings.contiguous_gradients": "Copy gradients into one contiguous buffer as they are "
                                          "produced (less fragmentation).",
    "Zero2Settings.reduce_bucket_size": "Elements per gradient reduce bucket: smaller saves "
                                        "memory, larger overlaps communication better.",
    "Zero2Settings.allgather_bucket_size": "Elements per parameter all-gather bucket.",
    "Zero2Settings.activation_checkpointing": "Recompute each decoder layer's activations in "
                                              "backward: less activation memory for about a "
                                              "third more compute.",
    "FsdpSettings.sharding_strategy": "`full_shard`: parameters resharded after forward (least "
                                      "memory); `shard_grad_op`: kept gathered until backward "
                                      "(less communication); `hybrid_shard`: refused for now.",
    "FsdpSettings.cpu_offload": "Keep the sharded parameters and optimizer state in host memory.",
    "FsdpSettings.activation_checkpointing": "Recompute each decoder layer's activations in "
                                             "backward.",
    "FsdpSettings.param_dtype": "The forward/backward compute dtype; unset, it follows "
                                "`precision`. Master weights stay fp32 whatever it says.",
    "FsdpSettings.reduce_dtype": "The dtype gradients are reduce-scattered in.",
    "FsdpSettings.buffer_dtype": "The dtype unsharded buffers (e.g. rotary frequencies) are kept in.",
    "FsdpSettings.backward_prefetch": "Issue the next layer's all-gather before the current "
                                      "layer's backward (hides communication, one more gathered "
                                      "layer in memory).",
    "FsdpSettings.forward_prefetch": "In forward, issue the next all-gather before the current "
                                     "layer runs.",
    "FsdpSettings.compile": "`torch.compile` each decoder layer before sharding it.",
}

# Rules the validators of tunedeck/job_spec.py and tunedeck/spec_sections.py apply across
# fields (a schema cannot say them); each breaks with a 422 naming the field.
SPEC_RULES = (
    "Exactly one of `max_steps` and `epochs`.",
    "`method: qlora` needs `backend: zero2`.",
    "`eval_split` or `eval_dataset`, not both; `eval_every_steps` above 0 needs one of them.",
    "`eval_dataset` may not be the training data itself (the same file, or the same id and split).",
    "A single data file (.jsonl, .json, .jsonl.gz, .parquet, .csv) is read whole: "
    "`dataset_split` / `eval_dataset_split` keep their defaults for it.",
    "`host` pins a job to one host, so it cannot go with `num_nodes` above 1.",
    "`fsdp.sharding_strategy: hybrid_shard` is refused (it needs several nodes and a node x GPU "
    "mesh that is not built).",
    "`columns.messages` or `columns.prompt`/`response`, not both.",
    "`attention: flash` needs a bf16 or fp16 compute dtype, and with `packing: true` and "
    "`micro_batch_size` above 1 it needs `padding_free: true` (flash keeps a packed row's "
    "examples apart only in a one-row batch).",
    "`fused_optimizer` under `backend: fsdp` needs a bf16 or fp32 compute dtype (torch's fused "
    "AdamW fails on FSDP's sharded fp16 grad scaler).",
    "Under `zero2.offload_optimizer` the optimizer is DeepSpeed's CPU Adam whatever "
    "`fused_optimizer` says (it is vectorised already).",
    "No text field may hold a NUL character.",
)


def _field_rows(model: str, schema: dict[str, Any], notes: dict[str, str], link,
                used: set[str]) -> list[list[str]]:
    required = set(schema.get("required", []))
    rows = []
    for name in sorted(schema.get("properties", {})):
        field = schema["properties"][name]
        key = f"{model}.{name}"
        description = field.get("description") or notes.get(key)
        if not description:
            raise SystemExit(f"write_reference: no description for {key}: give the field a "
                             f"description= or add it to SPEC_FIELD_NOTES")
        used.add(key)
        rows.append([code(name), schema_type(field, link), schema_default(field, name in required),
                     schema_constraints(field), description])
    return rows


def _models_in_order(root: str, schemas: dict[str, dict[str, Any]]) -> list[str]:
    """`root`, then every model it refers to, breadth first, each once."""
    order, queue = [], [root]
    while queue:
        name = queue.pop(0)
        if name in order:
            continue
        order.append(name)
        found: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if "$ref" in node:
                    found.append(ref_name(node["$ref"]))
                for key in sorted(node):
                    walk(node[key])
            elif isinstance(node, list):
                for item in node:
                    walk(item)

        walk(schemas[name].get("properties", {}))
        queue += sorted(dict.fromkeys(found))
    return order


def render() -> str:
    from tunedeck.job_spec import JobSpec

    schema = JobSpec.model_json_schema()
    schemas = {"JobSpec": schema, **schema.get("$defs", {})}
    prefixes = {"JobSpec": "", "LoraSettings": "lora.", "Zero2Settings": "zero2.",
                "FsdpSettings": "fsdp.", "ColumnMapping": "columns."}

    def link(name: str) -> str:
        return f"[{name}](#{anchor(name)})"

    lines = [GENERATED, "", "# Job spec reference", "",
             "A job spec is YAML or JSON. The New job form, `POST /api/jobs`, `tunedeck submit` "
             "and the database all hold the same spec, and `spec.json` in the run folder is what "
             "the trainer reads. Every section is strict: an unknown key is an error, as is a "
             "value outside the constraint below, and each error names its field (`lora.r: ...`). "
             "Every file in `examples/` is a valid spec; the [user guide](../user-guide.md) says "
             "what the fields do together.", ""]
    used: set[str] = set()
    for model in _models_in_order("JobSpec", schemas):
        model_schema = schemas[model]
        prefix = prefixes.get(model, "")
        title = model if model == "JobSpec" else f"{model}"
        lines += [f"## {title}", ""]
        if model != "JobSpec":
            lines += [f"The `{prefix.rstrip('.')}` section." if prefix else "", ""]
        if model_schema.get("description"):
            lines += [paragraphs(model_schema["description"]), ""]
        lines += table(["field", "type", "default", "constraint", "description"],
                       _field_rows(model, model_schema, SPEC_FIELD_NOTES, link, used))
        lines += [""]
    stale = sorted(set(SPEC_FIELD_NOTES) - used)
    if stale:
        raise SystemExit(f"write_reference: SPEC_FIELD_NOTES names fields the spec lacks: {stale}")
    lines += ["## Rules across fields", "",
              "Checked by the spec's validators; each breaks as an error naming the field.", ""]
    lines += [f"- {rule}" for rule in SPEC_RULES]
    lines = [line for index, line in enumerate(lines)
             if not (line == "" and index and lines[index - 1] == "")]
    return "\n".join(lines).rstrip("\n") + "\n"
