"""The speed options on a CUDA GPU (skipped without one, and each without its package): each
computes what the plain path computes, on tiny random models of two families in bf16.
bench/gpu_throughput.py measures what they are worth; these say they are right.

Quick, for bench/gpu_check.sh runs them in a short GPU window (60 s): one model build and one
plain reference a family, shared by every test of the module; the smallest shapes that
still have every part a speed option replaces (2 layers, grouped-query attention, 4
experts of which 2 are routed); imports that load the trainer wait for the first test."""
import copy
import importlib.util
from dataclasses import dataclass

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
# A dense family and a mixture of experts, whose router loss the fused loss must keep:
# Liger patches each its own way (qwen2, say, is llama's layout to Liger's kernels).
FAMILIES = ["llama", "mixtral"]
# bf16 forward and backward: the paths round differently.
LOSS_TOLERANCE = 2e-2


def needs(import_name: str):
    return pytest.mark.skipif(importlib.util.find_spec(import_name) is None,
                              reason=f"{import_name} is not installed")


@dataclass(frozen=True)
class PlainReference:
    """A family's model as built once (fp32, on the CPU, never trained: a test copies it)
    and what the plain path computes with it on the padded batch, on the GPU in bf16."""
    model: torch.nn.Module
    loss_and_gradient_norm: tuple[float, float]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def plain(family) -> PlainReference:
    """Built before any test patches a copy with a speed option (Liger also patches the
    family's module functions)."""
    from tests.trainer.test_padding_free import examples, family_model
    from trainer.data.datasets import collate

    model = family_model(family)
    on_gpu, padded = to_gpu(copy.deepcopy(model), collate(examples(), pad_token_id=0))
    reference = PlainReference(model, loss_and_gradient_norm(on_gpu, padded))
    del on_gpu
    torch.cuda.empty_cache()
    return reference


def to_gpu(model, batch):
    return model.to("cuda", torch.bfloat16), {name: tensor.cuda() for name, tensor in batch.items()}


def loss_and_gradient_norm(model, batch, *, loss_in_model=False) -> tuple[float, float]:
    from trainer.token_loss import (loss_token_count, micro_batch_objective,
                                    router_aux_loss_coefficient)

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


def assert_trains_as_the_plain_model(plain: PlainReference, fast_model, fast_batch, *,
                                     loss_in_model=False):
    """`fast_model` (the family's model with a speed option) on `fast_batch` against the
    plain model on the padded batch: the same loss and gradient norm, to bf16's rounding."""
    fast, batch = to_gpu(fast_model, fast_batch)
    measured = loss_and_gradient_norm(fast, batch, loss_in_model=loss_in_model)
    assert measured == pytest.approx(plain.loss_and_gradient_norm, rel=LOSS_TOLERANCE)


def test_fused_adamw_steps_as_the_default_adamw_does():
    torch.manual_seed(0)
    # Odd sizes, so the fused kernel's tails are stepped too.
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


# Liger's Mixtral test ran past 35 s on an H200 (Triton compiling its kernels on first use)
# and stopped at gpu_check's budget: the family-free test above runs first, Mixtral's last.
@needs("liger_kernel")
def test_liger_kernels_train_as_the_plain_model_does(plain):
    from tests.trainer.test_padding_free import examples
    from trainer.data.datasets import collate
    from trainer.speed.liger import apply_liger_kernels

    patched = copy.deepcopy(plain.model)
    apply_liger_kernels(patched)
    assert_trains_as_the_plain_model(plain, patched, collate(examples(), pad_token_id=0),
                                     loss_in_model=True)


@needs("flash_attn")
def test_flash_attention_on_a_padding_free_row_trains_as_sdpa_on_padded_rows(plain):
    from transformers import AutoModelForCausalLM

    from tests.trainer.test_padding_free import examples
    from trainer.data.datasets import collate_padding_free

    flash = AutoModelForCausalLM.from_config(plain.model.config,
                                             attn_implementation="flash_attention_2")
    flash.load_state_dict(plain.model.state_dict())
    flash.config.use_cache = False
    assert_trains_as_the_plain_model(plain, flash, collate_padding_free(examples()))
