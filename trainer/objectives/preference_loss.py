"""Preference tuning's loss for one batch of pairs, from each answer's summed log-probability.

A pair is a prompt with a chosen and a rejected answer; both are run through the model in one
forward (rows [chosen..., rejected...]), and only their answer tokens count: the prompt is
shared, so its tokens would cancel. With a reference model (its log-probabilities from the
base with the adapter off, a frozen copy, or computed once before training), the DPO family
compares how much the policy moved each answer away from the reference:

    sigmoid (DPO)  -log σ(β·Δ)·(1 − ε) − log σ(−β·Δ)·ε          Δ = (πc − rc) − (πr − rr)
    ipo            (Δ̄ − 1/(2β))²                              Δ̄: each side per answer token
    hinge          max(0, 1 − β·Δ)

and the reference-free ones compare the policy's per-token averages directly:

    simpo          −log σ(β·(π̄c − π̄r) − γ)
    orpo           −β·log σ(log odds(π̄c) − log odds(π̄r)), with the chosen answer's
                   cross-entropy added by the caller (the objective's SFT term)

ε is label smoothing (a share of pairs assumed mislabelled). These are the forms of TRL's
DPO trainer (tests/trainer/test_preference_loss.py computes the same batch with it), of the
SimPO paper (γ its target margin) and of ORPO's (β its λ).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.token_loss import IGNORE_INDEX

PREFERENCE_LOSSES = ("sigmoid", "ipo", "hinge", "simpo", "orpo")
REFERENCE_FREE = frozenset({"simpo", "orpo"})


@dataclass(frozen=True)
class PairLogps:
    """Each pair's summed answer log-probability, chosen and rejected, and each side's
    answer token count."""

    chosen: Any
    rejected: Any
    chosen_tokens: Any
    rejected_tokens: Any

    @property
    def chosen_mean(self):
        return self.chosen / self.chosen_tokens.clamp(min=1)

    @property
    def rejected_mean(self):
        return self.rejected / self.rejected_tokens.clamp(min=1)


@dataclass(frozen=True)
class PairLoss:
    """Each pair's loss and the rewards the live view charts (β × how far the policy moved
    each side from the reference; without one, β × its per-token log-probability)."""

    per_pair: Any
    chosen_rewards: Any
    rejected_rewards: Any

    @property
    def margins(self):
        return self.chosen_rewards - self.rejected_rewards

    @property
    def accuracies(self):
        """1 where the chosen answer's reward is the higher, ½ for a tie, 0 otherwise: the
        share the live view shows. (TRL counts a tie as 0, so its accuracy starts at 0 where
        the policy is still the reference; a tie is a coin toss, and this starts at 0.5.)"""
        return ((self.chosen_rewards > self.rejected_rewards).float()
                + 0.5 * (self.chosen_rewards == self.rejected_rewards).float())


def answer_logps(logits, labels) -> tuple[Any, Any]:
    """(each row's summed log-probability of its labelled tokens, their count), with the
    one-position shift of next-token prediction, in fp32 whatever the compute dtype."""
    import torch

    shifted = labels[:, 1:]
    mask = shifted != IGNORE_INDEX
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    token_logps = torch.gather(log_probs, 2, shifted.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (token_logps * mask).sum(dim=1), mask.sum(dim=1)


def split_pairs(row_logps, row_tokens) -> PairLogps:
    """Rows laid out [chosen..., rejected...] as pairs."""
    chosen, rejected = row_logps.chunk(2, dim=0)
    chosen_tokens, rejected_tokens = row_tokens.chunk(2, dim=0)
    return PairLogps(chosen, rejected, chosen_tokens, rejected_tokens)


def pair_loss(policy: PairLogps, reference: PairLogps | None, *, loss: str, beta: float,
              label_smoothing: float = 0.0, simpo_gamma: float = 0.5) -> PairLoss:
    """The loss of each pair under `loss` (PREFERENCE_LOSSES); `reference` is None exactly
    for the reference-free ones."""
    import torch.nn.functional as F

    if (loss in REFERENCE_FREE) != (reference is None):
        raise ValueError(f"loss {loss!r} {'takes no' if loss in REFERENCE_FREE else 'needs a'} "
                         "reference")
    if loss == "simpo":
        margin = policy.chosen_mean - policy.rejected_mean
        return PairLoss(-F.logsigmoid(beta * margin - simpo_gamma),
                        beta * policy.chosen_mean.detach(), beta * policy.rejected_mean.detach())
    if loss == "orpo":
        log_odds = (_log_odds(policy.chosen_mean) - _log_odds(policy.rejected_mean))
        return PairLoss(-beta * F.logsigmoid(log_odds),
                        beta * policy.chosen_mean.detach(), beta * policy.rejected_mean.detach())
    chosen_ratio = policy.chosen - reference.chosen
    rejected_ratio = policy.rejected - reference.rejected
    delta = chosen_ratio - rejected_ratio
    if loss == "sigmoid":
        per_pair = (-F.logsigmoid(beta * delta) * (1 - label_smoothing)
                    - F.logsigmoid(-beta * delta) * label_smoothing)
    elif loss == "ipo":
        mean_delta = (chosen_ratio / policy.chosen_tokens.clamp(min=1)
                      - rejected_ratio / policy.rejected_tokens.clamp(min=1))
        per_pair = (mean_delta - 1 / (2 * beta)) ** 2
    elif loss == "hinge":
        per_pair = F.relu(1 - beta * delta)
    else:
        raise ValueError(f"unknown preference loss {loss!r}: one of {', '.join(PREFERENCE_LOSSES)}")
    return PairLoss(per_pair, beta * chosen_ratio.detach(), beta * rejected_ratio.detach())


def _log_odds(mean_logp):
    """log(p / (1 − p)) of a per-token probability p = exp(mean_logp) < 1."""
    import torch

    return mean_logp - torch.log1p(-torch.exp(mean_logp).clamp(max=1 - 1e-6))
