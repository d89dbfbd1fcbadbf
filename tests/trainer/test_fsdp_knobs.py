"""The FSDP knobs of the spec, carried out by FSDP2 on 2 CPU ranks: prefetching (seen in a
profile of one step, fsdp_knobs_probe.py), loss scaling, buffer and master-weight dtypes,
rank-0-only gathering, and torch.compile through the real trainer."""
from pathlib import Path

import pytest
import torch

from trainer.backends.fsdp_sharding import cast_floating_buffers
from tests.trainer.conftest import run_probe

PROBE = Path(__file__).with_name("fsdp_knobs_probe.py")
LAYERS = ("model.layers.0", "model.layers.1")
TINY_LLAMA_PARAMETERS = 21  # embeddings, 2 x 9 per layer, final norm, head


@pytest.fixture(scope="module")
def probe_reports(tmp_path_factory, tunedeck_home, builtin_model_dir) -> list[dict]:
    """One report per rank, each {case: what that rank saw}."""
    report_file = tmp_path_factory.mktemp("fsdp-knobs") / "report.json"
    return run_probe(PROBE, builtin_model_dir, report_file, tunedeck_home)


def gathered_in(report: dict, layer: str) -> list[str]:
    """The FSDP hook records inside which `layer`'s all-gathers ran, in order."""
    return [hook for name, hook in report["all_gathers"] if name == f"FSDP::all_gather ({layer})"]


@pytest.mark.torchrun
def test_by_default_backward_prefetches_and_forward_does_not(probe_reports):
    report = probe_reports[0]["defaults"]
    for layer in LAYERS:
        # Forward: each layer gathers itself. Backward: the module before it in backward
        # order already issued the gather (FSDP2's implicit one-layer prefetch).
        assert gathered_in(report, layer) == [f"FSDP::pre_forward ({layer})",
                                              f"FSDP::backward_prefetch for {layer}"]


@pytest.mark.torchrun
def test_forward_prefetch_on_and_backward_prefetch_off(probe_reports):
    report = probe_reports[0]["forward_prefetch_no_backward_prefetch"]
    first, second = LAYERS
    assert gathered_in(report, first) == [f"FSDP::pre_forward ({first})",
                                          f"FSDP::pre_backward ({first})"]
    # The first layer issues the second's gather; in backward each layer waits for its own.
    assert gathered_in(report, second) == [f"FSDP::forward_prefetch for {second}",
                                           f"FSDP::pre_backward ({second})"]


@pytest.mark.torchrun
def test_fp16_compute_scales_the_loss_and_keeps_fp32_masters_and_rotary_buffers(probe_reports):
    for rank_report in probe_reports:
        fp16 = rank_report["fp16_bf16_buffers"]
        assert fp16["scaler"] == "ShardedGradScaler" and fp16["grad_norm_is_finite"]
        assert fp16["parameter_dtypes"] == ["torch.float32"]
        # buffer_dtype bf16, but the rotary frequencies stay fp32 (FP32_BUFFER_SUFFIXES).
        assert set(fp16["buffers"].values()) == {"torch.float32"}
        assert rank_report["defaults"]["scaler"] is None


@pytest.mark.torchrun
def test_the_full_state_is_gathered_on_rank_0_only(probe_reports):
    assert [report["defaults"]["gathered_names"] for report in probe_reports] == [
        TINY_LLAMA_PARAMETERS, 0]


def test_buffer_dtype_casts_floating_buffers_but_not_rotary_frequencies_or_integers():
    module = torch.nn.Module()
    module.register_buffer("running_scale", torch.ones(3))
    module.register_buffer("token_ids", torch.arange(3))
    rotary = torch.nn.Module()
    rotary.register_buffer("inv_freq", torch.rand(4))
    module.rotary_emb = rotary

    cast_floating_buffers(module, "bfloat16")

    dtypes = {name: buffer.dtype for name, buffer in module.named_buffers()}
    assert dtypes == {"running_scale": torch.bfloat16, "token_ids": torch.int64,
                      "rotary_emb.inv_freq": torch.float32}


@pytest.mark.torchrun
def test_compiled_layers_with_every_knob_train(run_trainer):
    """torch.compile of each decoder layer (inductor builds C++ kernels with the host's
    compiler): about 90 s on a cold inductor cache on 2 cores, about 20 s warm, hence 2 steps."""
    result = run_trainer(backend="fsdp", method="lora", precision="fp16", max_steps=2,
                         fsdp={"compile": True, "forward_prefetch": True,
                               "backward_prefetch": False, "buffer_dtype": "bf16",
                               "reduce_dtype": "bf16"})
    assert result.returncode == 0, result.output
    print(f"fsdp compiled run: {result.seconds:.1f} s")
    losses = [event["loss"] for event in result.events_of_kind(0, "step")]
    assert len(losses) == 2 and losses[1] < losses[0]
