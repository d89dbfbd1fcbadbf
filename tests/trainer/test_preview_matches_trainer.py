"""The preview's trainer settings are what the trainer does: the learning rates the training
loop sets (and reports) at the preview's landmark steps, the steps it evaluates and saves at,
the batch layout its data path deals out on every rank, and the kernels `auto` resolves to.

In one process: the real training loop (trainer/train.py's `run_training_loop`) in a
process group of one, over the real micro-batches of the built-in data, with a backend
whose optimizer is a real AdamW over one weight; the real data path
(`prepare_training_data`) for each rank of a 2-rank job."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from tunedeck.launch_config import trainer_settings
from tunedeck.run_folder import RunFolder
from tunedeck.spec.job_spec import JobSpec
from trainer.checkpoint import Checkpoints
from trainer.data.tokenized_data import TokenizedData
from trainer.evaluation import build_evaluation
from trainer.objectives import objective_type
from trainer.objectives.dpo import DpoObjective
from trainer.objectives.sft import SftObjective
from trainer.rank import RankContext
from trainer.speed.options import resolve_auto_kernels
from trainer.telemetry import NullTelemetry
from trainer.train import prepare_training_data, run_training_loop

CPU = torch.device("cpu")


def rank(number: int, world_size: int) -> RankContext:
    return RankContext(rank=number, local_rank=number, world_size=world_size,
                       local_world_size=world_size, device=CPU)


@pytest.fixture
def process_group_of_one(tmp_path):
    """What the loop's all-reduces need, in this process: a gloo group of one rank."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1)
    yield rank(0, 1)
    dist.destroy_process_group()


class RecordingTelemetry(NullTelemetry):
    def __init__(self):
        self.learning_rates: dict[int, float] = {}
        self.eval_steps: list[int] = []

    def step(self, *, step: int, learning_rate: float, **fields) -> None:
        self.learning_rates[step] = learning_rate

    def eval(self, *, step: int, eval_loss: float, eval_tokens: int) -> None:
        self.eval_steps.append(step)


class OneWeightBackend:
    """A backend's loop-facing side over a real AdamW on one weight: it records the rate
    the optimizer steps with, and the rows of each step's micro-batches."""

    def __init__(self):
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.optimizer = torch.optim.AdamW([self.weight], lr=0.0)
        self.stepped_rates: list[float] = []
        self.rows_per_step: list[int] = []
        self._rows = 0

    def set_learning_rate(self, learning_rate: float) -> None:  # as both backends set it
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    def step(self, batch, *, loss_weight: float):
        self._rows += batch["input_ids"].shape[0]
        loss = (self.weight ** 2).sum() * loss_weight
        loss.backward()
        return loss.detach().reshape(1)

    def optimizer_step(self):
        self.stepped_rates.append(self.optimizer.param_groups[0]["lr"])
        self.rows_per_step.append(self._rows)
        self._rows = 0
        norm = self.weight.grad.norm()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return norm

    def evaluate(self, batch):
        return torch.tensor(1.0), torch.tensor(1.0)

    def footprint(self):
        return SimpleNamespace(optimizer_bytes=0)  # the loop asks until there is some


def tokenized(spec: JobSpec, tokenizer, *, ranks: int) -> TokenizedData:
    splits = objective_type(spec).tokenize_splits(spec, tokenizer, ranks=ranks)
    return TokenizedData(train_rows=splits["rows"]["train"], eval_rows=splits["rows"]["eval"],
                         train_examples=splits["train_examples"], seconds=0.0)


