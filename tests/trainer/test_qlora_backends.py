"""QLoRA's 4-bit weights under each backend, on 2 CPU ranks with the trainer's own QLoRA
model (qlora_probe.py): ZeRO-2 keeps them whole; FSDP2 `fully_shard` strips their
quantization state, which is why the spec refuses qlora under fsdp."""
from pathlib import Path

import pytest

from tunedeck.spec.job_spec import JobSpec

from tunedeck.spec.text import format_validation_error
from tests.trainer.conftest import run_probe

pytestmark = pytest.mark.torchrun

PROBE = Path(__file__).with_name("qlora_probe.py")


@pytest.fixture(scope="module")
def probe_report(tmp_path_factory, tunedeck_home, builtin_model_dir) -> dict:
    report_file = tmp_path_factory.mktemp("qlora-probe") / "report.json"
    return run_probe(PROBE, builtin_model_dir, report_file, tunedeck_home)


def test_zero2_leaves_the_4bit_weights_and_their_quant_state_untouched(probe_report):
    # DeepSpeed casts floating-point parameters to bf16; uint8 ones are not cast.
    assert probe_report["zero2"] == {"type": "Params4bit", "dtype": "torch.uint8",
                                     "same_bytes": True, "same_quant_state": True,
                                     "same_dequantized": True, "norm_dtype": "torch.bfloat16"}


def test_fully_shard_turns_each_4bit_weight_into_a_uint8_shard_without_quant_state(probe_report):
    for variant in ("as_trained", "bitsandbytes_default"):
        assert probe_report[variant]["before"] == {"type": "Params4bit", "dtype": "torch.uint8",
                                                   "has_quant_state": True}
        assert probe_report[variant]["after"] == {"type": "DTensor", "dtype": "torch.uint8",
                                                  "has_quant_state": False}


def test_training_steps_stay_exact_because_bitsandbytes_rebuilds_the_state(probe_report):
    for variant in ("as_trained", "bitsandbytes_default"):
        assert probe_report[variant]["train_loss_differences"] == [0.0, 0.0, 0.0]
    # The trainer keeps one 4-bit layout (trainer.model.method.prepare_quantized_base): eval
    # forwards and the training forward after them match too.
    assert probe_report["as_trained"]["eval_then_train_logit_differences"] == [0.0, 0.0, 0.0]


def test_with_bitsandbytes_cpu_repacking_one_eval_forward_breaks_every_later_one(probe_report):
    if not probe_report["repacks_on_this_cpu"]:
        pytest.skip("bitsandbytes repacks 4-bit weights only on CPUs with AVX512-BF16")
    first_eval, second_eval, train = probe_report["bitsandbytes_default"]["eval_then_train_logit_differences"]
    # The first eval forward repacks the gathered copy in place and is still right; FSDP
    # then gathers the unpacked shards again, read under the repacked layer state.
    assert first_eval == 0.0 and second_eval > 5.0 and train > 5.0


def test_the_spec_refuses_it_saying_what_the_probe_shows_and_what_to_choose():
    with pytest.raises(ValueError) as refusal:
        JobSpec(max_steps=1, method="qlora", backend="fsdp")
    message = format_validation_error(refusal.value)
    assert "plain uint8 shard without its quantization state" in message
    assert "logits off by over 5" in message
    assert "use backend zero2" in message and "method lora under fsdp" in message
