"""The advice in words: why a set-up, what it costs, and the lines that explain the figures
(the napkin sum, DeepSpeed's own estimator, the cost model's standing)."""
from __future__ import annotations

from tunedeck.backends import BACKENDS, backend_of_strategy
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.activation_memory import rows_per_micro_batch, uses_liger
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import DDP, StrategyPlan, holds_reference_copy
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.planner.setups import OFFLOADED, ON_GPUS, Setup
from tunedeck.planner.step_cost import REFERENCE_MFU
from tunedeck.units import GB, format_seconds, format_size

# A share of the step below this is not worth naming as a cost.
NOTABLE_SHARE = 0.05
# The napkin sum is worth a line when it is this far below the plan (a full fine-tune's
# 25%; a LoRA's master copy is the adapter's, a few percent at most).
NAPKIN_GAP_SHARE = 0.10


def setup_reason(setup: Setup, gpus: GpuSet) -> str:
    """Why this set-up, in one sentence (its label and figures are shown beside it). CPU
    ranks get no step time: the cost model's seconds are a GPU's."""
    if gpus.on_cpu:
        return _cpu_setup_reason(setup)
    step = f"about {format_seconds(setup.cost.seconds)} a step"
    if setup.tier == ON_GPUS:
        tight = (", tight: above 85% of what the card has once the CUDA context is loaded, "
                 "closer than the plan's own error (up to 10%): it may run out of memory"
                 if setup.verdict == "tight" else "")
        return f"On the GPUs alone, {step}{tight}."
    if setup.tier == OFFLOADED:
        what = backend_of_strategy(setup.strategy).offloaded_state_words
        return (f"The {what} in host memory, {step}: the slowest option, every step "
                "crosses PCIe and updates on the CPU.")
    return f"Once the job or the GPUs change as it says, {step}."


def _cpu_setup_reason(setup: Setup) -> str:
    tight = (", tight: above 85% of the RAM a rank has once the runtime is loaded, closer than "
             "the plan's own error (up to 10%): it may run out of memory"
             if setup.verdict == "tight" else "")
    if setup.tier == ON_GPUS:
        return f"On the CPU ranks, within their RAM{tight}."
    return f"Once the job changes as it says{tight}."


def cost_words(setup: Setup, reference_seconds: float, spec: JobSpec) -> str:
    """What a set-up pays, in a few words: "+33% compute (recomputed forward); 1.4x the
    recommended step". For CPU ranks, only what the work itself changes, no time."""
    cost, words = setup.cost, []
    if cost.recompute_s:
        share = cost.recompute_s / (cost.compute_s - cost.recompute_s)
        words.append(f"+{share:.0%} compute (recomputed forward)")
    if setup.gpus.on_cpu:
        if setup.spec.method != spec.method:
            words.append(f"trains a LoRA adapter on a 4-bit base instead of {spec.method}")
        return "; ".join(words)
    if cost.offload_s:
        step = backend_of_strategy(setup.strategy).offloaded_words
        words.append(f"{step} over PCIe: {format_seconds(cost.offload_s)} a step")
    if cost.exposed_communication_s > NOTABLE_SHARE * cost.seconds:
        collective = backend_of_strategy(setup.strategy).collective_words
        words.append(f"{cost.exposed_communication_s / cost.seconds:.0%} of the step waits "
                     f"on {collective}")
    if setup.spec.method != spec.method:
        words.append(f"trains a LoRA adapter on a 4-bit base instead of {spec.method}")
    if setup.precomputes_reference and spec.dpo.reference != "precomputed":
        words.append("a forward pass over the pairs before step 1 (the reference "
                     "log-probabilities), no frozen copy held")
    if any(word.endswith(("GPUs per node", " nodes")) for word in setup.changes):
        words.append(f"needs {setup.gpus.nodes} x {setup.gpus.count} GPUs")
    if reference_seconds and cost.seconds > reference_seconds * 1.005:
        words.append(f"{cost.seconds / reference_seconds:.2f}x the recommended step time")
    return "; ".join(words)


