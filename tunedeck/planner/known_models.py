"""The published `config.json` fields of common models, so a plan needs no download; they
go through the same formulas as a config read from disk. Instruct/chat variants and point
releases share their base model's shape (ALIASES)."""
from __future__ import annotations


def _dense(model_type, vocab, hidden, intermediate, layers, heads, kv_heads, **extra) -> dict:
    return {"model_type": model_type, "vocab_size": vocab, "hidden_size": hidden,
            "intermediate_size": intermediate, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, **extra}


KNOWN_CONFIGS: dict[str, dict] = {
    "meta-llama/Llama-2-7b-hf": _dense("llama", 32000, 4096, 11008, 32, 32, 32),
    "meta-llama/Llama-2-13b-hf": _dense("llama", 32000, 5120, 13824, 40, 40, 40),
    "meta-llama/Llama-2-70b-hf": _dense("llama", 32000, 8192, 28672, 80, 64, 8),
    "meta-llama/Meta-Llama-3-8B": _dense("llama", 128256, 4096, 14336, 32, 32, 8),
    "meta-llama/Meta-Llama-3-70B": _dense("llama", 128256, 8192, 28672, 80, 64, 8),
    "meta-llama/Llama-3.2-1B": _dense("llama", 128256, 2048, 8192, 16, 32, 8, head_dim=64,
                                      tie_word_embeddings=True),
    "meta-llama/Llama-3.2-3B": _dense("llama", 128256, 3072, 8192, 28, 24, 8, head_dim=128,
                                      tie_word_embeddings=True),
    "mistralai/Mistral-7B-v0.1": _dense("mistral", 32000, 4096, 14336, 32, 32, 8),
    "google/gemma-2-9b": _dense("gemma2", 256000, 3584, 14336, 42, 16, 8, head_dim=256,
                                tie_word_embeddings=True),
    "Qwen/Qwen2.5-0.5B": _dense("qwen2", 151936, 896, 4864, 24, 14, 2, tie_word_embeddings=True),
    "Qwen/Qwen2.5-1.5B": _dense("qwen2", 151936, 1536, 8960, 28, 12, 2, tie_word_embeddings=True),
    "Qwen/Qwen2.5-3B": _dense("qwen2", 151936, 2048, 11008, 36, 16, 2, tie_word_embeddings=True),
    "Qwen/Qwen2.5-7B": _dense("qwen2", 152064, 3584, 18944, 28, 28, 4),
    "Qwen/Qwen2.5-14B": _dense("qwen2", 152064, 5120, 13824, 48, 40, 8),
    "Qwen/Qwen2.5-32B": _dense("qwen2", 152064, 5120, 27648, 64, 40, 8),
    "Qwen/Qwen2.5-72B": _dense("qwen2", 152064, 8192, 29568, 80, 64, 8),
    "Qwen/Qwen3-8B": _dense("qwen3", 151936, 4096, 12288, 36, 32, 8, head_dim=128),
    "mistralai/Mixtral-8x7B-v0.1": _dense("mixtral", 32000, 4096, 14336, 32, 32, 8,
                                          num_local_experts=8, num_experts_per_tok=2),
    "mistralai/Mixtral-8x22B-v0.1": _dense("mixtral", 32768, 6144, 16384, 56, 48, 8,
                                           num_local_experts=8, num_experts_per_tok=2),
    "Qwen/Qwen1.5-MoE-A2.7B": _dense("qwen2_moe", 151936, 2048, 5632, 24, 16, 16,
                                     num_experts=60, num_experts_per_tok=4,
                                     moe_intermediate_size=1408,
                                     shared_expert_intermediate_size=5632),
    "Qwen/Qwen3-30B-A3B": _dense("qwen3_moe", 151936, 2048, 6144, 48, 32, 4, head_dim=128,
                                 num_experts=128, num_experts_per_tok=8,
                                 moe_intermediate_size=768),
    "allenai/OLMoE-1B-7B-0924": _dense("olmoe", 50304, 2048, 1024, 16, 16, 16, num_experts=64,
                                       num_experts_per_tok=8),
    "deepseek-ai/DeepSeek-V2-Lite": _dense(
        "deepseek_v2", 102400, 2048, 10944, 27, 16, 16, moe_intermediate_size=1408,
        n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1,
        kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128),
}

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
    "meta-llama/llama-3.2-1b-instruct": "meta-llama/llama-3.2-1b",
    "meta-llama/llama-3.2-3b-instruct": "meta-llama/llama-3.2-3b",
    "mistralai/mistral-7b-instruct-v0.1": "mistralai/mistral-7b-v0.1",
    "mistralai/mistral-7b-instruct-v0.2": "mistralai/mistral-7b-v0.1",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mistralai/mixtral-8x7b-v0.1",
    "mistralai/mixtral-8x22b-instruct-v0.1": "mistralai/mixtral-8x22b-v0.1",
    "google/gemma-2-9b-it": "google/gemma-2-9b",
    "qwen/qwen1.5-moe-a2.7b-chat": "qwen/qwen1.5-moe-a2.7b",
    "qwen/qwen3-30b-a3b-instruct-2507": "qwen/qwen3-30b-a3b",
    "allenai/olmoe-1b-7b-0924-instruct": "allenai/olmoe-1b-7b-0924",
    "deepseek-ai/deepseek-v2-lite-chat": "deepseek-ai/deepseek-v2-lite",
    **{f"qwen/qwen2.5-{size}-instruct": f"qwen/qwen2.5-{size}"
       for size in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "72b")},
}
