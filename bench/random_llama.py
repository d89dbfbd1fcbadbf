"""Random-weight Llamas of real shapes for the GPU benches, and rows long enough to fill them.

Shared by bench/gpu_throughput.py and bench/gpu_memory_plan.py. The weights are random (no
download) and saved in bf16; the tokenizer is the built-in model's.
"""
from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LlamaShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int  # at least the built-in tokenizer's


SHAPES = {
    "tiny": LlamaShape(hidden=64, layers=2, heads=4, kv_heads=4, intermediate=128, vocab=0),
    # About 1.1B, as this bench measured before the 8B came in.
    "1b": LlamaShape(hidden=2048, layers=16, heads=32, kv_heads=32, intermediate=5632,
                     vocab=32000),
    # Llama-3.1-8B's shape.
    "8b": LlamaShape(hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336,
                     vocab=128256),
}


def write_model_config(folder: Path, shape: LlamaShape):
    """config.json and the tokenizer, no weights: enough for the memory planner."""
    from transformers import AutoTokenizer, LlamaConfig

    from trainer.model.builtin_model import ensure_builtin_model

    tokenizer = AutoTokenizer.from_pretrained(ensure_builtin_model(folder.parent / "home"))
    config = LlamaConfig(vocab_size=max(shape.vocab, len(tokenizer)), hidden_size=shape.hidden,
                         intermediate_size=shape.intermediate, num_hidden_layers=shape.layers,
                         num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                         max_position_embeddings=8192, tie_word_embeddings=False,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return config


def build_random_llama(folder: Path, shape: LlamaShape) -> None:
    """The config, the tokenizer and random bf16 weights (built on the GPU where there is one:
    an 8B initialises in seconds there)."""
    import torch
    from transformers import LlamaForCausalLM

    config = write_model_config(folder, shape)
    torch.manual_seed(0)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.save_pretrained(folder)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def write_long_rows(path: Path, *, rows: int, words_per_row: int) -> None:
    """Prompt/response records long enough that every row fills seq_len (no padding); each
    also a preference pair (chosen: the response, rejected: another run of words), so one
    file serves the sft and the dpo cells."""
    generator = random.Random(0)
    words = [f"w{generator.randrange(300)}" for _ in range(words_per_row * 4)]

    def run_of_words() -> str:
        start = generator.randrange(len(words) - words_per_row)
        return " ".join(words[start:start + words_per_row])

    with path.open("w", encoding="utf-8") as file:
        for index in range(rows):
            text = run_of_words()
            file.write(json.dumps({"prompt": f"row {index}", "response": text, "chosen": text,
                                   "rejected": run_of_words()}) + "\n")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The random Llama's sizes (the 1B by default) and --allow-cpu."""
    default = SHAPES["1b"]
    parser.add_argument("--hidden", type=int, default=default.hidden)
    parser.add_argument("--layers", type=int, default=default.layers)
    parser.add_argument("--heads", type=int, default=default.heads)
    parser.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    parser.add_argument("--intermediate", type=int, default=default.intermediate)
    parser.add_argument("--vocab", type=int, default=default.vocab)
    parser.add_argument("--allow-cpu", action="store_true", help="smoke-test on a CPU")


def shape_from_arguments(arguments: argparse.Namespace) -> LlamaShape:
    return LlamaShape(hidden=arguments.hidden, layers=arguments.layers, heads=arguments.heads,
                      kv_heads=arguments.kv_heads or arguments.heads,
                      intermediate=arguments.intermediate, vocab=arguments.vocab)
