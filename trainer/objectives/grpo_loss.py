"""GRPO's mathematics on one micro-batch of sampled completions, as TRL 1.16's
`GRPOTrainer` computes it (tests/trainer/test_grpo_loss.py holds the two side by side).

A step samples G completions per prompt (a group), rewards each, and turns rewards into
advantages within the group: a completion better than its siblings is pushed up, a worse
one down, and a group whose completions all scored the same teaches nothing. The loss is
PPO's clipped surrogate per completion token, with the ratio of the policy's probability
now to its probability when the completion was sampled (1 on a round's first pass), plus
`beta` times the k3 estimate of the KL divergence to the reference, when there is one.

`loss_type` says how token losses become the micro-batch's loss:
- grpo: each completion's mean over its tokens, then the mean over completions (long
  completions count per token less);
- bnpo: the mean over the micro-batch's tokens;
- dr_grpo: the sum over tokens divided by completions × max_completion_length (Dr. GRPO:
  no length bias);
- dapo: the sum over tokens divided by the tokens of the whole step (every rank and
  accumulated micro-batch), so each token counts the same whatever micro-batch it is in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]
ScaleRewards = Literal["group", "batch", "none"]
# Added to a standard deviation before dividing by it (TRL's): a group whose rewards all
# agree gets advantages 0, not a division by zero.
STD_FLOOR = 1e-4


@dataclass(frozen=True)
class Advantages:
    values: torch.Tensor  # [completions]
    std_is_zero: torch.Tensor  # [completions] bool: its group's rewards all agreed


def group_advantages(rewards: torch.Tensor, num_generations: int, scale: ScaleRewards, *,
                     batch_std: float | None = None) -> Advantages:
    """`rewards`: [prompts × G], each prompt's G completions side by side. The advantage is
    the reward less its group's mean, divided by the group's standard deviation (`group`),
    the whole batch's (`batch`, less noisy for small G: `batch_std`, the step's over every
    rank, else these rewards'), or not at all (`none`: Dr. GRPO)."""
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)
    if scale == "batch":
        std = (rewards.std() if batch_std is None
               else torch.tensor(batch_std, dtype=rewards.dtype)).expand_as(rewards)
    else:  # "group", and "none" only to tell a flat group
        std = grouped.std(dim=1).repeat_interleave(num_generations)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + STD_FLOOR)
    return Advantages(torch.nan_to_num(advantages, nan=0.0),
                      torch.isclose(std, torch.zeros_like(std)))


@dataclass(frozen=True)
class LossSettings:
    loss_type: LossType
    beta: float
    epsilon: float
    epsilon_high: float
    max_completion_length: int


@dataclass(frozen=True)
class GrpoLoss:
    loss: torch.Tensor  # what backward() takes: already divided for accumulation
    kl: torch.Tensor | None  # mean k3 KL over completion tokens (beta > 0)
    clip_low: torch.Tensor  # share of tokens whose ratio was clipped below (negative advantage)
    clip_high: torch.Tensor  # ... above (positive advantage)


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor | None, reference_logps: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, settings: LossSettings, *,
              accumulation_steps: int = 1, step_tokens: torch.Tensor | float | None = None) -> GrpoLoss:
    """`logps`, `old_logps`, `reference_logps`, `mask`: [completions, completion tokens], the
    log-probability of each sampled token under the policy now (with grad), when sampled
    (None: this is the round's first pass, so it is `logps` detached) and under the
    reference; `advantages`: [completions]. `accumulation_steps` micro-batches make the step;
    `step_tokens`, for dapo, is the completion tokens of the whole step divided by the
    ranks (each rank's gradient is averaged over the ranks)."""
    mask = mask.to(logps.dtype)
    old_logps = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - settings.epsilon, 1 + settings.epsilon_high)
    advantages = advantages.unsqueeze(1)
    token_loss = -torch.min(ratio * advantages, clipped * advantages)
    kl = None
    if settings.beta != 0.0:
        assert reference_logps is not None, "beta > 0 needs the reference's log-probs"
        to_reference = reference_logps - logps
        token_kl = torch.exp(to_reference) - to_reference - 1
        token_loss = token_loss + settings.beta * token_kl
        kl = _masked_mean(token_kl.detach(), mask)
    loss = _aggregate(token_loss, mask, settings, accumulation_steps, step_tokens)
    low = (ratio < 1 - settings.epsilon) & (advantages < 0)
    high = (ratio > 1 + settings.epsilon_high) & (advantages > 0)
    return GrpoLoss(loss, kl, _masked_mean(low.to(mask.dtype), mask),
                    _masked_mean(high.to(mask.dtype), mask))


def _aggregate(token_loss: torch.Tensor, mask: torch.Tensor, settings: LossSettings,
               accumulation_steps: int, step_tokens) -> torch.Tensor:
    masked = token_loss * mask
    if settings.loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation_steps
    if settings.loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0) / accumulation_steps
    if settings.loss_type == "dr_grpo":
        return masked.sum() / (token_loss.size(0) * settings.max_completion_length) / accumulation_steps
    if settings.loss_type == "dapo":
        assert step_tokens is not None, "dapo divides by the step's completion tokens"
        return masked.sum() / torch.as_tensor(step_tokens, dtype=masked.dtype).clamp(min=1.0)
    raise ValueError(f"unknown loss_type {settings.loss_type!r}")


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
