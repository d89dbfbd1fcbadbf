"""The speed options on a CUDA GPU (skipped without one, and each without its package): each
computes what the plain path computes, on tiny random models of several families in bf16.
bench/gpu_throughput.py measures what they are worth; these say they are right."""
import importlib.util

import pytest
import torch

from tests.trainer.test_padding_free import examples, family_model
from trainer.datasets import collate, collate_padding_free
from trainer.token_loss import loss_token_count, micro_batch_objective, router_aux_loss_coefficient

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
FAMILIES = ["llama", "qwen2", "mixtral"]
# bf16 forward and backward: the paths round differently.
LOSS_TOLERANCE = 2e-2


def needs(import_name: str):
    return pytest.mark.skipif(importlib.util.find_spec(import_name) is None,
                              reason=f"{import_name} is not installed")


def on_gpu(model, batch):
    return model.to("cuda", torch.bfloat16), {name: tensor.cuda() for name, tensor in batch.items()}


def loss_and_gradient_norm(model, batch, *, loss_in_model=False) -> tuple[float, float]:
    model.zero_grad(set_to_none=True)
    model.train()
    objective, loss_sum = micro_batch_objective(
        model, batch, loss_weight=1 / loss_token_count(batch["labels"]),
        aux_loss_coefficient=router_aux_loss_coefficient(model), loss_in_model=loss_in_model)
    objective.backward()
    norm = torch.linalg.vector_norm(torch.stack([parameter.grad.float().norm()
                                                 for parameter in model.parameters()
                                                 if parameter.grad is not None]))
    return float(loss_sum), float(norm)


def assert_trains_as_the_plain_model(family, fast_model, fast_batch, *, loss_in_model=False):
    """`fast_model` (a family model with a speed option) on `fast_batch` against the plain
    model on the padded batch: the same loss and gradient norm, to bf16's rounding."""
    plain, padded = on_gpu(family_model(family), collate(examples(), pad_token_id=0))
    expected = loss_and_gradient_norm(plain, padded)
    fast, batch = on_gpu(fast_model, fast_batch)
    measured = loss_and_gradient_norm(fast, batch, loss_in_model=loss_in_model)
    assert measured == pytest.approx(expected, rel=LOSS_TOLERANCE)


@needs("liger_kernel")
@pytest.mark.parametrize("family", FAMILIES)
def test_liger_kernels_train_as_the_plain_model_does(family):
    from trainer.speed.liger import apply_liger_kernels

    patched = family_model(family)
    apply_liger_kernels(patched)
    assert_trains_as_the_plain_model(family, patched, collate(examples(), pad_token_id=0),
                                     loss_in_model=True)


@needs("flash_attn")
@pytest.mark.parametrize("family", FAMILIES)
def test_flash_attention_on_a_padding_free_row_trains_as_sdpa_on_padded_rows(family):
    from transformers import AutoModelForCausalLM

    config = family_model(family).config
    flash = AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_2")
    flash.load_state_dict(family_model(family).state_dict())
    flash.config.use_cache = False
    assert_trains_as_the_plain_model(family, flash, collate_padding_free(examples()))


def test_fused_adamw_steps_as_the_default_adamw_does():
    torch.manual_seed(0)
    weights = [torch.randn(257, 129, device="cuda") for _ in range(4)]
    gradients = [torch.randn_like(weight) for weight in weights]
    results = []
    for fused in (False, True):
        parameters = [torch.nn.Parameter(weight.clone()) for weight in weights]
        optimizer = torch.optim.AdamW(parameters, lr=1e-3, weight_decay=0.01, fused=fused or None)
        for _ in range(3):
            for parameter, gradient in zip(parameters, gradients):
                parameter.grad = gradient.clone()
            optimizer.step()
        results.append(torch.cat([parameter.detach().flatten() for parameter in parameters]))
    assert torch.allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
