"""`train(spec, run)`: one fine-tune, read top to bottom.

Read the data, load the model and tokenizer, apply the method, wrap with the backend, loop,
gather, save and merge. Every rank runs this same function; only rank 0 writes the model.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from tunedeck.job_spec import JobSpec
from tunedeck.run_folder import RunFolder, read_json

from trainer.backends import TrainingBackend, backend_class
from trainer.datasets import load_examples, micro_batches, tokenize_examples
from trainer.export import export_weights
from trainer.method import apply_method, trainable_parameter_count
from trainer.model_source import load_base_model, load_tokenizer, resolve_model_source
from trainer.rank import RankContext, seed_everything
from trainer.schedule import learning_rate_at, total_optimizer_steps
from trainer.telemetry import Telemetry

PRINT_EVERY_STEPS = 10


def train(spec: JobSpec, run: RunFolder, *, context: RankContext, telemetry: Telemetry) -> None:
    backend_type = backend_class(spec.backend)
    # The data first: a wrong path fails in a second, not after a model load.
    examples = load_examples(spec.dataset)
    telemetry.notice(f"loading model {spec.model}")
    model_source = resolve_model_source(spec.model)
    backend_type.init_distributed(context)

    tokenizer = load_tokenizer(model_source)
    seed_everything(spec.seed)
    model = apply_method(load_base_model(model_source), spec)

    tokenized = tokenize_examples(tokenizer, examples, spec.seq_len, source=spec.dataset)
    batches = micro_batches(tokenized, micro_batch_size=spec.micro_batch_size,
                            pad_token_id=tokenizer.pad_token_id, seed=spec.seed,
                            rank=context.rank, world_size=context.world_size)
    total_steps = total_optimizer_steps(
        max_steps=spec.max_steps, epochs=spec.epochs, example_count=len(tokenized),
        micro_batch_size=spec.micro_batch_size, grad_accum=spec.grad_accum,
        world_size=context.world_size)

    if spec.activation_checkpointing:
        # Non-reentrant checkpointing composes with FSDP2, DeepSpeed and frozen (LoRA) inputs.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    backend = backend_type.wrap(model, read_json(run.backend_config_file(spec.backend)), context)
    telemetry.notice(f"training started: {total_steps} steps, {len(tokenized)} examples, "
                     f"{trainable_parameter_count(model):,} trainable parameters")
    throughput = run_training_loop(backend, batches, spec=spec, total_steps=total_steps,
                                   context=context, telemetry=telemetry)
    if context.is_main:
        # One line on stdout with or without telemetry: bench/overhead.py compares these.
        print(f"training summary: {throughput.as_text()}", flush=True)

    trained_state = backend.gather_trainable_state()
    if context.is_main:
        telemetry.notice("saving adapter and merged model" if spec.method == "lora"
                         else "saving merged model")
        export_weights(spec, run, trained_state=trained_state, model_source=model_source,
                       tokenizer=tokenizer)
        telemetry.notice(f"merged model saved to {run.merged_dir}")
    dist.destroy_process_group()


@dataclass
class Throughput:
    """Tokens and seconds of the steps after the first (the first pays one-off costs)."""

    tokens: float = 0.0
    seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)

    def add(self, *, step: int, tokens: float, seconds: float) -> None:
        if step > 1:
            self.tokens += tokens
            self.seconds += seconds
            self.step_seconds.append(seconds)

    def as_text(self) -> str:
        tokens_per_second = self.tokens / self.seconds if self.seconds else 0.0
        median_step_seconds = statistics.median(self.step_seconds) if self.step_seconds else 0.0
        return (f"tokens={int(self.tokens)} seconds={self.seconds:.4f} "
                f"tokens_per_second={tokens_per_second:.2f} "
                f"median_step_seconds={median_step_seconds:.6f}")


def run_training_loop(backend: TrainingBackend, batches: Iterator[dict[str, Any]], *, spec: JobSpec,
                      total_steps: int, context: RankContext, telemetry: Telemetry) -> Throughput:
    micro_batches_per_step = spec.grad_accum * context.world_size
    throughput = Throughput()
    for step in range(1, total_steps + 1):
        started = time.perf_counter()
        learning_rate = learning_rate_at(step - 1, peak_learning_rate=spec.learning_rate,
                                         warmup_steps=spec.warmup_steps, total_steps=total_steps,
                                         schedule=spec.lr_schedule)
        backend.set_learning_rate(learning_rate)
        loss_sum = torch.zeros((), dtype=torch.float64, device=context.device)
        token_count = torch.zeros((), dtype=torch.float64, device=context.device)
        for _ in range(spec.grad_accum):
            batch = {name: tensor.to(context.device, non_blocking=True)
                     for name, tensor in next(batches).items()}
            loss_sum += backend.step(batch)
            token_count += batch["attention_mask"].sum()  # non-pad tokens
        grad_norm = backend.optimizer_step()
        loss_total, tokens, grad_norm_value = reduce_step_totals(loss_sum, token_count, grad_norm)
        step_seconds = time.perf_counter() - started
        loss = loss_total / micro_batches_per_step
        stop_on_non_finite_loss(loss, step=step, precision=spec.precision)
        telemetry.step(step=step, loss=loss, learning_rate=learning_rate, grad_norm=grad_norm_value,
                       tokens_per_second=tokens / step_seconds, step_seconds=step_seconds,
                       tokens=int(tokens))
        telemetry.memory(step=step)
        throughput.add(step=step, tokens=tokens, seconds=time.perf_counter() - started)
        if context.is_main and (step % PRINT_EVERY_STEPS == 0 or step in (1, total_steps)):
            print(f"step {step}/{total_steps} loss {loss:.4f} lr {learning_rate:.2e} "
                  f"grad_norm {grad_norm_value:.3f} {step_seconds:.2f}s", flush=True)
    return throughput


def stop_on_non_finite_loss(loss: float, *, step: int, precision: str) -> None:
    """Every rank sees the same all-reduced loss, so all of them stop together."""
    if math.isfinite(loss):
        return
    advice = "lower the learning rate" + (", or use bf16 (fp16 overflows)" if precision == "fp16" else "")
    raise FloatingPointError(f"loss became {loss} at step {step}; {advice}")


def reduce_step_totals(loss_sum, token_count, grad_norm) -> tuple[float, float, float]:
    """Sum loss and tokens over ranks in one small all_reduce, then read everything back
    to the host at once: the only sync a step adds. (The norm is global already.)"""
    totals = torch.stack([loss_sum, token_count])
    dist.all_reduce(totals)
    everything = torch.cat([totals, grad_norm.detach().reshape(1).to(totals)])
    loss_total, tokens, grad_norm_value = everything.tolist()
    return loss_total, tokens, grad_norm_value
