"""A model's shape (sizes that decide its memory) without loading a single weight.

From the model's `config.json` (a local folder, or the Hugging Face cache for a hub id), or
from a bundled table of common architectures so the planner answers with no network.
Parameter counts follow the Llama family's layout (Llama, Mistral, Qwen2): attention with
grouped key/value heads, a SwiGLU MLP, RMSNorm, optional q/k/v biases (Qwen2).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# The linear layers of a decoder block, by the names peft's target_modules use.
ATTENTION_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")
DECODER_LINEARS = ATTENTION_LINEARS + MLP_LINEARS


@dataclass(frozen=True)
class ModelShape:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2's q/k/v projections carry a bias

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear layer of one decoder block."""
        h, q_out, kv_out = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        i = self.intermediate_size
        return {"q_proj": (h, q_out), "k_proj": (h, kv_out), "v_proj": (h, kv_out),
                "o_proj": (q_out, h), "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def layer_linear_parameters(self) -> int:
        return sum(n_in * n_out for n_in, n_out in self.linear_shapes().values())

    @property
    def layer_parameters(self) -> int:
        """One decoder block: its linears, their biases (Qwen2) and two RMSNorm weights."""
        shapes = self.linear_shapes()
        biases = (shapes["q_proj"][1] + shapes["k_proj"][1] + shapes["v_proj"][1]
                  if self.attention_bias else 0)
        return self.layer_linear_parameters + biases + 2 * self.hidden_size

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_parameters(self) -> int:
        """The output head; zero when it shares the input embedding's weight."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def total_parameters(self) -> int:
        return (self.embedding_parameters + self.num_layers * self.layer_parameters
                + self.hidden_size + self.head_parameters)

    def lora_parameters(self, rank: int, target_modules: str | tuple[str, ...] | list[str]) -> int:
        """A LoRA adapter's size: r x (in + out) for each targeted linear of every block."""
        return self.num_layers * sum(rank * (n_in + n_out) for n_in, n_out in
                                     self.adapted_linears(target_modules).values())

    def adapted_linears(self, target_modules) -> dict[str, tuple[int, int]]:
        """The block's linears a LoRA `target_modules` selects ("all-linear": all of them;
        peft leaves the output head out)."""
        shapes = self.linear_shapes()
        if target_modules == "all-linear":
            return shapes
        wanted = set(target_modules)
        return {name: shape for name, shape in shapes.items() if name in wanted}


def shape_from_config(name: str, config: dict) -> ModelShape:
    """A ModelShape from a Hugging Face `config.json`'s fields."""
    missing = [key for key in ("vocab_size", "hidden_size", "intermediate_size",
                               "num_hidden_layers", "num_attention_heads") if key not in config]
    if missing:
        raise ValueError(f"model {name}: config.json lacks {', '.join(missing)}; "
                         "the planner knows Llama-family decoders (Llama, Mistral, Qwen2)")
    heads = config["num_attention_heads"]
    return ModelShape(
        name=name, vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"], num_layers=config["num_hidden_layers"],
        num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
    )


def _shape(name, vocab, hidden, intermediate, layers, heads, kv_heads, *, tied=False,
           bias=False) -> ModelShape:
    return ModelShape(name, vocab, hidden, intermediate, layers, heads, kv_heads, hidden // heads,
                      tie_word_embeddings=tied, attention_bias=bias)


# Published config.json values of common models (so a plan needs no download).
KNOWN_SHAPES: dict[str, ModelShape] = {shape.name.lower(): shape for shape in (
    _shape("meta-llama/Llama-2-7b-hf", 32000, 4096, 11008, 32, 32, 32),
    _shape("meta-llama/Llama-2-13b-hf", 32000, 5120, 13824, 40, 40, 40),
    _shape("meta-llama/Llama-2-70b-hf", 32000, 8192, 28672, 80, 64, 8),
    _shape("meta-llama/Meta-Llama-3-8B", 128256, 4096, 14336, 32, 32, 8),
    _shape("meta-llama/Meta-Llama-3-70B", 128256, 8192, 28672, 80, 64, 8),
    _shape("mistralai/Mistral-7B-v0.1", 32000, 4096, 14336, 32, 32, 8),
    _shape("Qwen/Qwen2.5-0.5B", 151936, 896, 4864, 24, 14, 2, tied=True, bias=True),
    _shape("Qwen/Qwen2.5-1.5B", 151936, 1536, 8960, 28, 12, 2, tied=True, bias=True),
    _shape("Qwen/Qwen2.5-3B", 151936, 2048, 11008, 36, 16, 2, tied=True, bias=True),
    _shape("Qwen/Qwen2.5-7B", 152064, 3584, 18944, 28, 28, 4, bias=True),
    _shape("Qwen/Qwen2.5-14B", 152064, 5120, 13824, 48, 40, 8, bias=True),
    _shape("Qwen/Qwen2.5-32B", 152064, 5120, 27648, 64, 40, 8, bias=True),
    _shape("Qwen/Qwen2.5-72B", 152064, 8192, 29568, 80, 64, 8, bias=True),
)}
# Instruct/chat variants and newer point releases share their base model's shape.
ALIASES = {
    "meta-llama/llama-2-7b-chat-hf": "meta-llama/llama-2-7b-hf",
    "meta-llama/llama-2-13b-chat-hf": "meta-llama/llama-2-13b-hf",
    "meta-llama/llama-2-70b-chat-hf": "meta-llama/llama-2-70b-hf",
    "meta-llama/meta-llama-3-8b-instruct": "meta-llama/meta-llama-3-8b",
    "meta-llama/llama-3.1-8b": "meta-llama/meta-llama-3-8b",
    "meta-llama/llama-3.1-8b-instruct": "meta-llama/meta-llama-3-8b",
    "meta-llama/meta-llama-3-70b-instruct": "meta-llama/meta-llama-3-70b",
    "meta-llama/llama-3.1-70b": "meta-llama/meta-llama-3-70b",
    "meta-llama/llama-3.1-70b-instruct": "meta-llama/meta-llama-3-70b",
    "mistralai/mistral-7b-instruct-v0.1": "mistralai/mistral-7b-v0.1",
    "mistralai/mistral-7b-instruct-v0.2": "mistralai/mistral-7b-v0.1",
    **{f"qwen/qwen2.5-{size}-instruct": f"qwen/qwen2.5-{size}"
       for size in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "72b")},
}


