"""Which weights a LoRA adapter trains, for any decoder family: one answer for the trainer
(trainer.model.method), the worker's check before launch and the form's preview (both through
trainer.model.target_preview, on a model built on the meta device).

`all-linear` is peft's rule (every nn.Linear but the output head), with two changes for
mixture-of-experts models:
- the routed experts' weights are not nn.Linear in transformers 5 but fused 3D
  nn.Parameters (experts x out x in, e.g. `mlp.experts.gate_up_proj`); peft adapts them
  through `target_parameters` (lora.ParamWrapper), when `lora.experts` is on (the default);
- the router (the block's `gate`, and a shared expert's scalar `shared_expert_gate`) gets no
  adapter: peft's own all-linear on Mixtral would put one on it, and a routing that drifts
  while the experts adapt is hard to train and to reason about. `lora.train_router` trains it
  whole instead (it is num_experts rows: a low-rank copy would save nothing).
A list of names matches modules and expert parameters by peft's rule (the full name, or a
suffix after a dot), so `[q_proj, v_proj]` adapts attention only and `[experts.down_proj]`
one fused expert weight.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tunedeck.spec.sections import LoraSettings

# The names a mixture-of-experts block gives its router, as a direct child of the block.
ROUTER_NAMES = ("gate", "router")
ROUTER_SUFFIXES = ("_gate", "_router")
LAYER_INDEX = re.compile(r"\.\d+\.")


@dataclass(frozen=True)
class LoraTargets:
    linear_modules: tuple[str, ...]  # lora.Linear adapters, with the spec's dropout
    expert_parameters: tuple[str, ...]  # fused expert weights, through lora.ParamWrapper
    router_modules: tuple[str, ...]  # every router found, trained or not
    train_router: bool
    left_out_experts: tuple[str, ...] = ()  # expert weights `lora.experts: false` left out
    # Of linear_modules, those adapted through their `.weight` (lora.ParamWrapper, so with no
    # dropout): for model types whose layout changed in transformers 5 (Mixtral, Qwen3-MoE,
    # DeepSeek, ...) peft rewrites a target named like a v4 expert projection (`.w1`,
    # `.gate_proj`, ...) into a fused expert weight, even a dense MLP's or a shared expert's.
    linear_by_weight: tuple[str, ...] = ()

    @property
    def uses_parameter_adapters(self) -> bool:
        return bool(self.expert_parameters)

    def as_json(self) -> dict:
        by_weight = set(self.linear_by_weight)
        return {"linear_modules": layer_patterns(name for name in self.linear_modules
                                                 if name not in by_weight),
                "linear_modules_without_dropout": layer_patterns(self.linear_by_weight),
                "expert_parameters": layer_patterns(self.expert_parameters),
                "routers": layer_patterns(self.router_modules),
                "router": "trained" if self.train_router and self.router_modules else "frozen",
                "experts_left_out": layer_patterns(self.left_out_experts)}

    def as_text(self) -> str:
        """One line for the job's events: what the adapter lands on."""
        described = self.as_json()
        parts = [f"LoRA adapts {', '.join(described['linear_modules']) or 'no linear layer'}"]
        if described["linear_modules_without_dropout"]:
            parts.append(f"{', '.join(described['linear_modules_without_dropout'])} through "
                         "their weights (no dropout)")
        if described["expert_parameters"]:
            parts.append(f"expert weights {', '.join(described['expert_parameters'])} (no dropout)")
        if described["experts_left_out"]:
            parts.append(f"expert weights left out (lora.experts off): "
                         f"{', '.join(described['experts_left_out'])}")
        if described["routers"]:
            parts.append(f"router {described['router']}")
        return "; ".join(parts)