def advice_reasons(best: Setup | None, gpus: GpuSet, *, order: list[str], why: str,
                   recommended_reason: str | None, ddp_bytes: float, napkin_bytes: float,
                   precision: str, full_in_16_bit: bool,
                   objective_lines: list[str] | None = None) -> list[str]:
    reasons = []
    if best is None:
        reasons.append(_nothing_fits(gpus))
    else:
        reasons.append(f"Recommended {best.label}: {format_size(best.total_bytes / GB)} per "
                       f"{gpus.rank_word} of {_memory_words(gpus)} ({best.verdict}). "
                       f"{recommended_reason}")
        if best.tier == OFFLOADED:
            reasons.append(f"Nothing else fits: no set-up on the GPUs alone stays under "
                           f"{gpus.memory_gb:g} GB per GPU with a margin (a tight one is "
                           "within the plan's own error of the card).")
            reasons.append(f"{best.strategy} needs about {best.host_bytes / GB:.0f} GB of host "
                           "memory per node.")
        if best.strategy == order[0]:
            reasons.append(f"The selection guide agrees: {why}.")
        else:
            reasons.append(f"The selection guide would start from {order[0]} ({why}); "
                           f"{best.strategy} is what fits, or is faster, here.")
    reasons += objective_lines or []
    if napkin_bytes < ddp_bytes * (1 - NAPKIN_GAP_SHARE) and precision != "fp32":
        reasons.append(
            f"DDP's model states are {format_size(ddp_bytes / GB)} per {gpus.rank_word}, counted as ZeRO-2 "
            f"and FSDP are (2 + 2 + 12 bytes a parameter); the usual napkin sum, "
            f"{format_size(napkin_bytes / GB)}, leaves out the fp32 master copy of the weights "
            f"({format_size((ddp_bytes - napkin_bytes) / GB)}).")
    if full_in_16_bit:
        reasons.append("ZeRO-2's model states are counted as in the ZeRO paper (2P + 14P/N "
                       "bytes); DeepSpeed's estimator says 2P + 18P/N, adding the fp32 "
                       "gradient partition its optimizer step makes, which this plan counts "
                       "with the step's other temporaries.")
    if gpus.world_size == 1:
        reasons.append("With one rank nothing is sharded: ZeRO-2 and FSDP save no memory."
                       if gpus.on_cpu else "With one GPU nothing is sharded: ZeRO-2 and FSDP "
                       "save memory only through offload.")
    reasons.append(_cost_model_standing(gpus))
    return reasons


def objective_reasons(spec: JobSpec, shape: ModelShape, plans: dict[str, StrategyPlan],
                      gpus: GpuSet) -> list[str]:
    """How objective dpo is counted, in words: its rows, and its reference model."""
    if spec.objective != "dpo":
        return []
    pairs = spec.micro_batch_size
    liger = (" (Liger's fused cross-entropy is not used for it; its other kernels are)"
             if uses_liger(spec, shape) else "")
    lines = [f"Objective dpo: two sequences per pair: activations doubled. A micro-batch of "
             f"{pairs} pair{'s' if pairs > 1 else ''} is one forward of "
             f"{rows_per_micro_batch(spec)} rows (the chosen answers, then the rejected), and "
             f"the answers' log-probabilities take an fp32 log-softmax of whole logits{liger}."]
    per = gpus.rank_word
    if holds_reference_copy(spec):
        held = "; ".join(
            f"{backend.title} {backend.reference_words}: "
            f"{format_size(plans[backend.strategy(False)].reference_bytes / GB)} per {per}"
            for backend in BACKENDS.values())
        whole = plans[DDP].reference_bytes  # the reference row holds the copy whole
        lines.append(f"Reference auto on a full fine-tune: a frozen copy of the weights in the "
                     f"compute dtype ({format_size(whole / GB)}), with no gradients or "
                     f"optimizer state, counted with the weights. {held}. Reference "
                     f"precomputed holds none: {_precomputed_pass_words(spec)}.")
    elif spec.reference_mode == "precomputed":
        lines.append("Reference precomputed: no reference weights while training; "
                     f"{_precomputed_pass_words(spec)}.")
    elif spec.uses_reference_model:
        lines.append(f"Reference auto on a {spec.method} job: the same model with the adapter "
                     "off, forwarded without gradients before the policy's forward: no second "
                     "copy of the weights.")
    else:
        lines.append(f"Loss {spec.dpo.loss} has no reference model: nothing to hold or "
                     "precompute.")
    return lines


def _precomputed_pass_words(spec: JobSpec) -> str:
    # A forward is 2M FLOPs a token; training adds 4M backward (full) or 2M (a frozen base).
    share = "a third" if spec.method == "full" else "half"
    return ("one forward pass over the pairs before step 1 computes the reference "
            f"log-probabilities (about {share} of a training step's compute per pair), kept "
            "at a few bytes a pair")


def _memory_words(gpus: GpuSet) -> str:
    return f"{gpus.memory_gb:g} GB of RAM" if gpus.on_cpu else f"{gpus.memory_gb:g} GB"


def _nothing_fits(gpus: GpuSet) -> str:
    if gpus.on_cpu:
        return (f"Nothing fits in {gpus.memory_gb:g} GB of RAM a rank, not even with activation "
                "checkpointing, micro-batch 1 or QLoRA; fewer ranks (more RAM each), a host "
                "with more RAM or a smaller model is needed.")
    return (f"Nothing fits on {gpus.world_size} x {gpus.memory_gb:g} GB, not even with "
            "activation checkpointing, micro-batch 1, offload, QLoRA or more GPUs; a larger "
            "card or a smaller model is needed.")


def _cost_model_standing(gpus: GpuSet) -> str:
    if gpus.on_cpu:
        return ("CPU ranks: each holds its share in the host's RAM, which all the ranks of a "
                "node share; set-ups are ordered by their compute and communication, and no "
                "step time is guessed for a CPU.")
    return (f"Step times are a cost model's ({REFERENCE_MFU:.0%} of the "
            f"{gpus.card_spec.name}'s bf16 peak, its link and PCIe bandwidth), to rank "
            "set-ups; only a run on the GPUs measures them.")
