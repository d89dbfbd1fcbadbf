"""The exported `merged/` folder, loaded with plain transformers (no TuneDeck code), renders a
chat into the ids the trainer trained on and answers greedily as "Try it" does: for a
template that leaves beginning-of-sequence out (the built-in Llama), for ChatML without one
(Qwen-style), and for a base model without any template (the plain template TuneDeck adds)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.conftest import launch_trainer, write_run
from tests.trainer.model_families import write_family_model
from trainer.data.datasets import prompt_token_ids
from tests.trainer.tokenizing import tokenize_example
from trainer.generation import generate, load_for_generation
from trainer.model.model_source import load_tokenizer, resolve_model_source
from tunedeck.data.records import Example

PROMPT = "What is 2 + 3?"
MESSAGES = [{"role": "user", "content": PROMPT}]
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, *MESSAGES]
NEW_TOKENS = 8
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# A template that writes beginning-of-sequence itself (Llama 3, Mistral, Gemma do).
BOS_FIRST_TEMPLATE = "{{ bos_token }}" + CHATML_TEMPLATE.replace("<|im_start|>", "<|")
LORA = {"method": "lora", "max_steps": 4, "learning_rate": 2e-2, "lr_schedule": "constant",
        "lora": {"r": 8, "alpha": 16}}


def chatml_tokenizer(builtin_model_dir: Path):
    """The built-in tokenizer made Qwen-like: ChatML turns, no beginning-of-sequence token,
    end-of-turn as end-of-sequence."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(builtin_model_dir)
    tokenizer.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.bos_token = None
    tokenizer.eos_token = "<|im_end|>"
    return tokenizer


def variant_tokenizer(variant: str, builtin_model_dir: Path):
    from transformers import AutoTokenizer

    if variant == "chatml-no-bos":
        return chatml_tokenizer(builtin_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(builtin_model_dir)
    own = tokenizer.chat_template
    tokenizer.chat_template = {"llama-no-bos": own, "plain": None, "bos-first": BOS_FIRST_TEMPLATE,
                               "named": {"default": own, "bos-first": BOS_FIRST_TEMPLATE}}[variant]
    return tokenizer


def trained_prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The prompt part of a training row for `messages` (the unlabeled positions)."""
    row = tokenize_example(tokenizer, Example(prompt_messages=tuple(messages), response="5"),
                           seq_len=512)
    return row.input_ids[:sum(1 for label in row.labels if label == -100)]


@pytest.mark.parametrize("variant", ["llama-no-bos", "chatml-no-bos", "plain", "bos-first",
                                     "named"])
def test_a_saved_tokenizer_renders_the_ids_training_uses(variant, builtin_model_dir, tmp_path):
    """What export does with the tokenizer (save_pretrained of the one load_tokenizer gave),
    for every kind of template (`named`: several by name, the default one used), without a
    training run."""
    from transformers import AutoTokenizer

    base = variant_tokenizer(variant, builtin_model_dir)
    base.save_pretrained(tmp_path / "base")
    load_tokenizer(str(tmp_path / "base")).save_pretrained(tmp_path / "export")
    exported = AutoTokenizer.from_pretrained(tmp_path / "export")
    for messages in (MESSAGES, CONVERSATION):
        ids = exported.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
        assert ids == prompt_token_ids(base, tuple(messages))
        assert ids == trained_prompt_ids(base, messages)
    assert (ids[0] == base.bos_token_id) == (base.bos_token is not None)
    assert ids.count(base.bos_token_id) <= 1
    # Loading the export again (as "Try it" loads merged/) changes nothing.
    assert load_tokenizer(str(tmp_path / "export")).chat_template == exported.chat_template


def base_model_folder(variant: str, builtin_model_dir: Path, folder: Path) -> str:
    """The spec's `model` for a fine-tune: the built-in Llama itself, a Qwen-style qwen3
    with the ChatML tokenizer, or a mistral whose tokenizer has no template."""
    if variant == "llama-no-bos":
        return "builtin:tiny-llama"
    family = {"chatml-no-bos": "qwen3", "plain": "mistral"}[variant]
    return str(write_family_model(family, folder, variant_tokenizer(variant, builtin_model_dir)))


@pytest.mark.torchrun
@pytest.mark.parametrize(("variant", "backend"), [("llama-no-bos", "zero2"),
                                                  ("chatml-no-bos", "fsdp"), ("plain", "fsdp")])
def test_the_downloaded_merged_model_prompts_and_answers_as_try_it(
        variant, backend, tmp_path, tunedeck_home, builtin_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = base_model_folder(variant, builtin_model_dir, tmp_path / "base")
    result = launch_trainer(write_run(tmp_path / "run", model=model, backend=backend, **LORA),
                            tunedeck_home)
    assert result.returncode == 0, result.output
    merged = result.run.merged_dir

    # What a downloader does: plain transformers on the folder, nothing of TuneDeck.
    tokenizer = AutoTokenizer.from_pretrained(merged)
    downloaded = AutoModelForCausalLM.from_pretrained(merged).eval()
    ids = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)["input_ids"]
    training_tokenizer = load_tokenizer(resolve_model_source(model))
    assert ids == trained_prompt_ids(training_tokenizer, MESSAGES)
    with torch.no_grad():
        prompt = torch.tensor([ids])
        output = downloaded.generate(prompt, attention_mask=torch.ones_like(prompt),
                                     max_new_tokens=NEW_TOKENS, do_sample=False)
    answer_ids = output[0, len(ids):].tolist()

    try_it = generate(load_for_generation({"model_source": str(merged), "device": "cpu"}),
                      {"messages": MESSAGES, "max_new_tokens": NEW_TOKENS, "temperature": 0.0,
                       "top_p": 1.0})
    assert try_it["prompt_tokens"] == len(ids)
    assert (try_it["text"], try_it["tokens"]) == \
        (tokenizer.decode(answer_ids, skip_special_tokens=True), len(answer_ids))
