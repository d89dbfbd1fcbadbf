"""`train(spec, run)`: one fine-tune, read top to bottom.

Load the tokenizer, tokenize the data (once a node, trainer/data/tokenized_data.py), load the
model, apply the method, wrap with the backend, resume from the latest checkpoint if asked,
loop (saving a checkpoint every N steps), gather, save and merge. Every rank runs this same
function; only rank 0 writes the model.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from collections.abc import Iterator

import torch
import torch.distributed as dist

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder, read_json
from tunedeck.training_plan import attention_implementation, quantization_config
from tunedeck.training_steps import BatchLayout, LearningRateSchedule

from trainer.backends import TrainingBackend, backend_class
from trainer.checkpoint import Checkpoints, skip_micro_batches
from trainer.data.datasets import MicroBatch
from trainer.evaluation import Evaluation, NoEvaluation, build_evaluation
from trainer.footprint import parameter_bytes
from trainer.model.export import export_weights
from trainer.model.lora_targets import resolve_lora_targets
from trainer.model.method import (apply_method, set_training_mode, trainable_parameter_count,
                                  uses_adapter)
from trainer.mfu import MfuMeter
from trainer.objectives import (TrainingObjective, build_objective, needs_frozen_reference,
                                objective_type)
from trainer.startup.progress import compiling_ops
from trainer.model.model_source import load_base_model, load_tokenizer, resolve_model_source
from trainer.rank import RankContext, seed_everything
from trainer.speed.options import (apply_kernels, check_speed_options, loss_in_model,
                                   resolve_auto_kernels)
from trainer.startup.startup_clock import StartupClock
from trainer.startup.startup_gc import resume_collection_after_imports
from trainer.telemetry import (Telemetry, allocator_peaks, first_step_memory_text,
                               start_training_peaks)
from trainer.throughput import Throughput
from trainer.data.tokenized_data import TokenizedData, remove_tokenized, tokenize_once
from trainer.token_loss import step_loss_weight

PRINT_EVERY_STEPS = 10


def train(spec: JobSpec, run: RunFolder, *, context: RankContext, telemetry: Telemetry,
          resume: bool = False) -> None:
    clock = StartupClock.since_process_start()
    backend_type = backend_class(spec.backend)
    clock.mark("imports")
    telemetry.notice(f"loading model {spec.model}")
    model_source = resolve_model_source(spec.model)
    # From here on the spec names the kernels this host runs, never auto.
    spec, kernels_choice = resolve_auto_kernels(spec, model_source, context=context)
    if context.is_main:
        announce(kernels_choice, telemetry=telemetry)
    check_speed_options(spec, model_source, context=context)
    backend_settings = read_json(run.backend_config_file(spec.backend))
    slow_start = backend_type.startup_notice(backend_settings, context)
    if context.is_main:
        announce(slow_start, telemetry=telemetry)
    # Ops missing from the build cache compile on first use, in wrapping the model (ZeRO-2's
    # CPU Adam with an offloaded optimizer).
    compiling = slow_start is not None and context.is_main
    backend_type.init_distributed(context)
    clock.mark("distributed init")

    tokenizer = load_tokenizer(model_source, trust_remote_code=spec.trust_remote_code)
    clock.mark("tokenizer")
    # The data before the model: a bad record fails in seconds, not after a model load. The
    # eval examples are held out here, before any training batch exists.
    tokenized = tokenize_once(spec, tokenizer, run, context=context, telemetry=telemetry,
                              tokenize_splits=objective_type(spec).tokenize_splits)
    announce_tokenized(tokenized, telemetry=telemetry, context=context)
    clock.mark("data")
    # transformers and torch are imported by now (the model's own modules and peft are
    # small next to them).
    resume_collection_after_imports()
    seed_everything(spec.seed)
    base_model = load_base_model(model_source, quantization=quantization_config(spec),
                                 device=context.device, trust_remote_code=spec.trust_remote_code,
                                 attn_implementation=attention_implementation(spec),
                                 telemetry=telemetry if context.is_main else None)
    apply_kernels(base_model, spec)  # before the adapter wraps its modules
    # A full fine-tune's DPO reference: the base as loaded, frozen, placed by the backend.
    reference_model = (backend_type.wrap_frozen(copy.deepcopy(base_model), backend_settings,
                                                context)
                       if needs_frozen_reference(spec) else None)
    clock.mark("base model")
    if uses_adapter(spec) and context.is_main:
        telemetry.notice(resolve_lora_targets(base_model, spec.lora).as_text())
    model = apply_method(base_model, spec)
    clock.mark("method")
    objective = build_objective(spec, model, reference_model=reference_model,
                                loss_in_model=loss_in_model(spec), tokenizer=tokenizer)

    set_training_mode(model, spec)
    # After apply_method: which weights are trained is what tells LoRA's FLOPs from full's.
    mfu_meter = MfuMeter.for_model(model, device=context.device, world_size=context.world_size)
    with compiling_ops(telemetry, compiling=compiling):
        backend = backend_type.wrap(model, backend_settings, context, objective=objective)
    clock.mark("backend")
    # Before a resumed run loads its checkpoint: a precomputed reference is the base's.
    objective.prepare(backend, tokenized.train_rows, spec=spec,
                      pad_token_id=tokenizer.pad_token_id, context=context, telemetry=telemetry,
                      eval_rows=tokenized.eval_rows)
    evaluation = build_evaluation(tokenized.eval_rows, pad_token_id=tokenizer.pad_token_id,
                                  spec=spec, context=context, telemetry=telemetry,
                                  objective=objective)
    data = prepare_training_data(spec, tokenizer, tokenized, context=context, objective=objective)
    if context.is_main:
        print(clock.as_text(), flush=True)
    telemetry.notice(f"training started: {data.total_steps} steps, {data.description}, "
                     f"{trainable_parameter_count(model):,} trainable parameters")
    checkpoints = Checkpoints(run, spec, total_steps=data.total_steps, context=context,
                              telemetry=telemetry)
    start_step = checkpoints.resume(backend) if resume else 0
    batches = skip_micro_batches(data.batches, steps=start_step, grad_accum=spec.grad_accum)
    throughput = run_training_loop(backend, batches, spec=spec, start_step=start_step,
                                   total_steps=data.total_steps, checkpoints=checkpoints,
                                   evaluation=evaluation, context=context, telemetry=telemetry,
                                   mfu_meter=mfu_meter, figure_names=objective.figure_names,
                                   step_figures=objective.step_figures,
                                   reference_bytes=parameter_bytes(reference_model.parameters())
                                   if reference_model is not None else 0)
    if context.is_main:
        # One line on stdout with or without telemetry: bench/overhead.py compares these.
        print(f"training summary: {throughput.as_text()}", flush=True)
    export_trained_model(backend, spec, run, model_source=model_source, tokenizer=tokenizer,
                         context=context, telemetry=telemetry)
    remove_tokenized(run, context=context)


def announce(notice: str | None, *, telemetry: Telemetry) -> None:
    """Say it in the job's events and its log (rank 0 asks): why the job sits at step 0,
    which kernels auto chose."""
    if notice is not None:
        telemetry.notice(notice)
        print(notice, flush=True)


@dataclass(frozen=True)
class TrainingData:
    batches: Iterator[MicroBatch]
    total_steps: int
    description: str


def announce_tokenized(tokenized: TokenizedData, *, telemetry: Telemetry,
                       context: RankContext) -> None:
    if context.is_main:
        telemetry.notice(f"tokenized {tokenized.train_examples:,} examples in "
                         f"{tokenized.seconds:.1f} s, once for the "
                         f"{context.local_world_size} rank(s) of each node")


def prepare_training_data(spec: JobSpec, tokenizer, tokenized: TokenizedData, *,
                          context: RankContext, objective: TrainingObjective) -> TrainingData:
    """This rank's endless micro-batches, and how many optimizer steps the job runs: the
    batch layout the preview shows (tunedeck/training_steps.py), on this launch's ranks."""
    rows = tokenized.train_rows
    batches = objective.micro_batches(rows, spec=spec, pad_token_id=tokenizer.pad_token_id,
                                      context=context)
    layout = BatchLayout.of(spec, world_size=context.world_size)
    total_steps = layout.total_steps(max_steps=spec.max_steps, epochs=spec.epochs,
                                     unit_count=objective.example_count(rows))
    packed_rows = f" in {len(rows)} packed rows" if spec.packing else ""
    padding_free = ", each micro-batch one padding-free row" if spec.padding_free else ""
    examples = f"{tokenized.train_examples} {'pairs' if objective.unit == 'pairs' else 'examples'}"
    return TrainingData(batches, total_steps,
                        f"{examples}{packed_rows}{padding_free}; {layout.as_text()}")


