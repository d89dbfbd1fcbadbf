"""The planner on the cases people check it against: the ZeRO paper's Figure 1 (as a ratio to
the paper's figures), the 13B napkin sum, published parameter counts of mixture-of-experts
models, and the advice for three well-known set-ups. No GPU, no network.

Usage: .venv/bin/python bench/plan_cases.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.planner.advice import plan_memory  # noqa: E402
from tunedeck.planner.gpu_cards import GpuSet  # noqa: E402
from tunedeck.planner.memory_plan import napkin_ddp_bytes, plan_strategies  # noqa: E402
from tunedeck.planner.model_shapes import ModelShape  # noqa: E402
from tunedeck.planner.shape_source import known_shape  # noqa: E402
from tunedeck.units import GB  # noqa: E402

PAPER_FIGURE_1_GB = {"ddp": 120.0, "zero2": 16.6, "fsdp": 1.9}  # 7.5B, 64 GPUs, K = 12
PUBLISHED_BILLIONS = {"mistralai/Mixtral-8x7B-v0.1": 46.7, "Qwen/Qwen1.5-MoE-A2.7B": 14.3,
                      "Qwen/Qwen3-30B-A3B": 30.5, "allenai/OLMoE-1B-7B-0924": 6.9,
                      "deepseek-ai/DeepSeek-V2-Lite": 15.7}
ADVICE = [
    ("13B full, 4 x 80 GB, seq 2048, micro-batch 2, no checkpointing",
     dict(model="meta-llama/Llama-2-13b-hf", method="full", backend="fsdp", seq_len=2048,
          micro_batch_size=2), GpuSet(4, 80)),
    ("Llama 3 8B LoRA, 2 x 24 GB, seq 2048",
     dict(model="meta-llama/Meta-Llama-3-8B", method="lora", seq_len=2048), GpuSet(2, 24)),
    ("70B full, 8 x 80 GB, seq 2048, micro-batch 1",
     dict(model="meta-llama/Llama-2-70b-hf", method="full", seq_len=2048, micro_batch_size=1),
     GpuSet(8, 80)),
]


def model_states_gb(plan) -> float:
    return (plan.breakdown.params + plan.breakdown.grads + plan.breakdown.optimizer) / GB


def main() -> int:
    shape = ModelShape("paper-7.5b", 32000, 4096, 12960, 32, 32, 32, 128)
    plans = plan_strategies(JobSpec(max_steps=1, method="full", model=shape.name),
                            GpuSet(8, 80, nodes=8), shape)
    print("ZeRO paper Figure 1 (7.5B, 8 nodes x 8 GPUs): planner / paper")
    for name, paper in PAPER_FIGURE_1_GB.items():
        ours = model_states_gb(plans[name])
        print(f"  {name:6s} {ours:7.2f} GB / {paper:6.1f} GB = {ours / paper:.3f}")
    llama13 = known_shape("meta-llama/Llama-2-13b-hf")
    spec = JobSpec(max_steps=1, method="full", model=llama13.name)
    ddp = model_states_gb(plan_strategies(spec, GpuSet(4, 80), llama13)["ddp"])
    napkin = napkin_ddp_bytes(spec, llama13) / GB
    print(f"13B DDP model states: planner {ddp:.1f} GB / napkin {napkin:.1f} GB = "
          f"{ddp / napkin:.3f} (the napkin leaves out the fp32 master copy)")
    print("Parameter counts: planner / published")
    for name, billions in PUBLISHED_BILLIONS.items():
        counted = known_shape(name).total_parameters / 1e9
        print(f"  {name:32s} {counted:7.2f}B / {billions:5.1f}B = {counted / billions:.3f}")
    print("Advice:")
    for title, fields, gpus in ADVICE:
        spec = JobSpec(max_steps=1, **fields)
        plan = plan_memory(spec, gpus, known_shape(spec.model))
        best = plan.recommended
        print(f"  {title}: {best['label']} at {best['total_gb']:.1f} GB per GPU ({best['fits']})"
              if best else f"  {title}: nothing fits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
