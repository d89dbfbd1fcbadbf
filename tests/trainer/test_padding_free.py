"""Padding-free micro-batches and the loss taken inside the model, on one process, over tiny
random models of several families: a micro-batch laid end to end in one row trains exactly
as the padded one does, and the model's own summed loss (the path Liger's fused linear
cross-entropy takes) equals the loss TuneDeck takes from the logits, MoE router loss too."""
import pytest
import torch

from tests.trainer.model_families import build_family_model
from trainer.token_loss import IGNORE_INDEX
from trainer.data.datasets import TokenizedExample, collate, collate_padding_free
from trainer.data.packing import pack_examples
from trainer.token_loss import loss_token_count, micro_batch_objective, router_aux_loss_coefficient

FAMILIES = ["llama", "qwen2", "gemma2", "mixtral", "qwen2_moe"]


def family_model(family: str, *, router_loss: bool = True):
    if family in ("llama", "qwen2"):
        import transformers

        from tests.trainer.model_families import COMMON

        config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(
                config_class(vocab_size=384, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                             **COMMON)).float()
    else:
        # MoE models with their router loss on, so the objective carries it.
        overrides = ({"output_router_logits": router_loss}
                     if family in ("mixtral", "qwen2_moe") else {})
        model = build_family_model(family, **overrides)
    model.config.use_cache = False  # as the trainer loads it: packed positions need no cache
    return model


def examples(seed: int = 0) -> list[TokenizedExample]:
    generator = torch.Generator().manual_seed(seed)
    made = []
    for length in (7, 12, 3, 9, 5, 11):
        ids = torch.randint(3, 384, (length,), generator=generator).tolist()
        prompt = max(1, length // 3)
        made.append(TokenizedExample(input_ids=ids, labels=[IGNORE_INDEX] * prompt + ids[prompt:]))
    return made


def objective_and_gradients(model, batch, *, loss_in_model: bool = False):
    model.zero_grad(set_to_none=True)
    weight = 1 / loss_token_count(batch["labels"])
    objective, loss_sum = micro_batch_objective(
        model, batch, loss_weight=weight, loss_in_model=loss_in_model,
        aux_loss_coefficient=router_aux_loss_coefficient(model))
    objective.backward()
    return objective.detach(), loss_sum, {name: parameter.grad.clone()
                                          for name, parameter in model.named_parameters()
                                          if parameter.grad is not None}


def assert_same_training(first, second, *, tolerance=1e-5):
    objective, loss_sum, gradients = first
    other_objective, other_loss_sum, other_gradients = second
    assert float(other_loss_sum) == pytest.approx(float(loss_sum), rel=tolerance)
    assert float(other_objective) == pytest.approx(float(objective), rel=tolerance)
    assert gradients.keys() == other_gradients.keys()
    for name, gradient in gradients.items():
        assert torch.allclose(gradient, other_gradients[name], rtol=1e-4, atol=1e-6), name


def test_a_padding_free_row_lays_the_rows_end_to_end_with_their_own_positions():
    rows = [TokenizedExample(input_ids=[5, 6, 7], labels=[5, 6, 7]),
            *pack_examples([TokenizedExample([8, 9], [IGNORE_INDEX, 9]),
                            TokenizedExample([10, 11, 12], [IGNORE_INDEX, 11, 12])], seq_len=8)]
    batch = collate_padding_free(rows)
    assert "attention_mask" not in batch
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10, 11, 12]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    # Each row's first token is never a target: the previous row's last does not predict it.
    assert batch["labels"].tolist() == [[IGNORE_INDEX, 6, 7, IGNORE_INDEX, 9, IGNORE_INDEX, 11, 12]]
    padded = collate(rows, pad_token_id=0)
    assert loss_token_count(batch["labels"]) == loss_token_count(padded["labels"])


@pytest.mark.parametrize("family", FAMILIES)
def test_padding_free_trains_as_the_padded_batch_does(family):
    model = family_model(family)
    rows = examples()
    padded = objective_and_gradients(model, collate(rows, pad_token_id=0))
    padding_free = objective_and_gradients(model, collate_padding_free(rows))
    assert_same_training(padded, padding_free)


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_padding_free_packed_rows_train_as_the_padded_packed_batch_does(family):
    # A padded packed batch has no attention mask, so an MoE router's load-balancing loss
    # counts its pad tokens (padding-free has none to count): compared without it.
    model = family_model(family, router_loss=False)
    rows = pack_examples(examples(seed=3), seq_len=20)
    assert any(len(row.input_ids) > max(len(e.input_ids) for e in examples(seed=3)) for row in rows)
    padded = objective_and_gradients(model, collate(rows, pad_token_id=0))
    padding_free = objective_and_gradients(model, collate_padding_free(rows))
    assert_same_training(padded, padding_free)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("padding_free", [False, True])
def test_the_models_own_summed_loss_is_the_loss_taken_from_the_logits(family, padding_free):
    model = family_model(family)
    rows = examples(seed=1)
    batch = collate_padding_free(rows) if padding_free else collate(rows, pad_token_id=0)
    from_logits = objective_and_gradients(model, batch)
    in_model = objective_and_gradients(model, batch, loss_in_model=True)
    assert_same_training(from_logits, in_model)
    if family in ("mixtral", "qwen2_moe"):
        # The router's loss is part of both objectives, not lost or counted twice.
        assert float(from_logits[0]) != pytest.approx(float(from_logits[1]) / loss_token_count(
            batch["labels"]), rel=1e-6)


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_evaluation_scores_the_same_from_the_models_own_loss(family):
    """What Liger's eval path takes (the model's summed loss, its router loss left out)
    equals the eval loss taken from the logits."""
    model = family_model(family)
    batch = collate(examples(seed=2), pad_token_id=0)
    from_logits = scored_as_evaluated(model, batch)
    in_model = scored_as_evaluated(model, batch, loss_in_model=True,
                                   aux_loss_coefficient=router_aux_loss_coefficient(model))
    assert float(in_model[0]) == pytest.approx(float(from_logits[0]), rel=1e-5)
    assert int(in_model[1]) == int(from_logits[1])
    assert model.training


def scored_as_evaluated(model, batch, *, loss_in_model: bool = False,
                        aux_loss_coefficient: float = 0.0):
    """Supervised fine-tuning's (summed answer-token loss, answer-token count) of one
    micro-batch as a backend's `evaluate` takes it: the objective's score, in eval mode and
    without gradients."""
    from trainer.evaluation import forward_only
    from trainer.objectives.sft import SftObjective

    objective = SftObjective(loss_in_model=loss_in_model,
                             aux_loss_coefficient=aux_loss_coefficient)
    return forward_only(model, lambda model: objective.score(model, batch))