def known_shape(model: str) -> ModelShape | None:
    key = model.lower()
    return KNOWN_SHAPES.get(ALIASES.get(key, key))


def resolve_model_shape(model: str) -> ModelShape:
    """The shape of `model` (a spec's `model` field): a local folder's config.json, the
    built-in model, the Hugging Face cache, then the bundled table."""
    if model.startswith("builtin:"):
        if model != BUILTIN_TINY_LLAMA.name:
            raise ValueError(f"model {model}: unknown; the built-in model is {BUILTIN_TINY_LLAMA.name}")
        return BUILTIN_TINY_LLAMA
    local = Path(model).expanduser()
    if local.is_dir():
        return _read_config(model, local / "config.json")
    cached = _hub_cache_config(model)
    if cached is not None:
        return _read_config(model, cached)
    shape = known_shape(model)
    if shape is None:
        raise ValueError(f"model {model}: no config.json found (not a local folder, not in the "
                         "Hugging Face cache) and not among the bundled architectures "
                         f"({', '.join(s.name for s in KNOWN_SHAPES.values())})")
    return shape


def _read_config(name: str, path: Path) -> ModelShape:
    try:
        return shape_from_config(name, json.loads(path.read_text(encoding="utf-8")))
    except OSError as error:
        raise ValueError(f"model {name}: cannot read {path}: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"model {name}: {path} is not valid JSON: {error}") from error


def _hub_cache_config(model: str) -> Path | None:
    """config.json of a hub id already downloaded into the Hugging Face cache, if any."""
    if model.count("/") != 1:
        return None
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get(
        "HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    snapshots = hub / f"models--{model.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda path: path.stat().st_mtime)
    return found[-1] if found else None


# trainer/builtin_model.py builds this model; a test checks the two agree.
BUILTIN_TINY_LLAMA = ModelShape("builtin:tiny-llama", vocab_size=384, hidden_size=64,
                                intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                                head_dim=16)

