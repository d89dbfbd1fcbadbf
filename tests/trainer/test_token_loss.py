"""trainer/token_loss.py on one process: the step objective is the mean over the step's
answer tokens, so splitting a batch into micro-batches changes neither the loss nor the
gradient (the torchrun tests in test_token_weighted_loss.py check ranks and backends)."""
import pytest
import torch

from tunedeck.data.records import Example
from trainer.data.datasets import collate
from tests.trainer.tokenizing import tokenize_example
from trainer.token_loss import (IGNORE_INDEX, loss_token_count, micro_batch_objective,
                                router_aux_loss_coefficient, step_loss_weight)

# Answers of very different lengths: where a mean of micro-batch means goes wrong.
PAIRS = [("Say one word.", "yes"),
         ("Describe the day.", "the sun is red and the water is blue and the tree is big"),
         ("What is 1 + 2?", "3"),
         ("Tell a story.", "a cat and a dog say hello to the moon in the night")]


@pytest.fixture
def model_and_batches(builtin_tokenizer, builtin_model_dir):
    from trainer.model.model_source import load_base_model

    torch.manual_seed(0)
    model = load_base_model(str(builtin_model_dir))
    rows = [tokenize_example(builtin_tokenizer, Example(({"role": "user", "content": q},), a), seq_len=64)
            for q, a in PAIRS]
    whole = collate(rows, builtin_tokenizer.pad_token_id)
    halves = [collate(rows[:1], builtin_tokenizer.pad_token_id),
              collate(rows[1:], builtin_tokenizer.pad_token_id)]
    return model, whole, halves


def gradients_of(model, batches, *, weight: float) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss_total = 0.0
    for batch in batches:
        objective, loss_sum = micro_batch_objective(model, batch, loss_weight=weight)
        objective.backward()
        loss_total += float(loss_sum)
    return loss_total, [parameter.grad.clone() for parameter in model.parameters()]


def test_the_token_count_is_the_labelled_positions_after_the_shift():
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 5, 6], [7, IGNORE_INDEX, 8, IGNORE_INDEX]])
    # Row 2's first label predicts nothing: only 8 counts there.
    assert loss_token_count(labels) == 3


def test_one_batch_weighted_by_its_tokens_is_the_models_own_mean_loss(model_and_batches):
    model, whole, _ = model_and_batches
    tokens = loss_token_count(whole["labels"])
    objective, loss_sum = micro_batch_objective(model, whole, loss_weight=1 / tokens)
    with torch.no_grad():
        own_loss = model(**whole).loss
    assert torch.allclose(objective, own_loss, atol=1e-5)
    assert torch.allclose(loss_sum / tokens, own_loss, atol=1e-5)


def test_splitting_the_batch_changes_neither_the_loss_nor_the_gradient(model_and_batches):
    model, whole, halves = model_and_batches
    tokens = loss_token_count(whole["labels"])
    assert tokens == sum(loss_token_count(half["labels"]) for half in halves)
    weight = step_loss_weight(world_size=1, step_loss_tokens=tokens)
    whole_loss, whole_grads = gradients_of(model, [whole], weight=weight)
    split_loss, split_grads = gradients_of(model, halves, weight=weight)
    assert split_loss == pytest.approx(whole_loss, rel=1e-5)
    for whole_grad, split_grad in zip(whole_grads, split_grads, strict=True):
        assert torch.allclose(whole_grad, split_grad, rtol=1e-4, atol=1e-7)
    # The old rule, each micro-batch normalised by its own tokens and the means averaged,
    # gives a different loss on these uneven answers.
    mean_of_means = sum(micro_batch_objective(model, half, loss_weight=1 / loss_token_count(half["labels"]))[0].item()
                        for half in halves) / len(halves)
    assert abs(mean_of_means - whole_loss / tokens) > 1e-3


def test_the_weight_counts_every_rank_and_survives_an_empty_step():
    assert step_loss_weight(world_size=4, step_loss_tokens=200) == pytest.approx(4 / 200)
    assert step_loss_weight(world_size=2, step_loss_tokens=0) == 2.0


def test_a_router_loss_counts_only_where_the_config_asks_for_it():
    from types import SimpleNamespace

    dense = SimpleNamespace(config=SimpleNamespace())
    quiet_moe = SimpleNamespace(config=SimpleNamespace(router_aux_loss_coef=0.02, output_router_logits=False))
    moe = SimpleNamespace(config=SimpleNamespace(router_aux_loss_coef=0.02, output_router_logits=True))
    assert router_aux_loss_coefficient(dense) == 0.0
    assert router_aux_loss_coefficient(quiet_moe) == 0.0
    assert router_aux_loss_coefficient(moe) == 0.02
