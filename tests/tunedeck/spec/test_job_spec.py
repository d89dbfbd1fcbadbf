import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tunedeck.spec.job_spec import JobSpec

from tunedeck.spec.text import (format_validation_error, load_spec_file, parse_spec_text,
                                spec_as_yaml)

REPO = Path(__file__).resolve().parents[3]

CONTRACT_EXAMPLE = """
name: arithmetic-lora
model: builtin:tiny-llama
dataset: builtin:arithmetic
method: lora
backend: zero2
num_gpus: 2
num_nodes: 1
max_steps: 30
learning_rate: 2.0e-4
micro_batch_size: 4
grad_accum: 1
seq_len: 256
precision: bf16
lora: {r: 16, alpha: 32, dropout: 0.05, target_modules: all-linear}
zero2: {offload_optimizer: false, overlap_comm: true, contiguous_gradients: true}
fsdp: {cpu_offload: false, activation_checkpointing: false}
"""


def errors_of(data: dict) -> str:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    return format_validation_error(caught.value)


def test_design_example_loads_from_yaml_and_json():
    spec = parse_spec_text(CONTRACT_EXAMPLE)
    assert spec.num_gpus == 2 and spec.lora.r == 16 and spec.backend == "zero2"
    assert parse_spec_text(json.dumps(spec.model_dump(mode="json"))) == spec


def test_unknown_keys_are_rejected_with_their_name():
    assert "zero2.stage: unknown field `stage`" in errors_of({"max_steps": 1, "zero2": {"stage": 3}})


def test_an_unknown_key_says_which_field_was_likely_meant():
    # An abbreviation of a field's words, or a near spelling, in the spec or in a section.
    assert errors_of({"max_steps": 1, "lr": 3e-4}) == \
        "lr: unknown field `lr`; did you mean `learning_rate`?"
    assert errors_of({"max_steps": 1, "fsdp": {"cpu_offlaod": True}}) == \
        "fsdp.cpu_offlaod: unknown field `cpu_offlaod`; did you mean `cpu_offload`?"
    # Each problem still has its line, the unknown keys' next to the others'.
    assert set(errors_of({"max_steps": 0, "micro_batch": 2, "lora": {"r": 0}}).splitlines()) == {
        "max_steps: Input should be greater than or equal to 1",
        "micro_batch: unknown field `micro_batch`; did you mean `micro_batch_size`?",
        "lora.r: Input should be greater than or equal to 1"}


@pytest.mark.parametrize("data, field", [
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": 5, "method": "dpo"}, "method"),
    ({"max_steps": 5, "backend": "zero3"}, "backend"),
    ({"max_steps": 5, "precision": "int8"}, "precision"),
    ({"max_steps": 5, "num_gpus": 0}, "num_gpus"),
    ({"max_steps": 5, "learning_rate": -1}, "learning_rate"),
    ({"max_steps": 5, "lora": {"r": 0}}, "lora.r"),
    ({"max_steps": 5, "seq_len": "long"}, "seq_len"),
    ({"max_steps": 5, "num_nodes": 65}, "num_nodes"),
    ({"max_steps": 5, "host": "a;b"}, "host"),
    ({"max_steps": 5, "method": "qlora", "backend": "fsdp"}, "backend"),
    ({"max_steps": 5, "eval_split": 0.1, "eval_dataset": "e.jsonl"}, "eval_dataset"),
    ({"max_steps": 5, "eval_every_steps": 10}, "eval_every_steps"),
    ({"max_steps": 5, "eval_split": 0.9}, "eval_split"),
    ({"max_steps": 5, "keep_checkpoints": 0}, "keep_checkpoints"),
    ({"max_steps": 5, "fsdp": {"param_dtype": "int8"}}, "fsdp.param_dtype"),
])
def test_bad_values_name_their_field(data, field):
    assert errors_of(data).startswith(f"{field}: ")


def test_steps_or_epochs_exactly_one():
    assert "max_steps or epochs" in errors_of({})
    assert "not both" in errors_of({"max_steps": 3, "epochs": 1})
    assert JobSpec(epochs=0.5).epochs == 0.5


def test_spec_is_frozen():
    spec = JobSpec(max_steps=3)
    with pytest.raises(ValidationError):
        spec.max_steps = 4


