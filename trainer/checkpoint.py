"""Checkpoints: save every N optimizer steps, keep the newest K, resume from the latest.

A checkpoint is the folder `checkpoints/step-<N>/` (names from `tunedeck.run_folder`):

- the backend's own files, written by every rank: DeepSpeed's checkpoint (the trainable
  weights, and each rank's ZeRO partition of the fp32 masters and optimizer state) or a
  torch.distributed.checkpoint of the sharded model and optimizer (one shard file a rank);
- `rng-rank-<K>.pt`: each rank's random generators, so dropout after a resume draws exactly
  what it would have drawn in an uninterrupted run;
- `trainer_state.json`, written last by rank 0 once every rank has saved its part.

It is written as `checkpoints/.step-<N>.partial/` and renamed to its final name by rank 0
only once all of that is in it: a disk that fills mid-save, or a kill, leaves a temporary
folder that resume never reads, never a final name with files missing. (A final name
without the marker, as saves left it before the rename, is partial too.) Rank 0 removes
such leftovers before the next save and at a resume, so they do not hold the disk.

The data needs no saved state: the micro-batch stream is a pure function of the seed, so a
resumed run skips the micro-batches that the saved steps consumed.
"""
from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import (CHECKPOINT_STATE_FILE, RunFolder, read_json,
                                 remove_partial_checkpoints, write_json)
from tunedeck.training_steps import checkpoint_due

from trainer.backends import TrainingBackend
from trainer.rank import RankContext
from trainer.telemetry import Telemetry

RNG_STATE_FILE = "rng-rank-{rank}.pt"
Batch = TypeVar("Batch")


class Checkpoints:
    """One run's checkpoints as one rank sees them. Every rank calls every method: saving
    and loading are collectives."""

    def __init__(self, run: RunFolder, spec: JobSpec, *, total_steps: int, context: RankContext,
                 telemetry: Telemetry):
        self._run = run
        self._every_steps = spec.checkpoint_every_steps
        self._keep = spec.keep_checkpoints
        self._context = context
        self._telemetry = telemetry
        # What a checkpoint must share with the run that resumes it: another world size
        # deals the data out differently, another length changes the learning-rate curve.
        self._run_identity = {"backend": spec.backend, "method": spec.method, "seed": spec.seed,
                              "total_steps": total_steps, "world_size": context.world_size}

    def save_if_due(self, backend: TrainingBackend, *, step: int) -> None:
        if checkpoint_due(step, every_steps=self._every_steps):
            self.save(backend, step=step)

    def save(self, backend: TrainingBackend, *, step: int) -> None:
        staging = self._run.partial_checkpoint_dir(step)
        if self._context.is_main:
            # What an earlier attempt, killed or out of disk mid-save, left half-written.
            remove_partial_checkpoints(self._run)
        dist.barrier()
        staging.mkdir(parents=True, exist_ok=True)
        backend.save_checkpoint(staging)
        torch.save(rng_state(self._context),
                   staging / RNG_STATE_FILE.format(rank=self._context.rank))
        dist.barrier()  # every rank's part is on disk before the folder is marked complete
        if self._context.is_main:
            path = self._complete(staging, step=step)
            for _, old_path in self._run.completed_checkpoints()[:-self._keep]:
                remove_checkpoint(old_path)
            self._telemetry.notice(f"checkpoint saved at step {step} to {path}")

    def _complete(self, staging: Path, *, step: int) -> Path:
        """Mark the staged checkpoint complete and rename it to its final name (rank 0)."""
        write_json(staging / CHECKPOINT_STATE_FILE, {"step": step, **self._run_identity})
        path = self._run.checkpoint_dir(step)
        if path.exists():  # a complete one of an earlier attempt that saved the same step
            remove_checkpoint(path)
        staging.rename(path)
        return path

    def resume(self, backend: TrainingBackend) -> int:
        """Load the latest complete checkpoint into `backend` and this rank's random
        generators; the optimizer step it was saved after (0 when there is none)."""
        if self._context.is_main:
            # Never read (resume looks at complete ones only), but they hold the disk.
            remove_partial_checkpoints(self._run)
        completed = self._run.completed_checkpoints()
        if not completed:
            self._telemetry.notice(f"no complete checkpoint in {self._run.checkpoints_dir}; "
                                   "starting from step 0")
            return 0
        step, path = completed[-1]
        check_resumable(read_json(path / CHECKPOINT_STATE_FILE), self._run_identity, path=path)
        backend.load_checkpoint(path)
        # Restored last, so nothing in the loading draws from the generators afterwards.
        restore_rng_state(torch.load(path / RNG_STATE_FILE.format(rank=self._context.rank),
                                     weights_only=True), self._context)
        self._telemetry.notice(f"resumed from step {step} ({path})")
        return step


def skip_micro_batches(batches: Iterator[Batch], *, steps: int, grad_accum: int) -> Iterator[Batch]:
    """The stream where `steps` optimizer steps left it: each took `grad_accum` micro-batches
    from this rank's stream. (Collating the skipped ones is cheap next to a step; a stream
    whose micro-batches are sampled, grpo's, skips them itself without sampling.)"""
    if hasattr(batches, "skip"):
        batches.skip(steps * grad_accum)
        return batches
    for _ in range(steps * grad_accum):
        next(batches)
    return batches


def check_resumable(saved: dict[str, Any], expected: dict[str, Any], *, path: Path) -> None:
    differences = [f"{key} {saved.get(key)} (now {value})" for key, value in expected.items()
                   if saved.get(key) != value]
    if differences:
        raise ValueError(f"checkpoint {path} belongs to another run configuration: "
                         f"saved with {', '.join(differences)}")


def remove_checkpoint(path: Path) -> None:
    # The marker goes first, so a crash halfway through leaves a partial folder, never one
    # that claims to be complete with files missing.
    (path / CHECKPOINT_STATE_FILE).unlink(missing_ok=True)
    shutil.rmtree(path)


def rng_state(context: RankContext) -> dict[str, Any]:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if context.uses_cuda:
        state["cuda"] = torch.cuda.get_rng_state(context.device)
    return state


def restore_rng_state(state: dict[str, Any], context: RankContext) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if context.uses_cuda and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], context.device)
