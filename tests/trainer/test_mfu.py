"""MFU both ways: tokens/s x (the method's weight FLOPs, or plain 6N, plus attention's) over
the GPUs' peak; nothing on a CPU."""
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from trainer import mfu as mfu_module
from trainer.data.datasets import TokenizedExample, micro_batches
from trainer.mfu import FlopsPerToken, MfuMeter, context_length, matmul_parameter_count
from tunedeck.planner.gpu_cards import peak_flops_for
from trainer.data.packing import pack_examples

# Per layer: q 16x16, k and v 16x8 (2 KV heads of 4), o 16x16, gate and up 16x32, down
# 32x16 = 2304; two layers and lm_head 16x64: N = 5632.
TINY_MATMUL = 2 * (256 + 128 + 128 + 256 + 3 * 512) + 16 * 64
# 12 x layers x heads x head_dim
TINY_ATTENTION_PER_CONTEXT = 12 * 2 * 4 * 4


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False))


def tiny_lora() -> torch.nn.Module:
    return get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))


@pytest.fixture
def fake_h100(monkeypatch):
    """for_model on a 'cuda' device named as an H100 (989 TFLOP/s), without a GPU."""
    monkeypatch.setattr(mfu_module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(mfu_module.torch.cuda, "get_device_name",
                        lambda device=None: "NVIDIA H100 80GB HBM3")
    return torch.device("cuda")


def test_peak_flops_by_device_name():
    assert peak_flops_for("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops_for("NVIDIA H100 PCIe") == 756e12
    assert peak_flops_for("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops_for("Some Future Card") is None


def test_matmul_parameters_count_every_linear_trainable_or_not():
    model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 16),
                                torch.nn.Linear(16, 4, bias=False))
    model[1].requires_grad_(False)
    assert matmul_parameter_count(model) == 8 * 16 + 16 * 4
    assert matmul_parameter_count(model, trainable_only=True) == 16 * 4


def test_a_full_finetune_counts_6n_plus_attention_both_ways(fake_h100):
    meter = MfuMeter.for_model(tiny_llama(), device=fake_h100, world_size=2)
    fields = meter.fields(1e9, context_tokens=100.0)
    expected = 1e9 * (6 * TINY_MATMUL + TINY_ATTENTION_PER_CONTEXT * 100) / (2 * 989e12)
    assert fields == pytest.approx({"mfu": expected, "mfu_6n": expected})


def test_lora_counts_no_weight_gradients_for_the_frozen_base_but_6n_does(fake_h100):
    model = tiny_lora()
    # q gets A 16x2 and B 2x16, v A 16x2 and B 2x8, in each of the two layers.
    adapters = 2 * (32 + 32 + 32 + 16)
    assert matmul_parameter_count(model) == TINY_MATMUL + adapters
    meter = MfuMeter.for_model(model, device=fake_h100, world_size=1)
    fields = meter.fields(1e9, context_tokens=50.0)
    attention = TINY_ATTENTION_PER_CONTEXT * 50
    assert fields["mfu"] == pytest.approx(
        1e9 * (4 * TINY_MATMUL + 6 * adapters + attention) / 989e12)
    assert fields["mfu_6n"] == pytest.approx(1e9 * (6 * (TINY_MATMUL + adapters) + attention) / 989e12)
    # The weights alone: plain 6N reads about 1.5x (a little less, for the trained adapters).
    weights_only = meter.fields(1e9, context_tokens=0.0)
    assert 1.45 < weights_only["mfu_6n"] / weights_only["mfu"] < 1.5


def test_attention_reads_head_dim_from_the_config_when_it_differs_from_hidden_over_heads():
    config = LlamaConfig(hidden_size=16, num_hidden_layers=3, num_attention_heads=4, head_dim=8)
    assert FlopsPerToken.of_model(LlamaForCausalLM(config)).attention_per_context == 12 * 3 * 4 * 8
    assert FlopsPerToken.of_model(torch.nn.Linear(4, 4)).attention_per_context == 0.0


def test_the_context_is_each_rows_tokens_weighted_by_its_tokens():
    assert context_length([(3, 1)]) == (3 * 3 + 1 * 1) / (3 + 1)
    assert context_length([(3, 1), (6,)]) == (9 + 1 + 36) / (3 + 1 + 6)


@pytest.mark.parametrize("packing", [False, True])
def test_padded_and_padding_free_micro_batches_count_the_same_rows(packing):
    examples = [TokenizedExample(input_ids=[5] * length, labels=[-100] + [7] * (length - 1))
                for length in (3, 5, 2, 4, 6, 1, 3, 2)]
    rows = pack_examples(examples, seq_len=8) if packing else examples

    def first_batch(padding_free):
        return next(micro_batches(rows, micro_batch_size=2, pad_token_id=0, seed=1, rank=0,
                                  world_size=1, padding_free=padding_free))
    padded, padding_free = first_batch(False), first_batch(True)
    assert padded.row_lengths == padding_free.row_lengths
    assert padded.token_count == padding_free.token_count == sum(padded.row_lengths)
    assert padded.loss_tokens == padding_free.loss_tokens
    assert padding_free.inputs["input_ids"].shape == (1, sum(padded.row_lengths))


def test_step_fields_measure_the_steps_rows(fake_h100):
    meter = MfuMeter(FlopsPerToken(method_weights=4e9, plain_weights=6e9,
                                   attention_per_context=1e6), peak_flops_all_ranks=1e15)
    # 100k tokens/s x (4e9 + 1e6 x 2000) / 1e15 = 0.6; with 6N, 0.8.
    assert meter.step_fields(1e5, [(2000, 2000)]) == pytest.approx({"mfu": 0.6, "mfu_6n": 0.8})


def test_a_cpu_rank_reports_no_mfu():
    meter = MfuMeter.for_model(torch.nn.Linear(4, 4), device=torch.device("cpu"), world_size=2)
    assert meter.fields(1e6, context_tokens=10.0) == {}
    assert meter.step_fields(1e6, []) == {}  # the rows are not even read


def test_an_unknown_card_reports_no_mfu(fake_h100, monkeypatch):
    monkeypatch.setattr(mfu_module.torch.cuda, "get_device_name", lambda device=None: "Future")
    assert MfuMeter.for_model(tiny_llama(), device=fake_h100, world_size=1).fields(
        1e6, context_tokens=10.0) == {}