def test_not_a_mapping_is_a_clear_error():
    with pytest.raises(ValueError, match="expected a mapping"):
        parse_spec_text("- just\n- a list\n")


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_in_the_repo_is_valid(path):
    assert load_spec_file(path).model is not None


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_a_spec_written_as_yaml_reads_back_the_same(path):
    """What the New job preview shows for `tunedeck submit`: the fields off their defaults."""
    import yaml

    spec = load_spec_file(path)
    text = spec_as_yaml(spec)
    assert parse_spec_text(text) == spec
    defaults = JobSpec.model_construct().model_dump(mode="json")
    written = yaml.safe_load(text)
    assert written and all(value != defaults[key] for key, value in written.items())


def test_hybrid_shard_needs_several_nodes():
    message = errors_of({"max_steps": 1, "backend": "fsdp", "fsdp": {"sharding_strategy": "hybrid_shard"}})
    assert message.startswith("fsdp: hybrid_shard replicates across nodes and needs num_nodes > 1")
    on_nodes = errors_of({"max_steps": 1, "backend": "fsdp", "num_nodes": 2,
                          "fsdp": {"sharding_strategy": "hybrid_shard"}})
    assert on_nodes.startswith("fsdp: hybrid_shard is not available yet; use full_shard")


def test_a_multi_node_job_cannot_be_pinned_to_one_host():
    assert JobSpec(max_steps=1, num_nodes=2, queue="a100").num_nodes == 2
    assert "host pins a job to one host, and num_nodes 2 needs 2 workers" in \
        errors_of({"max_steps": 1, "num_nodes": 2, "host": "gpu-1"})


def test_activation_checkpointing_follows_the_chosen_backend():
    zero2 = JobSpec(max_steps=1, zero2={"activation_checkpointing": True})
    assert zero2.activation_checkpointing
    assert not zero2.model_copy(update={"backend": "fsdp"}).activation_checkpointing
    assert JobSpec(max_steps=1, backend="fsdp", fsdp={"activation_checkpointing": True}).activation_checkpointing


def test_qlora_is_accepted_under_zero2_and_refused_under_fsdp_with_what_to_choose():
    assert JobSpec(max_steps=1, method="qlora").method == "qlora"
    message = errors_of({"max_steps": 1, "method": "qlora", "backend": "fsdp"})
    assert "use backend zero2" in message and "method lora under fsdp" in message


def test_dataset_config_split_and_columns_are_spec_fields():
    spec = parse_spec_text("dataset: org/name\ndataset_config: en\ndataset_split: train[:10%]\n"
                           "columns: {prompt: question, response: answer, system: persona}\n"
                           "eval_dataset: org/name\neval_dataset_split: validation\nmax_steps: 1\n")
    assert (spec.dataset_config, spec.dataset_split, spec.eval_dataset_split) == (
        "en", "train[:10%]", "validation")
    assert (spec.columns.prompt, spec.columns.response, spec.columns.messages,
            spec.columns.system) == ("question", "answer", None, "persona")
    assert JobSpec(max_steps=1).columns.model_dump() == {
        "prompt": None, "response": None, "messages": None, "system": None, "chosen": None,
        "rejected": None}


@pytest.mark.parametrize("data, field, message", [
    ({"columns": {"messages": "chat", "prompt": "q"}}, "columns",
     "set columns.messages (a chat) or columns.prompt/response (one turn), not both"),
    ({"columns": {"answer": "a"}}, "columns.answer", "unknown field `answer`"),
    ({"dataset_split": "train; rm -rf /"}, "dataset_split", "should match pattern"),
    ({"dataset": "org/name", "eval_dataset": "org/name", "eval_dataset_split": "train"}, "spec",
     "eval_dataset is the dataset itself, split 'train' too: set eval_dataset_split"),
])
def test_bad_dataset_options_name_their_field(data, field, message):
    with pytest.raises(ValidationError) as error:
        JobSpec.model_validate({"max_steps": 1, **data})
    text = format_validation_error(error.value)
    assert text.startswith(f"{field}: ") and message in text, text


@pytest.mark.parametrize("fields, message", [
    ({"dataset": "/d/train.jsonl", "eval_dataset": "/d/train.jsonl"},
     "eval_dataset is the dataset file itself"),
    ({"dataset": "/d/train.csv", "dataset_split": "train[:10%]"},
     "dataset_split 'train[:10%]': /d/train.csv is a single file"),
    ({"dataset": "org/name", "eval_dataset": "/d/eval.parquet", "eval_dataset_split": "validation"},
     "eval_dataset_split 'validation': /d/eval.parquet is a single file"),
])
def test_a_split_a_single_file_cannot_have_is_refused_by_field(fields, message):
    with pytest.raises(ValueError) as refusal:
        JobSpec(max_steps=1, **fields)
    assert message in format_validation_error(refusal.value)


