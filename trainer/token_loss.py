"""The training and eval loss: a mean over answer tokens, never a mean of batch means.

A step's loss is the sum of next-token cross-entropies over every labelled (answer) token of
the step's micro-batches, on every rank, divided by how many such tokens the whole step
holds. Dividing each micro-batch by its own token count instead would weigh a micro-batch
of one short answer as much as one of many long answers, so the same global batch would
train a different model when split differently (the gradient-accumulation normalisation bug
transformers and torchtune fixed). Training, evaluation and the data preflight count the
labelled positions with the functions here, so all of them cover the same tokens.
"""
from __future__ import annotations

from typing import Any

IGNORE_INDEX = -100  # the label value Hugging Face causal-LM losses skip


def loss_token_count(labels) -> int:
    """How many positions of `labels` (a batch of rows) the loss covers: the labelled ones
    after the one-position shift of next-token prediction (a row's first label predicts
    nothing)."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


def summed_token_loss(logits, labels) -> tuple[Any, Any]:
    """The sum of next-token cross-entropies over the labelled positions, and their count
    (the same positions and loss as the model's own mean loss, summed). Computed in fp32
    whatever the compute dtype, as transformers' own loss does."""
    import torch.nn.functional as F

    shifted_labels = labels[:, 1:]
    loss_sum = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), shifted_labels.flatten(),
                               ignore_index=IGNORE_INDEX, reduction="sum")
    return loss_sum, (shifted_labels != IGNORE_INDEX).sum()


def router_aux_loss_coefficient(model) -> float:
    """The weight of a mixture-of-experts router's load-balancing loss in the objective, as
    the model's own loss would add it; 0 for dense models and for MoE configs that do not
    ask for it (`output_router_logits` off, transformers' default)."""
    config = model.config
    if not getattr(config, "output_router_logits", False):
        return 0.0
    return float(getattr(config, "router_aux_loss_coef", 0.0))


def micro_batch_objective(model, batch: dict[str, Any], *, loss_weight: float,
                          aux_loss_coefficient: float = 0.0,
                          loss_in_model: bool = False) -> tuple[Any, Any]:
    """One micro-batch's forward: (the tensor to call backward on, its detached summed
    answer-token loss).

    `loss_weight` is world size / answer tokens in the whole step (train.py's
    `step_loss_weight`): both backends average gradients over ranks, so the sum they reduce
    is then exactly the step's mean over its answer tokens. A mixture-of-experts model that
    asks for its router load-balancing loss (`router_aux_loss_coefficient`) adds it as the
    model's own loss does, weighted by this micro-batch's share of the step's answer tokens
    (so the split of the batch does not change that part of the objective either).

    `loss_in_model`: the model takes the labels and returns the summed loss itself
    (`model_summed_loss`), as Liger's fused linear cross-entropy must: it never makes the
    logits this function would otherwise take the loss of."""
    if loss_in_model:
        loss_sum, tokens, aux_loss = model_summed_loss(model, batch, aux_loss_coefficient)
    else:
        outputs = model(**{name: tensor for name, tensor in batch.items() if name != "labels"})
        loss_sum, tokens = summed_token_loss(outputs.logits, batch["labels"])
        aux_loss = getattr(outputs, "aux_loss", None)
    objective = loss_sum * loss_weight
    if aux_loss_coefficient and aux_loss is not None:
        objective = objective + aux_loss_coefficient * aux_loss.float() * tokens * loss_weight
    return objective, loss_sum.detach()


def model_summed_loss(model, batch: dict[str, Any], aux_loss_coefficient: float,
                      **model_options) -> tuple[Any, Any, Any]:
    """(the summed answer-token loss, its token count, the router's aux loss or None), from
    the model's own
    loss. transformers' causal-LM loss, and Liger's in its place, divide the sum by
    `num_items_in_batch` when given one, so 1 gives the sum itself; both shift the labels
    by one as `summed_token_loss` does. An MoE model adds coefficient x aux loss to the loss
    it returns: taken off again, so the caller weighs it as the logits path does.
    `model_options` go to the forward (Liger's `skip_logits`)."""
    outputs = model(**batch, num_items_in_batch=1, **model_options)
    aux_loss = getattr(outputs, "aux_loss", None)
    loss_sum = outputs.loss.float()
    if aux_loss_coefficient and aux_loss is not None:
        loss_sum = loss_sum - aux_loss_coefficient * aux_loss.float()
    return loss_sum, (batch["labels"][:, 1:] != IGNORE_INDEX).sum(), aux_loss


def step_loss_weight(*, world_size: int, step_loss_tokens: float) -> float:
    """What each micro-batch's summed loss is multiplied by before backward (see
    `micro_batch_objective`). A step with no answer token at all (every example lost its
    answer to the one-token shift) trains on nothing rather than dividing by zero."""
    return world_size / max(step_loss_tokens, 1.0)