def export_trained_model(backend: TrainingBackend, spec: JobSpec, run: RunFolder, *,
                         model_source: str, tokenizer, context: RankContext,
                         telemetry: Telemetry) -> None:
    """Gather the trained weights to rank 0, leave the process group, write adapter/ and merged/."""
    trained_state = backend.gather_trainable_state()
    # Every rank leaves the process group together, before rank 0's export (no collective
    # needed there): a rank that tears gloo down while another still holds its connections
    # can abort ("terminate called without an active exception"), and a barrier after the
    # export would time out on a model that takes long to write.
    dist.barrier()
    dist.destroy_process_group()
    if not context.is_main:
        return
    telemetry.notice("saving adapter and merged model" if uses_adapter(spec) else "saving merged model")
    export_weights(spec, run, trained_state=trained_state, model_source=model_source,
                   tokenizer=tokenizer)
    telemetry.notice(f"merged model saved to {run.merged_dir}")


def run_training_loop(backend: TrainingBackend, batches: Iterator[MicroBatch], *, spec: JobSpec,
                      start_step: int, total_steps: int, checkpoints: Checkpoints,
                      evaluation: Evaluation | NoEvaluation, context: RankContext,
                      telemetry: Telemetry, mfu_meter: MfuMeter = MfuMeter(None, None),
                      figure_names: tuple[str, ...] = (), reference_bytes: int = 0,
                      step_figures=None) -> Throughput:
    throughput = Throughput(first_step=start_step + 1)
    footprint_pending = True
    # The schedule the preview shows (tunedeck/training_steps.py), over this run's steps.
    schedule = LearningRateSchedule.of(spec, total_steps=total_steps)
    start_training_peaks(context.device)
    for step in range(start_step + 1, total_steps + 1):
        started = time.perf_counter()
        learning_rate = schedule.rate(step)
        backend.set_learning_rate(learning_rate)
        step_batches = [next(batches) for _ in range(spec.grad_accum)]
        loss, tokens, grad_norm_value, figures = run_optimizer_step(
            backend, step_batches, context=context,
            report_memory=context.is_main and step == start_step + 1)
        step_seconds = time.perf_counter() - started
        stop_on_non_finite_loss(loss, step=step, precision=spec.precision)
        reporting = time.perf_counter()
        # grpo's rewards and completion lengths (a collective: every rank asks).
        round_figures = step_figures(step_batches, step=step, context=context,
                                     step_seconds=step_seconds) if step_figures else {}
        telemetry.step(step=step, loss=loss, learning_rate=learning_rate, grad_norm=grad_norm_value,
                       tokens_per_second=tokens / step_seconds, step_seconds=step_seconds,
                       tokens=int(tokens), **dict(zip(figure_names, figures)), **round_figures,
                       **mfu_meter.step_fields(tokens / step_seconds,
                                               [batch.row_lengths for batch in step_batches]))
        telemetry.memory(step=step)
        footprint_pending = report_footprint(backend, telemetry, step=step,
                                             pending=footprint_pending,
                                             reference_bytes=reference_bytes)
        reported = time.perf_counter()
        throughput.add(step=step, tokens=tokens, seconds=reported - started,
                       telemetry_seconds=reported - reporting)
        if context.is_main and (step % PRINT_EVERY_STEPS == 0 or step in (start_step + 1, total_steps)):
            print(f"step {step}/{total_steps} loss {loss:.4f} lr {learning_rate:.2e} "
                  f"grad_norm {grad_norm_value:.3f} {step_seconds:.2f}s", flush=True)
        evaluation.run_if_due(backend, step=step, total_steps=total_steps)
        checkpoints.save_if_due(backend, step=step)
    return throughput


