"""A model's shape: the sizes that decide its memory and its FLOPs, without a single weight.

One decoder layer is attention (q/k/v/o, or DeepSeek's latent projections), two or more
norms, and either a dense SwiGLU MLP or a mixture-of-experts block: a router, routed experts
(fused 3D weights in transformers 5, `experts.gate_up_proj` and `experts.down_proj`) and,
in some families, shared experts that every token passes. `architectures` builds shapes from
a `config.json`; `shape_source` finds the config and, where weights are at hand, the exact
parameter count from their safetensors headers.
"""
from __future__ import annotations

from dataclasses import dataclass

from tunedeck.spec.sections import LoraSettings

ATTENTION_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")
EXPERT_WEIGHTS = ("experts.gate_up_proj", "experts.down_proj")


@dataclass(frozen=True)
class Experts:
    """The mixture-of-experts block of a sparse layer."""

    count: int  # routed experts
    per_token: int  # top-k: experts each token is routed to
    intermediate: int  # one expert's hidden width
    shared_intermediate: int = 0  # the shared expert(s) together (Qwen2-MoE, DeepSeek)
    shared_name: str = "shared_expert"  # its module name: DeepSeek says shared_experts
    shared_gate: bool = False  # Qwen2-MoE gates the shared expert: a Linear(hidden, 1)


