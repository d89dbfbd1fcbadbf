"""GRPO against TRL, side by side: TRL 1.16's `GRPOTrainer` and TuneDeck's trainer on the
same tiny model (the built-in Llama), the same prompts (builtin:arithmetic-rl, under the
model's chat template), the same G, completion length, batch, LoRA and reward (`contains`
"7"), the same steps, one CPU process each, in one run. Each side's steps are timed apart:

- TRL: a callback times each optimizer step; `_generate_and_score_completions` (sampling,
  the rewards, the advantages) is timed inside it; training is the rest of the step.
- TuneDeck: its own step figures (sampling_seconds + scoring_seconds, training_seconds).

The first step of each (warm-up: allocations, first kernels) is left out; the figures are
medians over the rest, and the ratios TuneDeck / TRL (the goal: at most 1).

Usage: .venv/bin/python bench/grpo_vs_trl.py [--steps 12] [--generations 4]
       [--completion 16] [--batch 8]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

SEVEN = "7"
LEARNING_RATE = 1e-3
SEED = 42


def sevens(prompts, completions, **_columns) -> list[float]:
    """TRL's reward: TuneDeck's `contains` "7" as a function."""
    return [float(SEVEN in (completion if isinstance(completion, str)
                            else completion[-1]["content"])) for completion in completions]


def run_trl(model_dir: Path, *, steps: int, generations: int, completion: int, batch: int,
            work: Path) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.data.builtin_dataset import arithmetic_rl_records

    # As TuneDeck's rank runs (OMP_NUM_THREADS=1, the test harness's launch): one thread each.
    torch.set_num_threads(1)
    records = arithmetic_rl_records()
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": record["prompt"]}]}
                                 for record in records])
    timings = {"step": [], "sampling": []}

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return super()._generate_and_score_completions(*args, **kwargs)
            finally:
                timings["sampling"].append(time.perf_counter() - started)

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            timings["step"].append(time.perf_counter() - self.started)

    config = GRPOConfig(
        output_dir=str(work / "trl"), per_device_train_batch_size=batch,
        num_generations=generations, max_completion_length=completion, max_steps=steps,
        learning_rate=LEARNING_RATE, lr_scheduler_type="constant", logging_steps=steps,
        report_to=[], use_cpu=True, bf16=False, save_strategy="no", temperature=1.0,
        beta=0.0, loss_type="dapo", seed=SEED, gradient_accumulation_steps=1,
        disable_tqdm=True, dataloader_num_workers=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = Timed(model=model, reward_funcs=sevens, args=config, train_dataset=dataset,
                    processing_class=tokenizer, callbacks=[StepClock()],
                    peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
                                           target_modules="all-linear", task_type="CAUSAL_LM"))
    trainer.train()
    step, sampling = timings["step"][1:], timings["sampling"][1:len(timings["step"])]
    return {"step": statistics.median(step), "sampling": statistics.median(sampling),
            "training": statistics.median([a - b for a, b in zip(step, sampling)])}


def run_tunedeck(home: Path, *, steps: int, generations: int, completion: int, batch: int,
                 work: Path) -> dict[str, float]:
    from trainer_runs import TrainerFailed, run_plain_torchrun

    from tunedeck.spec.job_spec import JobSpec

    spec = {"model": "builtin:tiny-llama", "objective": "grpo",
            "dataset": "builtin:arithmetic-rl", "num_gpus": 1,
            "max_steps": steps, "micro_batch_size": batch, "seq_len": 64 + completion,
            "precision": "fp32", "learning_rate": LEARNING_RATE, "lr_schedule": "constant",
            "seed": SEED, "lora": {"r": 16, "alpha": 32, "dropout": 0.05},
            "grpo": {"num_generations": generations, "max_completion_length": completion,
                     "loss_type": "dapo", "rewards": [{"name": "contains", "text": SEVEN}],
                     "rollouts_every": 0}}
    os.environ["OMP_NUM_THREADS"] = "1"  # one thread, as TRL's side runs
    try:
        run = run_plain_torchrun(home, JobSpec.model_validate(spec), work / "tunedeck",
                                 metrics=True, timeout_seconds=1200)
    except TrainerFailed as failure:
        raise SystemExit(f"the TuneDeck run failed: {failure}") from None
    rows = run.events(0, "step")[1:]
    return {"step": statistics.median(row["step_seconds"] for row in rows),
            "sampling": statistics.median(row["sampling_seconds"] + row["scoring_seconds"]
                                          for row in rows),
            "training": statistics.median(row["training_seconds"] for row in rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--completion", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8, help="completions per step")
    args = parser.parse_args()
    from trainer.model.builtin_model import ensure_builtin_model

    with tempfile.TemporaryDirectory(prefix="grpo-vs-trl-") as folder:
        work = Path(folder)
        home = work / "home"
        os.environ["TUNEDECK_HOME"] = str(home)
        model_dir = ensure_builtin_model(home)
        sizes = dict(steps=args.steps, generations=args.generations, completion=args.completion,
                     batch=args.batch, work=work)
        trl = run_trl(model_dir, **sizes)
        tunedeck = run_tunedeck(home, **sizes)
    print(f"GRPO, built-in tiny Llama, LoRA, fp32, 1 CPU process each: {args.batch} completions "
          f"a step ({args.batch // args.generations} prompts x G {args.generations}), "
          f"{args.completion} tokens at most, median of steps 2-{args.steps}")
    print(f"{'seconds a step':<22}{'TRL 1.16':>10}{'TuneDeck':>10}{'ratio':>8}")
    for part in ("step", "sampling", "training"):
        print(f"{part:<22}{trl[part]:>10.4f}{tunedeck[part]:>10.4f}"
              f"{tunedeck[part] / trl[part]:>8.2f}")
    print(json.dumps({"trl": trl, "tunedeck": tunedeck,
                      "ratio": {part: tunedeck[part] / trl[part] for part in trl}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