def report_footprint(backend: TrainingBackend, telemetry: Telemetry, *, step: int,
                     pending: bool, reference_bytes: int = 0) -> bool:
    """Once a launch, the bytes the memory planner predicts, measured on the tensors: after
    the first update that created optimizer state (an fp16 step the loss scaler skips
    creates none). Returns whether it is still pending. `reference_bytes`: a DPO reference
    copy's weights on this rank, which the plan counts among the weights too."""
    if not pending:
        return False
    footprint = backend.footprint()
    if footprint.optimizer_bytes == 0:
        return True
    fields = footprint.as_dict()
    fields["params_bytes"] += reference_bytes
    telemetry.footprint(step=step, **fields)
    return False


def stop_on_non_finite_loss(loss: float, *, step: int, precision: str) -> None:
    """Every rank sees the same all-reduced loss, so all of them stop together."""
    if math.isfinite(loss):
        return
    advice = "lower the learning rate" + (", or use bf16 (fp16 overflows)" if precision == "fp16" else "")
    raise FloatingPointError(f"loss became {loss} at step {step}; {advice}")


def run_optimizer_step(backend: TrainingBackend, step_batches: list[MicroBatch], *,
                       context: RankContext, report_memory: bool = False
                       ) -> tuple[float, float, float, list[float]]:
    """Forward and backward of the step's micro-batches, then the update: (the step's loss,
    its non-pad tokens on every rank, the global gradient norm, the objective's figures).
    The loss, the gradient and each figure are the mean over every loss unit of the step
    on every rank (answer tokens, or pairs: trainer/objectives/), so the same global batch
    trains the same model however it is split. `report_memory` prints where a GPU's memory
    peaked, before and with the update."""
    loss_tokens, tokens = all_reduce_sums(
        [sum(batch.loss_tokens for batch in step_batches),
         sum(batch.token_count for batch in step_batches)], context=context)
    loss_weight = step_loss_weight(world_size=context.world_size, step_loss_tokens=loss_tokens)
    sums = None  # [loss, *figures], summed over the step's micro-batches
    for micro_batch in step_batches:
        batch = {name: tensor.to(context.device, non_blocking=True)
                 for name, tensor in micro_batch.inputs.items()}
        micro_sums = backend.step(batch, loss_weight=loss_weight).to(torch.float64)
        sums = micro_sums if sums is None else sums + micro_sums
    before_update = allocator_peaks(context.device) if report_memory else None
    grad_norm = backend.optimizer_step()
    if before_update is not None:
        print(first_step_memory_text(before_update, allocator_peaks(context.device)), flush=True)
    totals, grad_norm_value = reduce_step_sums(sums, grad_norm)
    units = max(loss_tokens, 1.0)
    return totals[0] / units, tokens, grad_norm_value, [total / units for total in totals[1:]]


def all_reduce_sums(values: list[float], *, context: RankContext) -> list[float]:
    """Each value summed over ranks, in one small all_reduce: the token counts a step's
    loss weight needs before its first backward."""
    totals = torch.tensor(values, dtype=torch.float64, device=context.device)
    dist.all_reduce(totals)
    return totals.tolist()


def reduce_step_sums(sums, grad_norm) -> tuple[list[float], float]:
    """Sum the loss (and the objective's figures) over ranks in one small all_reduce, then
    read them and the norm back to the host at once. (The norm is global already.)"""
    dist.all_reduce(sums)
    everything = torch.cat([sums.reshape(-1), grad_norm.detach().reshape(1).to(sums)]).tolist()
    return everything[:-1], everything[-1]
