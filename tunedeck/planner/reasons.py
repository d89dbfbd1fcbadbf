"""The advice in words: why a set-up, what it costs, and the lines that explain the figures
(the napkin sum, DeepSpeed's own estimator, the cost model's standing)."""
from __future__ import annotations

from tunedeck.job_spec import JobSpec
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.setups import OFFLOADED, ON_GPUS, Setup
from tunedeck.planner.step_cost import REFERENCE_MFU
from tunedeck.units import GB, format_size

# A share of the step below this is not worth naming as a cost.
NOTABLE_SHARE = 0.05
# The napkin sum is worth a line when it is this far below the plan (a full fine-tune's
# 25%; a LoRA's master copy is the adapter's, a few percent at most).
NAPKIN_GAP_SHARE = 0.10


def setup_reason(setup: Setup, gpus: GpuSet) -> str:
    """Why this set-up, in one sentence (its label and figures are shown beside it)."""
    step = f"about {setup.cost.seconds:.3g} s a step"
    if setup.tier == ON_GPUS:
        tight = (", tight: above 85% of what the card has once the CUDA context is loaded"
                 if setup.verdict == "tight" else "")
        return f"On the GPUs alone, {step}{tight}."
    if setup.tier == OFFLOADED:
        what = "optimizer" if setup.strategy == "zero2_offload" else "weights and optimizer"
        return (f"The {what} in host memory, {step}: the slowest option, every step "
                "crosses PCIe and updates on the CPU.")
    return f"Once the job or the GPUs change as it says, {step}."


def cost_words(setup: Setup, reference_seconds: float, spec: JobSpec) -> str:
    """What a set-up pays, in a few words: "+33% compute (recomputed forward); 1.4x the
    recommended step"."""
    cost, words = setup.cost, []
    if cost.recompute_s:
        share = cost.recompute_s / (cost.compute_s - cost.recompute_s)
        words.append(f"+{share:.0%} compute (recomputed forward)")
    if cost.offload_s:
        step = "optimizer step" if setup.strategy == "zero2_offload" else "weights and optimizer"
        words.append(f"{step} over PCIe: {cost.offload_s:.3g} s a step")
    if cost.exposed_communication_s > NOTABLE_SHARE * cost.seconds:
        collective = "all-gathers" if setup.strategy.startswith("fsdp") else "gradient reduction"
        words.append(f"{cost.exposed_communication_s / cost.seconds:.0%} of the step waits "
                     f"on {collective}")
    if setup.spec.method != spec.method:
        words.append(f"trains a LoRA adapter on a 4-bit base instead of {spec.method}")
    if any(word.endswith(("GPUs per node", " nodes")) for word in setup.changes):
        words.append(f"needs {setup.gpus.nodes} x {setup.gpus.count} GPUs")
    if reference_seconds and cost.seconds > reference_seconds * 1.005:
        words.append(f"{cost.seconds / reference_seconds:.2f}x the recommended step time")
    return "; ".join(words)


def advice_reasons(best: Setup | None, gpus: GpuSet, *, order: list[str], why: str,
                   recommended_reason: str | None, ddp_bytes: float, napkin_bytes: float,
                   precision: str, full_in_16_bit: bool) -> list[str]:
    reasons = []
    if best is None:
        reasons.append(f"Nothing fits on {gpus.world_size} x {gpus.memory_gb:g} GB, not even "
                       "with activation checkpointing, micro-batch 1, offload, QLoRA or more "
                       "GPUs; a larger card or a smaller model is needed.")
    else:
        reasons.append(f"Recommended {best.label}: {format_size(best.total_bytes / GB)} per GPU of "
                       f"{gpus.memory_gb:g} GB ({best.verdict}). {recommended_reason}")
        if best.tier == OFFLOADED:
            reasons.append(f"Nothing else fits: no set-up on the GPUs alone stays under "
                           f"{gpus.memory_gb:g} GB per GPU.")
            reasons.append(f"{best.strategy} needs about {best.host_bytes / GB:.0f} GB of host "
                           "memory per node.")
        if best.strategy == order[0]:
            reasons.append(f"The selection guide agrees: {why}.")
        else:
            reasons.append(f"The selection guide would start from {order[0]} ({why}); "
                           f"{best.strategy} is what fits, or is faster, here.")
    if napkin_bytes < ddp_bytes * (1 - NAPKIN_GAP_SHARE) and precision != "fp32":
        reasons.append(
            f"DDP's model states are {format_size(ddp_bytes / GB)} per GPU, counted as ZeRO-2 "
            f"and FSDP are (2 + 2 + 12 bytes a parameter); the usual napkin sum, "
            f"{format_size(napkin_bytes / GB)}, leaves out the fp32 master copy of the weights "
            f"({format_size((ddp_bytes - napkin_bytes) / GB)}).")
    if full_in_16_bit:
        reasons.append("ZeRO-2 is counted as in the ZeRO paper (2P + 14P/N bytes); DeepSpeed's "
                       "estimator says 2P + 18P/N because it also counts an fp32 gradient "
                       "partition that lives only during the optimizer step, after the "
                       "activations are freed.")
    if gpus.world_size == 1:
        reasons.append("With one GPU nothing is sharded: ZeRO-2 and FSDP save memory only "
                       "through offload.")
    reasons.append(f"Step times are a cost model's ({REFERENCE_MFU:.0%} of the "
                   f"{gpus.card_spec.name}'s bf16 peak, its link and PCIe bandwidth), to rank "
                   "set-ups; only a run on the GPUs measures them.")
    return reasons
