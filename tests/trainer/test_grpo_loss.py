"""GRPO's loss against TRL 1.16's own `GRPOTrainer._compute_loss`, run on the same batch:
the same log-probs, old and reference log-probs, advantages and masks, for each loss type,
with and without the KL term and clip-higher. TRL's method runs on a stand-in `self` that
holds only the settings it reads, its model call answering with the batch's log-probs."""
from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from trainer.objectives.grpo_loss import LossSettings, group_advantages, grpo_loss

COMPLETIONS, TOKENS, MAX_COMPLETION = 6, 9, 12


def batch(seed: int):
    generator = torch.Generator().manual_seed(seed)
    logps = -torch.rand(COMPLETIONS, TOKENS, generator=generator) * 3
    old = logps + 0.3 * torch.randn(COMPLETIONS, TOKENS, generator=generator)  # ratios past the clip
    reference = logps + 0.5 * torch.randn(COMPLETIONS, TOKENS, generator=generator)
    lengths = torch.tensor([9, 3, 7, 1, 5, 9])
    mask = (torch.arange(TOKENS)[None, :] < lengths[:, None]).long()
    advantages = torch.randn(COMPLETIONS, generator=generator)
    return logps, old, reference, mask, advantages


def trl_loss(logps, old, reference, mask, advantages, *, loss_type, beta, epsilon, epsilon_high):
    from trl import GRPOTrainer

    class Accelerator:
        num_processes = 1
        sync_gradients = True

        def gather(self, tensor):
            return tensor

        gather_for_metrics = gather

        def reduce(self, tensor, reduction="sum"):
            return tensor

    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logps, torch.zeros_like(logps), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level="token", beta=beta, loss_type=loss_type, epsilon_low=epsilon,
        epsilon_high=epsilon_high, use_vllm=False, vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
        max_completion_length=MAX_COMPLETION, accelerator=Accelerator(),
        _entropy_bonus_enabled=False, _metrics={"train": defaultdict(list)},
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1))
    inputs = {"prompt_ids": torch.zeros(COMPLETIONS, 2, dtype=torch.long),
              "prompt_mask": torch.ones(COMPLETIONS, 2, dtype=torch.long),
              "completion_ids": torch.zeros(COMPLETIONS, TOKENS, dtype=torch.long),
              "completion_mask": mask, "advantages": advantages, "old_per_token_logps": old,
              "ref_per_token_logps": reference, "num_items_in_batch": mask.sum()}
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    return loss, trainer._metrics["train"]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
@pytest.mark.parametrize("beta,epsilon_high", [(0.0, 0.2), (0.04, 0.28)])
def test_the_loss_and_its_figures_are_trls(loss_type, beta, epsilon_high):
    logps, old, reference, mask, advantages = batch(seed=len(loss_type))
    expected, metrics = trl_loss(logps, old, reference, mask, advantages, loss_type=loss_type,
                                 beta=beta, epsilon=0.2, epsilon_high=epsilon_high)
    settings = LossSettings(loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=epsilon_high,
                            max_completion_length=MAX_COMPLETION)
    ours = grpo_loss(logps, old, reference if beta else None, advantages, mask, settings,
                     step_tokens=mask.sum())
    assert torch.allclose(ours.loss, expected, atol=1e-5), (ours.loss, expected)
    assert ours.clip_low.item() == pytest.approx(metrics["clip_ratio/low_mean"][0], abs=1e-6)
    assert ours.clip_high.item() == pytest.approx(metrics["clip_ratio/high_mean"][0], abs=1e-6)
    assert 0 < ours.clip_low + ours.clip_high  # the batch does reach the clip
    if beta:
        assert ours.kl.item() == pytest.approx(metrics["kl"][0], abs=1e-6)
    else:
        assert ours.kl is None


def test_a_rounds_first_pass_has_ratio_one_and_its_gradient_is_the_advantage_weighted_logp():
    logps, _, _, mask, advantages = batch(seed=3)
    logps = logps.clone().requires_grad_()
    settings = LossSettings(loss_type="bnpo", beta=0.0, epsilon=0.2, epsilon_high=0.2,
                            max_completion_length=MAX_COMPLETION)
    result = grpo_loss(logps, None, None, advantages, mask, settings)
    result.loss.backward()
    # ratio = exp(logp - logp.detach()) = 1, d ratio / d logp = 1: -A per token, over the tokens
    expected = -advantages[:, None].expand_as(logps) * mask / mask.sum()
    assert torch.allclose(logps.grad, expected, atol=1e-6)
    assert result.clip_low == 0 and result.clip_high == 0


def test_accumulated_micro_batches_divide_their_loss_but_dapo_counts_the_steps_tokens():
    logps, old, _, mask, advantages = batch(seed=4)
    for loss_type in ("grpo", "bnpo", "dr_grpo"):
        settings = LossSettings(loss_type, 0.0, 0.2, 0.2, MAX_COMPLETION)
        one = grpo_loss(logps, old, None, advantages, mask, settings).loss
        four = grpo_loss(logps, old, None, advantages, mask, settings, accumulation_steps=4).loss
        assert torch.allclose(four * 4, one)
    settings = LossSettings("dapo", 0.0, 0.2, 0.2, MAX_COMPLETION)
    half = grpo_loss(logps, old, None, advantages, mask, settings, step_tokens=2 * mask.sum()).loss
    whole = grpo_loss(logps, old, None, advantages, mask, settings, step_tokens=mask.sum()).loss
    assert torch.allclose(2 * half, whole)


def test_advantages_compare_each_completion_with_its_own_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])  # G = 4: a mixed group, a flat one
    group = group_advantages(rewards, 4, "group")
    std = torch.tensor([1.0, 0.0, 0.0, 0.0]).std()
    assert torch.allclose(group.values[:4], (rewards[:4] - 0.25) / (std + 1e-4))
    assert torch.equal(group.values[4:], torch.zeros(4))  # all alike: nothing to learn
    assert group.std_is_zero.tolist() == [False] * 4 + [True] * 4
    unscaled = group_advantages(rewards, 4, "none")
    assert torch.allclose(unscaled.values, torch.tensor([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0]))
    batch_scaled = group_advantages(rewards, 4, "batch")
    assert torch.allclose(batch_scaled.values, unscaled.values / (rewards.std() + 1e-4))
    assert group_advantages(rewards, 2, "group").values[:2].tolist() == pytest.approx([0.7070, -0.7070], abs=1e-3)