def test_the_loop_sets_the_previews_rates_and_evaluates_and_saves_when_it_says(
        process_group_of_one, builtin_tokenizer, tmp_path, monkeypatch):
    context = process_group_of_one
    spec = JobSpec(max_steps=13, warmup_steps=3, learning_rate=1e-3, micro_batch_size=2,
                   grad_accum=2, seq_len=64, eval_split=0.05, eval_every_steps=5,
                   checkpoint_every_steps=4)
    preview = trainer_settings(spec)
    data_in = tokenized(spec, builtin_tokenizer, ranks=1)
    objective = SftObjective(loss_in_model=False, aux_loss_coefficient=0.0)
    data = prepare_training_data(spec, builtin_tokenizer, data_in, context=context,
                                 objective=objective)
    telemetry, backend, saved = RecordingTelemetry(), OneWeightBackend(), []
    monkeypatch.setattr(Checkpoints, "save", lambda self, backend, *, step: saved.append(step))
    evaluation = build_evaluation(data_in.eval_rows, pad_token_id=builtin_tokenizer.pad_token_id,
                                  spec=spec, context=context, telemetry=telemetry,
                                  objective=objective)
    run_training_loop(backend, data.batches, spec=spec, start_step=0,
                      total_steps=data.total_steps,
                      checkpoints=Checkpoints(RunFolder(tmp_path / "run"), spec,
                                              total_steps=data.total_steps, context=context,
                                              telemetry=telemetry),
                      evaluation=evaluation, context=context, telemetry=telemetry)

    assert data.total_steps == preview["steps"]["total"] == 13
    landmarks = preview["lr_schedule"]["at_steps"]
    assert [point["step"] for point in landmarks] == [1, 3, 4, 8, 13]
    # Exactly: the preview's rates are the loop's, not a formula beside it.
    assert [telemetry.learning_rates[point["step"]] for point in landmarks] == \
        [point["learning_rate"] for point in landmarks]
    assert backend.stepped_rates == [telemetry.learning_rates[step] for step in range(1, 14)]
    assert backend.rows_per_step == [preview["batch"]["per_step"]] * 13 == [4] * 13
    assert telemetry.eval_steps == [5, 10, 13] and len(telemetry.eval_steps) == \
        preview["eval"]["runs"]
    assert saved == [4, 8, 12] and len(saved) == preview["checkpoints"]["saves"]


@pytest.mark.parametrize("fields", [
    {"micro_batch_size": 3, "grad_accum": 2},
    {"micro_batch_size": 2, "grad_accum": 3, "packing": True},
    {"micro_batch_size": 4, "grad_accum": 1, "padding_free": True},
    {"micro_batch_size": 2, "grad_accum": 2, "objective": "dpo",
     "dataset": "builtin:arithmetic-preference"},
], ids=["examples", "packed", "padding-free", "pairs"])
def test_every_rank_deals_out_the_previews_batch_layout(fields, builtin_tokenizer):
    spec = JobSpec(epochs=1, num_gpus=2, seq_len=64, **fields)
    layout = trainer_settings(spec)["batch"]
    data_in = tokenized(spec, builtin_tokenizer, ranks=2)
    units, tokens, longest = 0, 0, 0
    for number in range(2):
        context = rank(number, 2)
        objective = (DpoObjective(spec, adapter=True) if spec.objective == "dpo" else
                     SftObjective(loss_in_model=False, aux_loss_coefficient=0.0))
        data = prepare_training_data(spec, builtin_tokenizer, data_in, context=context,
                                     objective=objective)
        step = [next(data.batches) for _ in range(layout["grad_accum"])]
        # A micro-batch's loss units are its pairs under dpo; its rows are what it counts else.
        units += sum(batch.loss_tokens if spec.objective == "dpo" else len(batch.row_lengths)
                     for batch in step)
        tokens += sum(batch.token_count for batch in step)
        longest = max(longest, *(length for batch in step for length in batch.row_lengths))
        # Epochs: the step count the preview leaves to the data follows the rule it states.
        unit_count = objective.example_count(data_in.train_rows)
        assert data.total_steps == math.ceil(unit_count / layout["per_step"])
        assert f"= {layout['per_step']} {layout['unit']} a step" in data.description
    assert units == layout["per_step"] == layout["micro_batch_size"] * layout["grad_accum"] * 2
    assert longest <= spec.seq_len and tokens <= layout["tokens_per_step_at_most"]


def test_a_cpu_rank_runs_the_kernels_the_preview_says_a_cpu_host_runs(builtin_model_dir):
    spec = JobSpec(max_steps=1)
    preview = trainer_settings(spec)["kernels"]
    resolved, said = resolve_auto_kernels(spec, str(builtin_model_dir), context=rank(0, 1))
    assert resolved.kernels == preview["cpu_host"]["kernels"] == "none"
    assert said == f"kernels auto: none ({preview['cpu_host']['why']})"


def test_a_cuda_rank_runs_the_kernels_the_preview_says_a_gpu_worker_runs(builtin_model_dir):
    """No GPU is touched: the rank's device only says CUDA; liger-kernel must be installed,
    as on a GPU worker."""
    pytest.importorskip("liger_kernel")
    cuda_rank = RankContext(rank=0, local_rank=0, world_size=1, local_world_size=1,
                            device=torch.device("cuda:0"))
    for method in ("lora", "full"):
        spec = JobSpec(max_steps=1, method=method)
        preview = trainer_settings(spec)["kernels"]["gpu_worker"]
        resolved, said = resolve_auto_kernels(spec, str(builtin_model_dir), context=cuda_rank)
        assert (resolved.kernels, said) == (preview["kernels"],
                                            f"kernels auto: {preview['kernels']} "
                                            f"({preview['why']})")
