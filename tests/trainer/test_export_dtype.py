"""merged/ in the base's dtype (or the spec's export_dtype): resolution, the in-process export,
and one real 2-rank LoRA run on a bf16 base."""
import json

import pytest
import torch
from safetensors.torch import save_file

from tests.trainer.conftest import launch_trainer, write_run
from tests.trainer.test_trainer_runs import assert_merged_matches_base_plus_adapter
from trainer.model.export_dtype import resolve_export_dtype
from tunedeck.safetensors_headers import folder_tensor_entries

STORED_NAMES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


def write_tiny_base(folder, dtype):
    """A tiny random Llama saved in `dtype`, with the built-in model's tokenizer. Its
    initializer_range is raised so that a short LoRA run moves the logits well past bf16's
    rounding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.model.builtin_model import build_tokenizer

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
        tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        model = LlamaForCausalLM(config)
    model.to(dtype).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bf16_base(tmp_path_factory):
    return write_tiny_base(tmp_path_factory.mktemp("bf16-base"), torch.bfloat16)


def weight_bytes(folder) -> int:
    return sum(path.stat().st_size for path in folder.glob("*.safetensors"))


def test_auto_is_the_dominant_stored_float_dtype_else_the_config_else_fp32(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    # fp16 holds the most elements; the fp32 norm and the int64 ids do not decide.
    save_file({"w": torch.zeros(16, 16, dtype=torch.float16), "norm": torch.ones(16),
               "ids": torch.zeros(4096, dtype=torch.int64)}, str(mixed / "model.safetensors"))
    (mixed / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert resolve_export_dtype("auto", str(mixed)) == "fp16"  # headers beat the config
    assert resolve_export_dtype("fp32", str(mixed)) == "fp32"  # an explicit choice stands

    for key, name, expected in [("torch_dtype", "bfloat16", "bf16"), ("dtype", "float16", "fp16"),
                                ("dtype", "float32", "fp32")]:
        config_only = tmp_path / f"config-{key}-{name}"
        config_only.mkdir()
        (config_only / "config.json").write_text(json.dumps({key: name}))
        assert resolve_export_dtype("auto", str(config_only)) == expected
    silent = tmp_path / "silent"
    silent.mkdir()
    (silent / "config.json").write_text("{}")
    assert resolve_export_dtype("auto", str(silent)) == "fp32"


def test_auto_for_a_hugging_face_id_reads_the_local_cache_only(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--someone--tiny"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    save_file({"w": torch.zeros(4, 4, dtype=torch.bfloat16)}, str(snapshot / "model.safetensors"))
    (snapshot / "config.json").write_text(json.dumps({"torch_dtype": "float32"}))
    assert resolve_export_dtype("auto", "someone/tiny") == "bf16"
    assert resolve_export_dtype("auto", "someone/not-cached") == "fp32"  # and no network


@pytest.mark.parametrize("export_dtype, expected", [("fp32", torch.float32),
                                                   ("fp16", torch.float16)])
def test_export_casts_the_fp32_merge_once_to_the_chosen_dtype(export_dtype, expected, bf16_base,
                                                             tmp_path, monkeypatch):
    """export_weights in this process, on a bf16 base, with random "trained" LoRA weights:
    what a rank 0 export does after a run, without the run. The shard size is shrunk so
    this tiny model shards as a >5 GB one would."""
    from transformers import AutoTokenizer

    import trainer.model.export
    from trainer.model.export import export_weights
    from trainer.model.method import apply_method
    from trainer.model.model_source import load_base_model
    from tunedeck.spec.job_spec import JobSpec
    from tunedeck.run_folder import RunFolder

    spec = JobSpec.model_validate({"model": str(bf16_base), "max_steps": 1,
                                   "export_dtype": export_dtype})
    model = apply_method(load_base_model(str(bf16_base)), spec)
    generator = torch.Generator().manual_seed(1)
    trained_state = {name: 0.05 * torch.randn(parameter.shape, generator=generator)
                     for name, parameter in model.named_parameters() if parameter.requires_grad}
    run = RunFolder(tmp_path / "run")
    run.path.mkdir()
    monkeypatch.setattr(trainer.model.export, "MAX_SHARD_SIZE", "100KB")
    export_weights(spec, run, trained_state=trained_state, model_source=str(bf16_base),
                   tokenizer=AutoTokenizer.from_pretrained(bf16_base))

    assert_merged_matches_base_plus_adapter(run, bf16_base, dtype=expected)  # loads every shard
    index = json.loads((run.merged_dir / "model.safetensors.index.json").read_text())
    shards = sorted(run.merged_dir.glob("*.safetensors"))
    assert len(shards) >= 2 and set(index["weight_map"].values()) == {path.name for path in shards}
    bytes_per_element = torch.finfo(expected).bits // 8
    # The base is bf16 (2 bytes an element): fp32 doubles it, fp16 keeps it (headers aside).
    assert weight_bytes(run.merged_dir) / weight_bytes(bf16_base) == pytest.approx(
        bytes_per_element / 2, rel=0.05)


@pytest.mark.torchrun
def test_a_lora_run_on_a_bf16_base_exports_bf16_merged_weights(bf16_base, tmp_path, tunedeck_home):
    run = write_run(tmp_path / "run", model=str(bf16_base), backend="zero2", method="lora",
                    max_steps=24, warmup_steps=2)
    result = launch_trainer(run, tunedeck_home)
    assert result.returncode == 0, result.output
    print(f"zero2 lora run on a bf16 base: {result.seconds:.1f} s")

    # auto: the merge is saved as the base stores it, not fp32 at twice its bytes.
    error, tolerance = assert_merged_matches_base_plus_adapter(run, bf16_base, dtype=torch.bfloat16)
    print(f"bf16 merged logits vs fp32 base + adapter: {error:.4f} (tolerance {tolerance:.4f})")
    ratio = weight_bytes(run.merged_dir) / weight_bytes(bf16_base)
    print(f"merged bytes / base bytes: {ratio:.3f}")
    assert ratio == pytest.approx(1.0, rel=0.05)
    # adapter/ stays fp32 (peft's default): small, and exact to reapply.
    assert {entry.dtype for entry in folder_tensor_entries(run.adapter_dir)} == {"F32"}
