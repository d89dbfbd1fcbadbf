"""A real 2-rank run with a held-out eval split, periodic evaluation and packed rows, and
what it did as the preview said it would."""
from statistics import mean

import pytest

from tunedeck.launch_config import trainer_settings
from tunedeck.run_folder import read_json
from tunedeck.spec.job_spec import JobSpec

pytestmark = pytest.mark.torchrun

STEPS = 22  # not a multiple of eval_every_steps: the final evaluation is one of its own
EVAL_EVERY_STEPS = 5


@pytest.mark.parametrize("backend", ["fsdp", "zero2"])
def test_packed_run_with_an_eval_split_reports_a_falling_eval_loss(backend, run_trainer):
    result = run_trainer(backend=backend, max_steps=STEPS, warmup_steps=2, eval_split=0.2,
                         eval_every_steps=EVAL_EVERY_STEPS, packing=True, seq_len=64)
    assert result.returncode == 0, result.output
    print(f"{backend} packed run with eval: {result.seconds:.1f} s")

    evaluations = [result.events_of_kind(rank, "eval") for rank in range(result.ranks)]
    assert [event["step"] for event in evaluations[0]] == [5, 10, 15, 20, STEPS]
    # All-reduced: every rank reports the same loss over the same (whole) eval set.
    assert [(e["eval_loss"], e["eval_tokens"]) for e in evaluations[0]] == \
           [(e["eval_loss"], e["eval_tokens"]) for e in evaluations[1]]
    assert len({event["eval_tokens"] for event in evaluations[0]}) == 1
    eval_losses = [event["eval_loss"] for event in evaluations[0]]
    print(f"eval losses {[round(loss, 3) for loss in eval_losses]}")
    assert eval_losses[-1] < eval_losses[0] - 0.3, eval_losses

    losses = [event["loss"] for event in result.events_of_kind(0, "step")]
    assert len(losses) == STEPS and mean(losses[-5:]) < mean(losses[:5]) - 0.3, losses
    started = next(event["message"] for event in result.events_of_kind(0, "notice")
                   if event["message"].startswith("training started"))
    assert "1600 examples in" in started and "packed rows" in started, started

    # The preview of this spec is what the ranks did: the rates at its landmark steps, the
    # evaluations, the batch layout, the kernels auto chose on this (CPU) host.
    preview = trainer_settings(JobSpec.model_validate(read_json(result.run.spec_file)))
    rates = {event["step"]: event["learning_rate"] for event in result.events_of_kind(0, "step")}
    assert [rates[point["step"]] for point in preview["lr_schedule"]["at_steps"]] == \
        [point["learning_rate"] for point in preview["lr_schedule"]["at_steps"]]
    assert len(evaluations[0]) == preview["eval"]["runs"]
    assert (f"{preview['batch']['micro_batch_size']} packed rows x 1 micro-batches x 2 ranks "
            f"= {preview['batch']['per_step']} packed rows a step") in started, started
    # kernels auto (the default) says what it chose and why, in the job's events.
    assert [event["message"] for event in result.events_of_kind(0, "notice")
            if event["message"].startswith("kernels auto")] == [
        "kernels auto: none (no CUDA GPU on this host (Liger's kernels are GPU code))"] == [
        f"kernels auto: none ({preview['kernels']['cpu_host']['why']})"]