def resolve_lora_targets(model, settings: LoraSettings) -> LoraTargets:
    """The adapted modules and parameters of `model` (a plain transformers model, on any
    device, meta included); a ValueError naming `lora.target_modules` when nothing matches."""
    experts = expert_parameter_names(model)
    routers = router_module_names(model, experts)
    linears = [name for name in linear_module_names(model) if name not in routers]
    wanted = settings.target_modules
    if wanted != "all-linear":
        linears = [name for name in linears if matches_any(name, wanted)]
        experts = [name for name in experts if matches_any(name, wanted)]
        refuse_unmatched_names(model, wanted, routers, matched=linears + experts)
    chosen_experts = experts if settings.experts else []
    if not linears and not chosen_experts:
        raise ValueError(f"lora.target_modules {wanted}: selects no weight of "
                         f"{type(model).__name__}" + ("" if settings.experts else
                                                      " (lora.experts is off)"))
    rewritten = {leaf for leaf in {name.rpartition(".")[2] for name in linears}
                 if peft_rewrites_target(leaf, model)}
    return LoraTargets(linear_modules=tuple(linears), expert_parameters=tuple(chosen_experts),
                       router_modules=tuple(routers), train_router=settings.train_router,
                       left_out_experts=() if settings.experts else tuple(experts),
                       linear_by_weight=tuple(name for name in linears
                                              if name.rpartition(".")[2] in rewritten))


def expert_parameter_names(model) -> list[str]:
    """Fused expert weights: the 3D parameters (one matrix per expert) of the model, but a
    convolution's (a Mamba layer's conv1d weight is 3D too)."""
    import torch

    return [f"{module_name}.{name}" if module_name else name
            for module_name, module in model.named_modules()
            if not isinstance(module, torch.nn.modules.conv._ConvNd)
            for name, parameter in module.named_parameters(recurse=False) if parameter.dim() == 3]


def router_module_names(model, expert_parameters: list[str]) -> list[str]:
    """The routers: children named gate/router (or *_gate, *_router) of each block that
    holds experts (the parent of the experts' module)."""
    expert_modules = {name.rpartition(".")[0] for name in expert_parameters}
    blocks = sorted({name.rpartition(".")[0] for name in expert_modules})
    routers = []
    for block in blocks:
        for child_name, child in model.get_submodule(block).named_children():
            is_router = child_name in ROUTER_NAMES or child_name.endswith(ROUTER_SUFFIXES)
            if is_router and any(True for _ in child.parameters()):
                routers.append(f"{block}.{child_name}" if block else child_name)
    return routers


def linear_module_names(model) -> list[str]:
    """Every nn.Linear (or GPT-2 style Conv1D) but the output head, as peft's all-linear."""
    import torch
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [name for name, module in model.named_modules()
            if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not head]


def matches_any(name: str, wanted: list[str]) -> bool:
    """peft's rule for a list of target names: the full name, or a suffix after a dot."""
    return any(name == target or name.endswith(f".{target}") for target in wanted)


def refuse_unmatched_names(model, wanted: list[str], routers: list[str], *,
                           matched: list[str]) -> None:
    """Every listed name must select a linear layer or an expert weight, so a typo fails
    before launch and not as peft's error on every rank."""
    for target in wanted:
        if any(matches_any(name, [target]) for name in matched):
            continue
        if any(matches_any(name, [target]) for name in routers):
            raise ValueError(f"lora.target_modules: {target} is the router of "
                             f"{type(model).__name__}; routers get no adapter, set "
                             "lora.train_router: true to train them")
        raise ValueError(f"lora.target_modules: {target} matches no linear layer or expert "
                         f"weight of {type(model).__name__}; leave it out, or use all-linear")


def layer_patterns(names) -> list[str]:
    """Names with each layer index as `*`, once each: `model.layers.*.self_attn.q_proj`."""
    return list(dict.fromkeys(LAYER_INDEX.sub(".*.", name) for name in names))


def peft_rewrites_target(leaf: str, model) -> bool:
    """Whether peft's transformers-5 conversion would rewrite a target named `*.leaf` on
    this model: asked of peft itself, on a trial config."""
    try:
        from peft.utils.transformers_weight_conversion import convert_peft_config_for_transformers
    except ImportError:  # a peft without the conversion rewrites nothing
        return False
    from peft import LoraConfig

    trial = LoraConfig(target_modules=[f"probe.{leaf}"], task_type="CAUSAL_LM")
    try:
        convert_peft_config_for_transformers(trial, model=model, conversions=None)
    except ValueError:  # "cannot convert w1 without w3": it would rewrite it
        return True
    return f"probe.{leaf}" not in set(trial.target_modules or ())
