"""A ModelShape from a Hugging Face `config.json`, for the decoder families the planner
knows how to count: each `model_type` names the layout its parameters follow (a test checks
every one against transformers' own model, built on the meta device). A `model_type` outside
this table is never guessed at: the caller says how to get an exact count instead.
"""
from __future__ import annotations

from tunedeck.planner.model_shapes import Experts, ModelShape

DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")
MIXTURE_OF_EXPERTS = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3")
KNOWN_MODEL_TYPES = DENSE + MIXTURE_OF_EXPERTS
REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")


class UnknownArchitecture(ValueError):
    """A config whose model_type the formulas do not cover."""


def shape_from_config(name: str, config: dict, *, counted_from: str = "config formulas") -> ModelShape:
    model_type = config.get("model_type")
    if model_type not in KNOWN_MODEL_TYPES:
        raise UnknownArchitecture(
            f"model {name}: the planner cannot count model_type {model_type!r} from its "
            f"config (it knows {', '.join(KNOWN_MODEL_TYPES)}); point `model` at a folder "
            "with the model's *.safetensors files (or download it into the Hugging Face "
            "cache) and the plan counts its parameters exactly from their headers")
    return generic_shape(name, config, counted_from=counted_from)


def generic_shape(name: str, config: dict, *, counted_from: str) -> ModelShape:
    """The shape by the config's own fields; for an unknown model_type only the sizes the
    activations need are trusted (the caller supplies the parameter count)."""
    missing = [key for key in REQUIRED if config.get(key) is None]
    if missing:
        raise ValueError(f"model {name}: config.json lacks {', '.join(missing)}")
    bad = [key for key in REQUIRED if not isinstance(config[key], int) or config[key] < 1]
    if bad:
        raise ValueError(f"model {name}: config.json's {', '.join(bad)} must be whole numbers "
                         "of at least 1")
    model_type = config.get("model_type") or "unknown"
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads") or heads
    fields = dict(
        name=name, vocab_size=config["vocab_size"], hidden_size=hidden,
        intermediate_size=config.get("intermediate_size") or 4 * hidden,
        num_layers=config["num_hidden_layers"], num_heads=heads, num_kv_heads=kv_heads,
        head_dim=head_dim, model_type=model_type, counted_from=counted_from,
        tie_word_embeddings=bool(config.get("tie_word_embeddings",
                                            model_type in ("gemma", "gemma2"))),
        attention_bias=bool(config.get("attention_bias", model_type in ("qwen2", "qwen2_moe"))),
        norms_per_layer=4 if model_type == "gemma2" else 2,
    )
    if model_type in ("qwen3", "qwen3_moe"):  # q_norm and k_norm over one head's width
        fields.update(attention_norm_parameters=2 * head_dim,
                      qk_norm_width=(heads + kv_heads) * head_dim)
    if model_type == "olmoe":  # q_norm and k_norm over the whole projection
        fields.update(attention_norm_parameters=(heads + kv_heads) * head_dim,
                      qk_norm_width=(heads + kv_heads) * head_dim)
    if model_type in ("deepseek_v2", "deepseek_v3"):
        try:
            fields.update(_latent_attention(config, hidden, heads))
        except KeyError as error:
            raise ValueError(f"model {name}: config.json lacks {error.args[0]}") from error
    fields.update(_experts(model_type, config))
    return ModelShape(**fields)


def _latent_attention(config: dict, hidden: int, heads: int) -> dict:
    """DeepSeek's multi-head latent attention: q through an optional low-rank bottleneck,
    k and v through a shared latent (kv_lora_rank) plus a rotary part."""
    nope, rope = config["qk_nope_head_dim"], config["qk_rope_head_dim"]
    v_dim, kv_rank, q_rank = config["v_head_dim"], config["kv_lora_rank"], config.get("q_lora_rank")
    q_head = nope + rope
    if q_rank:
        linears = [("q_a_proj", hidden, q_rank), ("q_b_proj", q_rank, heads * q_head)]
    else:
        linears = [("q_proj", hidden, heads * q_head)]
    linears += [("kv_a_proj_with_mqa", hidden, kv_rank + rope),
                ("kv_b_proj", kv_rank, heads * (nope + v_dim)), ("o_proj", heads * v_dim, hidden)]
    return {"attention_linears": tuple(linears), "head_dim": q_head,
            "attention_norm_parameters": kv_rank + (q_rank or 0)}


def _experts(model_type: str, config: dict) -> dict:
    try:
        return _expert_fields(model_type, config)
    except KeyError as error:
        raise ValueError(f"config.json of a {model_type} model lacks {error.args[0]}") from error


def _expert_count(config: dict) -> int:
    # Hub configs say num_experts; transformers 5 writes num_local_experts for some families.
    return config.get("num_experts") or config["num_local_experts"]


def _expert_fields(model_type: str, config: dict) -> dict:
    layers = config["num_hidden_layers"]
    if model_type in ("mixtral", "olmoe"):  # every layer sparse, experts at intermediate_size
        experts = Experts(_expert_count(config), config["num_experts_per_tok"],
                          config["intermediate_size"])
        return {"experts": experts, "moe_layers": layers}
    if model_type in ("qwen2_moe", "qwen3_moe"):
        experts = Experts(_expert_count(config), config["num_experts_per_tok"],
                          config["moe_intermediate_size"],
                          shared_intermediate=config.get("shared_expert_intermediate_size") or 0,
                          shared_gate=bool(config.get("shared_expert_intermediate_size")))
        step = config.get("decoder_sparse_step") or 1
        dense_only = set(config.get("mlp_only_layers") or ())
        sparse = sum(1 for index in range(layers)
                     if index not in dense_only and (index + 1) % step == 0)
        return {"experts": experts, "moe_layers": sparse}
    if model_type in ("deepseek_v2", "deepseek_v3"):
        shared = (config.get("n_shared_experts") or 0) * config["moe_intermediate_size"]
        experts = Experts(config["n_routed_experts"], config["num_experts_per_tok"],
                          config["moe_intermediate_size"], shared_intermediate=shared,
                          shared_name="shared_experts")
        dense_first = config.get("first_k_dense_replace") or 0
        return {"experts": experts, "moe_layers": max(0, layers - dense_first)}
    return {}
