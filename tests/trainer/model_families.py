"""Tiny random models of the common decoder families, built offline from transformers' own
config classes and saved as Hugging Face folders beside the built-in tokenizer."""
from __future__ import annotations

from pathlib import Path

# A random model's logits barely move under LoRA at the usual 0.02 initialization; at 0.2
# the frozen head is strong enough that a few adapter steps lower the loss visibly.
INITIALIZER_RANGE = 0.2
COMMON = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
          "initializer_range": INITIALIZER_RANGE, "tie_word_embeddings": False}
MOE = {"num_experts_per_tok": 2}

# family -> (config class name, its fields beyond COMMON)
FAMILIES: dict[str, tuple[str, dict]] = {
    "mistral": ("MistralConfig", {}),
    "gemma2": ("Gemma2Config", {"head_dim": 8, "tie_word_embeddings": True}),
    "phi3": ("Phi3Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 8}),
    "mixtral": ("MixtralConfig", {**MOE, "num_local_experts": 4}),
    "qwen2_moe": ("Qwen2MoeConfig", {**MOE, "num_experts": 4, "moe_intermediate_size": 32,
                                     "shared_expert_intermediate_size": 64}),
    "gpt_neox": ("GPTNeoXConfig", {"num_key_value_heads": None}),
    "olmo2": ("Olmo2Config", {}),
}
MOE_FAMILIES = ("mixtral", "qwen2_moe")


def family_config(family: str, *, vocab_size: int = 384, pad_token_id: int = 0,
                  bos_token_id: int = 1, eos_token_id: int = 2, **overrides):
    """The family's config; the token ids default to the built-in tokenizer's."""
    import transformers

    class_name, fields = FAMILIES[family]
    settings = {key: value for key, value in {**COMMON, **fields, **overrides}.items()
                if value is not None}
    return getattr(transformers, class_name)(
        vocab_size=vocab_size, pad_token_id=pad_token_id, bos_token_id=bos_token_id,
        eos_token_id=eos_token_id, **settings)


def build_family_model(family: str, *, seed: int = 0, **overrides):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(family_config(family, **overrides)).float()


def write_family_model(family: str, folder: Path, tokenizer, *, seed: int = 0) -> Path:
    """A random `family` model sized to `tokenizer`, saved with it in `folder` (created)."""
    model = build_family_model(family, seed=seed, vocab_size=len(tokenizer),
                               pad_token_id=tokenizer.pad_token_id,
                               bos_token_id=tokenizer.bos_token_id,
                               eos_token_id=tokenizer.eos_token_id)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
