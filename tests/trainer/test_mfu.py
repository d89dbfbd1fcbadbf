"""MFU: tokens/s x 6N (full) or 4N (LoRA) over the GPUs' peak; nothing on a CPU."""
import torch

from trainer.mfu import MfuMeter, matmul_parameter_count, peak_flops_for


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


def test_mfu_is_tokens_times_flops_per_token_over_all_ranks_peak():
    meter = MfuMeter(flops_per_token=6 * 1e9, peak_flops_all_ranks=2 * 1e15)
    assert meter.fields(100_000.0) == {"mfu": 0.3}


def test_a_cpu_rank_reports_no_mfu():
    meter = MfuMeter.for_model(torch.nn.Linear(4, 4), full_finetune=True,
                               device=torch.device("cpu"), world_size=2)
    assert meter.fields(1e6) == {}
