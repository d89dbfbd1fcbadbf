"""The `grpo` section of a job spec (objective grpo): how completions are sampled, which
rewards score them, and how the clipped surrogate loss is taken (trainer/objectives/grpo.py
runs it; trainer/objectives/grpo_loss.py holds the mathematics, checked against TRL's).

The rewards are the scorer registry's own models (tunedeck/rewards/scorers.py), so an
unknown reward name or option is refused by the same classes that score.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tunedeck.rewards.scorers import NumericMatch, Reward
from tunedeck.spec.sections import StrictModel

# How token losses become a step's loss (trainer/objectives/grpo_loss.py says each).
GrpoLossType = Literal["dapo", "grpo", "dr_grpo", "bnpo"]
GRPO_LOSS_TYPES: tuple[str, ...] = GrpoLossType.__args__
# What a reward's distance from its group's mean is divided by.
ScaleRewards = Literal["group", "batch", "none"]
SCALE_REWARDS: tuple[str, ...] = ScaleRewards.__args__


class GrpoSettings(StrictModel):
    num_generations: int = Field(
        8, ge=2, le=256, title="Generations per prompt (G)",
        description="Completions sampled for each prompt: a group, whose rewards are compared "
                    "with each other. It must divide the completions a rank takes a step "
                    "(micro_batch_size × grad_accum).")
    max_completion_length: int = Field(
        256, ge=1, le=131_072, title="Max completion length",
        description="Tokens a completion may have; one cut there counts as truncated. Prompt "
                    "and completion together fit `seq_len` (a longer prompt loses its start).")
    temperature: float = Field(
        1.0, gt=0, le=10, title="Temperature",
        description="Sampling temperature of the completions.")
    top_p: float = Field(
        1.0, gt=0, le=1, title="Top-p",
        description="Nucleus sampling: the smallest set of tokens whose probability reaches "
                    "top_p (1: all tokens).")
    top_k: int = Field(
        0, ge=0, le=100_000, title="Top-k",
        description="Sample among the k likeliest tokens only (0: all tokens).")
    beta: float = Field(
        0.0, ge=0, le=100, title="KL coefficient (beta)",
        description="Weight of the KL divergence to the reference model in the loss (0: no "
                    "reference is held; above 0 it is held as DPO holds it: the adapter "
                    "switched off for lora/qlora, a frozen copy for full).")
    epsilon: float = Field(
        0.2, gt=0, lt=1, title="Clip range (epsilon)",
        description="The probability ratio is clipped to [1 − epsilon, 1 + epsilon_high].")
    epsilon_high: float | None = Field(
        None, gt=0, lt=10, title="Upper clip range",
        description="The upper clip (DAPO's clip-higher, e.g. 0.28); unset: epsilon.")
    loss_type: GrpoLossType = Field(
        "dapo", title="Loss aggregation",
        description="`dapo`: every completion token of the step counts the same; `grpo`: each "
                    "completion's token mean, then the mean over completions; `dr_grpo`: the "
                    "token sum over completions × max_completion_length; `bnpo`: each "
                    "micro-batch's token mean.")
    scale_rewards: ScaleRewards = Field(
        "group", title="Reward scaling",
        description="A reward's advantage is its distance from its group's mean, divided by "
                    "the group's standard deviation (`group`), the step's (`batch`), or not "
                    "divided (`none`, Dr. GRPO).")
    num_iterations: int = Field(
        1, ge=1, le=16, title="Iterations per sample round",
        description="Optimizer steps taken on one round of samples (PPO's mu); above 1, the "
                    "ratio to the sampling policy is clipped.")
    mask_truncated_completions: bool = Field(
        False, title="Skip truncated completions",
        description="Leave completions cut at max_completion_length out of the loss.")
    rollouts_every: int = Field(
        10, ge=0, le=1_000_000, title="Rollouts every N steps",
        description="Every N steps, a few prompts with all their completions and rewards "
                    "are kept for the job page's rollouts table and GET "
                    "/api/jobs/{id}/rollouts (0: none).")
    rollout_prompts: int = Field(
        2, ge=1, le=16, title="Prompts per rollout",
        description="How many of the step's prompts a kept rollout shows, each with all "
                    "num_generations completions.")
    rewards: list[Reward] = Field(
        default_factory=lambda: [NumericMatch(name="numeric_match")], min_length=1,
        max_length=16, title="Rewards",
        description="The scorers whose weighted sum rewards a completion, each "
                    "`{name, weight, ...options}`: numeric_match, exact_match, regex_match, "
                    "contains, length, reward_model (a local sequence-classification folder), "
                    "python (your own function; off unless an administrator turns Python "
                    "rewards on). The reference lists their options.")

    @property
    def upper_clip(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def reward_columns(self) -> tuple[str, ...]:
        """The dataset columns the rewards read, sorted."""
        return tuple(sorted(set().union(*(reward.columns for reward in self.rewards))))

    @model_validator(mode="after")
    def _upper_clip_not_below(self) -> "GrpoSettings":
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ValueError(f"epsilon_high {self.epsilon_high} is below epsilon {self.epsilon}: "
                             "clip-higher widens the upper side only")
        return self
