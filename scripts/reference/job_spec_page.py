"""job-spec.md: every field of `JobSpec.model_json_schema()`, section by section (following its
$refs into LoRA, columns, ZeRO-2, FSDP), with the label and description each field carries in
the spec itself, and the rules across fields (SPEC_RULES, which a schema cannot say)."""
from __future__ import annotations

from typing import Any

from .markdown import GENERATED, anchor, code, paragraphs, table
from .schema_fields import ref_name, schema_constraints, schema_default, schema_type

# Rules the validators of tunedeck/spec/job_spec.py and of its sections (sections.py,
# backend_sections.py) apply across fields (a schema cannot say them); each breaks with a 422
# naming the field.
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
    "`objective: grpo`: `grpo.num_generations` divides `micro_batch_size` × `grad_accum` (the "
    "completions a rank samples a step, in whole groups); `grpo.max_completion_length` is "
    "below `seq_len` (a prompt and its completion share a row); no `packing`, `padding_free`, "
    "`eval_split` or `eval_dataset`; no `columns.response`/`chosen`/`rejected` (the rewards "
    "name the columns they read, and the worker refuses data that lacks one).",
    "`grpo.epsilon_high`, when set, is at least `grpo.epsilon`.",
    "No text field may hold a NUL character.",
)


def _field_rows(model: str, schema: dict[str, Any], link) -> list[list[str]]:
    required = set(schema.get("required", []))
    rows = []
    for name in sorted(schema.get("properties", {})):
        field = schema["properties"][name]
        if not field.get("description"):
            raise SystemExit(f"write_reference: {model}.{name} has no description: give the "
                             "field its title= and description= in the spec")
        rows.append([code(name), schema_type(field, link), schema_default(field, name in required),
                     schema_constraints(field), f"**{field['title']}.** {field['description']}"])
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
    from tunedeck.spec.job_spec import JobSpec

    schema = JobSpec.model_json_schema()
    schemas = {"JobSpec": schema, **schema.get("$defs", {})}
    prefixes = {"JobSpec": "", "LoraSettings": "lora.", "Zero2Settings": "zero2.",
                "FsdpSettings": "fsdp.", "ColumnMapping": "columns.", "DpoSettings": "dpo.",
                "GrpoSettings": "grpo."}

    def link(name: str) -> str:
        return f"[{name}](#{anchor(name)})"

    lines = [GENERATED, "", "# Job spec reference", "",
             "A job spec is YAML or JSON. The New job form, `POST /api/jobs`, `tunedeck submit` "
             "and the database all hold the same spec, and `spec.json` in the run folder is what "
             "the trainer reads. Every section is strict: an unknown key is an error, as is a "
             "value outside the constraint below, and each error names its field (`lora.r: ...`). "
             "Every file in `examples/` is a valid spec; the [user guide](../user-guide.md) says "
             "what the fields do together.", ""]
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
                       _field_rows(model, model_schema, link))
        lines += [""]
    lines += ["## Rules across fields", "",
              "Checked by the spec's validators; each breaks as an error naming the field.", ""]
    lines += [f"- {rule}" for rule in SPEC_RULES]
    lines = [line for index, line in enumerate(lines)
             if not (line == "" and index and lines[index - 1] == "")]
    return "\n".join(lines).rstrip("\n") + "\n"