def test_splits_of_an_id_or_folder_are_kept():
    spec = JobSpec(max_steps=1, dataset="org/name", dataset_split="train[:10%]",
                   eval_dataset="org/name", eval_dataset_split="test")
    assert (spec.dataset_split, spec.eval_dataset_split) == ("train[:10%]", "test")


def test_the_speed_options_refuse_what_cannot_run_together_naming_the_field():
    from tunedeck.spec.text import format_validation_error

    def problems(**fields) -> str:
        with pytest.raises(ValueError) as raised:
            JobSpec(max_steps=1, **fields)
        return format_validation_error(raised.value)

    assert problems(attention="flash", packing=True).startswith(
        "padding_free: attention flash with packing and micro_batch_size above 1 needs "
        "padding_free: true")
    JobSpec(max_steps=1, attention="flash", packing=True, micro_batch_size=1)  # one row already
    assert problems(attention="flash", precision="fp32").startswith(
        "attention: flash runs in bf16 or fp16 only")
    assert problems(backend="fsdp", attention="flash", fsdp={"param_dtype": "fp32"}).startswith(
        "fsdp: attention flash runs in bf16 or fp16 only")
    assert problems(backend="fsdp", precision="fp32", attention="flash").startswith(
        "fsdp: attention flash runs in bf16 or fp16 only")  # no fsdp section: checked all the same
    # What does run together is accepted: fp32 masters with a bf16 FSDP compute dtype, the
    # fused optimizer beside FSDP's CPU offload, padding-free rows with or without packing.
    JobSpec(max_steps=1, backend="fsdp", precision="fp32", attention="flash",
            fsdp={"param_dtype": "bf16"})
    JobSpec(max_steps=1, backend="fsdp", fused_optimizer=True, fsdp={"cpu_offload": True})
    JobSpec(max_steps=1, attention="flash", packing=True, padding_free=True)
    JobSpec(max_steps=1, padding_free=True)
    # Offloaded, ZeRO-2 steps DeepSpeed's CPU Adam: the fused key stays out of its config, so
    # a retry or plan that turns offload on keeps a valid spec.
    from tunedeck.backends.zero2 import zero2_config

    offloaded = JobSpec(max_steps=1, fused_optimizer=True, zero2={"offload_optimizer": True})
    assert "fused" not in zero2_config(offloaded)["optimizer"]["params"]
    assert zero2_config(offloaded.model_copy(update={"zero2": offloaded.zero2.model_copy(
        update={"offload_optimizer": False})}))["optimizer"]["params"]["fused"] is True


def test_tags_are_short_labels_and_a_bad_one_is_refused_naming_tags():
    assert JobSpec(max_steps=1).tags == []
    tags = ["baseline", "qwen2.5:0.5b", "run_2-b", "x" * 32]
    assert JobSpec(max_steps=1, tags=tags).tags == tags
    for bad, message in ((["two words"], "'two words' is not a tag"), (["x" * 33], "not a tag"),
                         ([""], "'' is not a tag"), (["a/b"], "not a tag"),
                         (["a\x00"], "NUL"), (["t"] * 17, "at most 16")):
        with pytest.raises(ValidationError) as refused:
            JobSpec(max_steps=1, tags=bad)
        [line] = format_validation_error(refused.value).splitlines()
        assert line.startswith("tags: ") and message in line, line


def test_an_unnamed_job_is_named_for_what_it_trains_dpo_included():
    sft = JobSpec(model="builtin:tiny-llama", dataset="builtin:arithmetic", max_steps=5)
    dpo = JobSpec(model="builtin:tiny-llama", dataset="builtin:arithmetic-preference",
                  objective="dpo", backend="fsdp", max_steps=5)
    assert (sft.display_name, sft.training_words) == ("tiny-llama-lora-zero2", "lora")
    assert (dpo.display_name, dpo.training_words) == ("tiny-llama-dpo-lora-fsdp", "dpo lora")
    assert dpo.model_copy(update={"name": "mine"}).display_name == "mine"