@dataclass(frozen=True)
class ModelShape:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int  # a dense layer's MLP width
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2's q/k/v projections carry a bias
    model_type: str = "llama"
    # (name, in, out) of the attention's linears when they are not q/k/v/o (DeepSeek's MLA).
    attention_linears: tuple[tuple[str, int, int], ...] = ()
    attention_norm_parameters: int = 0  # per layer: q/k norms (Qwen3, OLMoE), MLA's norms
    qk_norm_width: int = 0  # per token: the q and k elements those norms normalize
    norms_per_layer: int = 2  # hidden-size norms (Gemma 2 has four)
    experts: Experts | None = None
    moe_layers: int = 0  # of num_layers, those with experts (the rest are dense)
    exact_parameters: int | None = None  # from safetensors headers, when weights were at hand
    parameters_by_dtype: tuple[tuple[str, int], ...] = ()
    counted_from: str = "config formulas"

    # -- one layer ---------------------------------------------------------------------
    def attention_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each attention linear."""
        if self.attention_linears:
            return {name: (n_in, n_out) for name, n_in, n_out in self.attention_linears}
        h, q_out, kv_out = self.hidden_size, self.q_width, self.kv_width
        return {"q_proj": (h, q_out), "k_proj": (h, kv_out), "v_proj": (h, kv_out),
                "o_proj": (q_out, h)}

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def mlp_shapes(self, width: int | None = None) -> dict[str, tuple[int, int]]:
        h, i = self.hidden_size, width or self.intermediate_size
        return {"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def block_linears(self, *, sparse: bool) -> dict[str, tuple[int, int]]:
        """Every nn.Linear of a dense or a sparse layer by its name in the layer (as peft
        matches them), routers included."""
        linears = {f"self_attn.{name}": shape for name, shape in self.attention_shapes().items()}
        if not sparse:
            linears.update({f"mlp.{name}": shape for name, shape in self.mlp_shapes().items()})
            return linears
        experts = self.experts
        if experts.shared_intermediate:
            linears.update({f"mlp.{experts.shared_name}.{name}": shape for name, shape
                            in self.mlp_shapes(experts.shared_intermediate).items()})
        if experts.shared_gate:
            linears[f"mlp.{experts.shared_name}_gate"] = (self.hidden_size, 1)
        return linears

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    def _layer_kinds(self) -> list[tuple[bool, int]]:
        """(sparse, how many layers) for each kind present."""
        return [(sparse, count) for sparse, count in ((False, self.dense_layers),
                                                      (True, self.moe_layers)) if count]

    def _attention_extra(self) -> int:
        biases = self.q_width + 2 * self.kv_width if self.attention_bias else 0
        return biases + self.attention_norm_parameters + self.norms_per_layer * self.hidden_size

    def expert_weight_shapes(self) -> dict[str, tuple[int, int, int]]:
        """(experts, in, out) of the fused expert weights, as peft's ParamWrapper reads them."""
        e, h, i = self.experts.count, self.hidden_size, self.experts.intermediate
        return {"mlp.experts.gate_up_proj": (e, 2 * i, h), "mlp.experts.down_proj": (e, h, i)}

    def router_parameters_per_layer(self) -> int:
        """The router's weight (a plain parameter, not a Linear) and a shared-expert gate."""
        experts = self.experts
        return experts.count * self.hidden_size + (self.hidden_size if experts.shared_gate else 0)

    def layer_parameters_of(self, *, sparse: bool) -> int:
        linears = sum(n_in * n_out for n_in, n_out in self.block_linears(sparse=sparse).values())
        if not sparse:
            return linears + self._attention_extra()
        experts = sum(e * n_in * n_out for e, n_in, n_out in self.expert_weight_shapes().values())
        router = self.experts.count * self.hidden_size
        return linears + experts + router + self._attention_extra()

    @property
    def layer_parameters(self) -> int:
        """The largest layer: what FSDP gathers for the layer that runs."""
        return max(self.layer_parameters_of(sparse=sparse) for sparse, _ in self._layer_kinds())

    # -- the whole model ---------------------------------------------------------------
    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_parameters(self) -> int:
        """The output head; zero when it shares the input embedding's weight."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def formula_parameters(self) -> int:
        layers = sum(count * self.layer_parameters_of(sparse=sparse)
                     for sparse, count in self._layer_kinds())
        return self.embedding_parameters + layers + self.hidden_size + self.head_parameters

    @property
    def total_parameters(self) -> int:
        return self.exact_parameters if self.exact_parameters is not None else self.formula_parameters

    @property
    def quantizable_parameters(self) -> int:
        """The layers' nn.Linear weights: what bitsandbytes packs into 4 bits for QLoRA (the
        fused expert weights are not Linear modules, so they stay in the compute dtype)."""
        return sum(count * sum(n_in * n_out for n_in, n_out
                               in self.block_linears(sparse=sparse).values())
                   for sparse, count in self._layer_kinds())

    @property
    def active_matmul_parameters(self) -> int:
        """Matmul weights one token passes through (the top-k experts, not all of them, and
        the output head), for FLOPs."""
        active = self.vocab_size * self.hidden_size
        for sparse, count in self._layer_kinds():
            linears = sum(n_in * n_out for n_in, n_out in self.block_linears(sparse=sparse).values())
            if sparse:
                per_expert = sum(n_in * n_out for _, n_in, n_out in self.expert_weight_shapes().values())
                linears += self.experts.per_token * per_expert + self.experts.count * self.hidden_size
            active += count * linears
        return active

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses (Qwen1.5-MoE-A2.7B: the 2.7B): all but the experts it
        is not routed to."""
        if not self.moe_layers:
            return self.total_parameters
        idle = self.experts.count - self.experts.per_token
        per_expert = sum(n_in * n_out for _, n_in, n_out in self.expert_weight_shapes().values())
        return self.total_parameters - self.moe_layers * idle * per_expert

    # -- LoRA --------------------------------------------------------------------------
    def adapted_linears(self, lora: LoraSettings, *,
                        sparse: bool | None = None) -> list[tuple[int, int, int]]:
        """(in, out, layers) of each Linear a LoRA adapter lands on (in the dense or the
        sparse layers only, when `sparse` says which): peft's all-linear (or the listed
        names, matched as peft does: whole, or a suffix after a dot), routers never
        (trainer.model.lora_targets' rule)."""
        found = []
        for kind_sparse, count in self._layer_kinds():
            if sparse is not None and kind_sparse != sparse:
                continue
            for name, (n_in, n_out) in self.block_linears(sparse=kind_sparse).items():
                if is_adapted_linear(name, lora):
                    found.append((n_in, n_out, count))
        return found

    def adapted_expert_weights(self, lora: LoraSettings) -> list[tuple[int, int, int]]:
        """(experts, in, out) of each fused expert weight adapted, for every sparse layer."""
        if not self.moe_layers or not lora.experts:
            return []
        return [shape for name, shape in self.expert_weight_shapes().items()
                if _targeted(name, lora.target_modules)]

    def lora_parameters(self, lora: LoraSettings) -> int:
        """The adapter's size: r x (in + out) per adapted Linear of each layer, and
        r x experts x (in + out) per fused expert weight (peft's ParamWrapper)."""
        linear = sum(layers * lora.r * (n_in + n_out)
                     for n_in, n_out, layers in self.adapted_linears(lora))
        experts = sum(self.moe_layers * lora.r * e * (n_in + n_out)
                      for e, n_in, n_out in self.adapted_expert_weights(lora))
        return linear + experts

    def lora_trainable(self, lora: LoraSettings) -> int:
        """What a LoRA job trains: the adapter, and the routers whole with train_router."""
        routers = (self.moe_layers * self.router_parameters_per_layer()
                   if lora.train_router and self.moe_layers else 0)
        return self.lora_parameters(lora) + routers


def is_adapted_linear(name: str, lora: LoraSettings) -> bool:
    """Whether an adapter lands on the layer's linear `name`: peft's all-linear or the
    listed names, routers never (trainer.model.lora_targets' rule)."""
    return not _is_router(name) and _targeted(name, lora.target_modules)


def _is_router(name: str) -> bool:
    leaf = name.rpartition(".")[2]
    return leaf in ("gate", "router") or leaf.endswith(("_gate", "_router"))


def _targeted(name: str, targets) -> bool:
    if targets == "all-linear":
        return True
    full = f"model.layers.0.{name}"
    return any(full == target or full.endswith(f".{target}") for target in targets)


# trainer/model/builtin_model.py builds this model; a test checks the two agree.
BUILTIN_TINY_LLAMA = ModelShape("builtin:tiny-llama", vocab_size=384, hidden_size=64,
                                intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                                head_dim=16)
