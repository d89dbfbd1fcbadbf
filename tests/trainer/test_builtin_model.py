import subprocess
import sys
from pathlib import Path

from trainer.model.builtin_model import BUILTIN_MODEL_NAME, builtin_model_dir, write_builtin_model


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_creation_is_deterministic(tmp_path, builtin_model_dir):
    write_builtin_model(tmp_path)
    assert folder_bytes(tmp_path) == folder_bytes(builtin_model_dir)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(folder_bytes(tmp_path))


def test_model_and_tokenizer_load_and_agree(builtin_model_dir, builtin_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(builtin_model_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.dtype == torch.float32
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.vocab_size == len(builtin_tokenizer) < 1000
    assert builtin_tokenizer.pad_token_id not in (None, builtin_tokenizer.eos_token_id)
    assert builtin_tokenizer.bos_token_id is not None


def test_chat_template_renders_turns_and_a_generation_prompt(builtin_tokenizer):
    text = builtin_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|user|>\nWhat is 2 + 2?</s>\n<|assistant|>\n"
    ids = builtin_tokenizer(text, add_special_tokens=False).input_ids
    assert builtin_tokenizer.decode(ids) == text


def test_racing_processes_end_with_one_complete_folder(tmp_path):
    script = ("import sys; from pathlib import Path; from trainer.model.builtin_model import ensure_builtin_model;"
              "print(ensure_builtin_model(Path(sys.argv[1])))")
    racers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
              for _ in range(3)]
    outputs = [racer.communicate(timeout=120)[0].strip() for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0, 0]
    assert set(outputs) == {str(builtin_model_dir(tmp_path))}
    assert [path.name for path in (tmp_path / "builtin").iterdir()] == [BUILTIN_MODEL_NAME]
    assert (builtin_model_dir(tmp_path) / "model.safetensors").is_file()
