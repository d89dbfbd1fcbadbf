"""trainer/objectives/preference_loss.py against an implementation nobody here wrote: the same
batch of pairs through TRL's DPO trainer (its own loss code, on a real tiny model with its
fused log-probability head) and through ours, for each loss TRL shares with us, agreeing to
1e-5 in fp32; and the reference-free losses against their papers' formulas."""
from __future__ import annotations

import math
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from tests.trainer.model_families import build_family_model  # noqa: E402
from trainer.objectives.preference_loss import (PairLogps, answer_logps, pair_loss,  # noqa: E402
                                                split_pairs)
from trainer.token_loss import IGNORE_INDEX  # noqa: E402

PAIRS, LENGTH, VOCAB = 3, 12, 64


def pair_batch(seed: int = 0) -> dict:
    """Rows [chosen..., rejected...]: each pair shares a prompt; answers of different lengths,
    the rows right-padded, as a collator lays them out."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, VOCAB, (2 * PAIRS, LENGTH), generator=generator)
    attention = torch.ones_like(input_ids)
    completion = torch.zeros_like(input_ids)
    for pair in range(PAIRS):
        prompt = 3 + pair
        input_ids[PAIRS + pair, :prompt] = input_ids[pair, :prompt]
        for row, answer in ((pair, 4 + pair), (PAIRS + pair, 6 - pair)):
            completion[row, prompt:prompt + answer] = 1
            attention[row, prompt + answer:] = 0
            input_ids[row, prompt + answer:] = 0
    return {"input_ids": input_ids, "attention_mask": attention, "completion_mask": completion}


def our_logps(model, batch) -> PairLogps:
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, IGNORE_INDEX)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return split_pairs(*answer_logps(logits, labels))


def trl_loss(model, batch, reference: PairLogps, *, loss: str, beta: float) -> float:
    """TRL's DPOTrainer._compute_loss on `batch`, its reference log-probabilities given as
    precomputed (the trainer's own code path for them); only what that method reads is set."""
    from accelerate import Accelerator
    from trl import DPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    trainer = DPOTrainer.__new__(DPOTrainer)
    trainer.__dict__.update(
        model=model, accelerator=Accelerator(cpu=True), aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[loss],
        loss_weights=[1.0], beta=beta, use_weighting=False, _tp_size=1,
        _total_train_tokens=0, _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    inputs = {**batch, "ref_chosen_logps": reference.chosen,
              "ref_rejected_logps": reference.rejected}
    model.eval()
    with torch.no_grad():
        return float(trainer._compute_loss(model, inputs, return_outputs=False))


@pytest.mark.parametrize("family", ["mistral", "qwen3"])
@pytest.mark.parametrize("loss", ["sigmoid", "ipo", "hinge"])
def test_each_dpo_loss_agrees_with_trl_to_1e_5(family, loss):
    policy_model = build_family_model(family, seed=0, vocab_size=VOCAB)
    reference_model = build_family_model(family, seed=1, vocab_size=VOCAB)
    batch = pair_batch()
    reference = our_logps(reference_model, batch)
    ours = pair_loss(our_logps(policy_model, batch), reference, loss=loss, beta=0.1)
    theirs = trl_loss(policy_model, batch, reference, loss=loss, beta=0.1)
    assert float(ours.per_pair.mean()) == pytest.approx(theirs, abs=1e-5, rel=1e-5)
    assert theirs > 0


def test_answer_logps_count_only_each_sides_answer_tokens():
    batch = pair_batch()
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, IGNORE_INDEX)
    logits = torch.zeros(2 * PAIRS, LENGTH, VOCAB)  # uniform: each token costs log(VOCAB)
    pairs = split_pairs(*answer_logps(logits, labels))
    assert pairs.chosen_tokens.tolist() == [4, 5, 6] and pairs.rejected_tokens.tolist() == [6, 5, 4]
    assert pairs.chosen.tolist() == pytest.approx([-n * math.log(VOCAB) for n in (4, 5, 6)])


def logps(chosen, rejected, chosen_tokens=(2.0,), rejected_tokens=(4.0,)) -> PairLogps:
    return PairLogps(torch.tensor(chosen), torch.tensor(rejected),
                     torch.tensor(chosen_tokens), torch.tensor(rejected_tokens))


def test_the_reference_free_losses_follow_their_papers():
    policy = logps([-1.0], [-6.0])  # per token: chosen -0.5, rejected -1.5
    simpo = pair_loss(policy, None, loss="simpo", beta=2.0, simpo_gamma=0.5)
    assert float(simpo.per_pair) == pytest.approx(-math.log(1 / (1 + math.exp(-(2.0 - 0.5)))))
    orpo = pair_loss(policy, None, loss="orpo", beta=0.1)
    odds = (lambda p: math.log(p / (1 - p)))
    log_odds = odds(math.exp(-0.5)) - odds(math.exp(-1.5))
    assert float(orpo.per_pair) == pytest.approx(0.1 * math.log1p(math.exp(-log_odds)))
    assert float(orpo.accuracies) == 1.0 and float(orpo.margins) == pytest.approx(0.1)


def test_label_smoothing_and_rewards_of_dpo():
    policy, reference = logps([-2.0], [-3.0]), logps([-2.5], [-2.5])
    plain = pair_loss(policy, reference, loss="sigmoid", beta=0.5)
    smoothed = pair_loss(policy, reference, loss="sigmoid", beta=0.5, label_smoothing=0.2)
    delta = (-2.0 + 2.5) - (-3.0 + 2.5)  # 1.0
    assert float(plain.per_pair) == pytest.approx(math.log1p(math.exp(-0.5 * delta)))
    assert float(smoothed.per_pair) == pytest.approx(0.8 * math.log1p(math.exp(-0.5))
                                                     + 0.2 * math.log1p(math.exp(0.5)))
    assert float(plain.chosen_rewards) == pytest.approx(0.25)
    assert float(plain.rejected_rewards) == pytest.approx(-0.25)
    assert float(plain.accuracies) == 1.0


def test_a_loss_and_its_reference_must_match():
    policy = logps([-1.0], [-2.0])
    with pytest.raises(ValueError, match="'simpo' takes no reference"):
        pair_loss(policy, policy, loss="simpo", beta=0.1)
    with pytest.raises(ValueError, match="'sigmoid' needs a reference"):
        pair_loss(policy, None, loss="sigmoid", beta=0.1)
