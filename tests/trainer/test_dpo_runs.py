"""Preference tuning end to end on real torchrun ranks (trainer/objectives/dpo.py): a tiny
model trained with DPO on `builtin:arithmetic-preference` (the chosen answer states the sum
in a sentence, the rejected one is a bare wrong number) comes to prefer the chosen answers;
ZeRO-2 and FSDP train the same curve; each reference (the adapter off, a frozen copy,
precomputed) trains, and the precomputed one equals the live one."""
import pytest

from tests.trainer.conftest import launch_trainer, write_run

pytestmark = pytest.mark.torchrun

DPO = {"objective": "dpo", "dataset": "builtin:arithmetic-preference", "seq_len": 48,
       "lr_schedule": "constant", "max_steps": 30, "micro_batch_size": 4}
FIGURES = ("rewards_chosen", "rewards_rejected", "reward_margin", "reward_accuracy",
           "logps_chosen", "logps_rejected")


@pytest.fixture(scope="module")
def dpo_run(tmp_path_factory, tunedeck_home, builtin_model_dir):
    """dpo_run(**spec_options) -> rank 0's step events, each set of options launched once."""
    steps = {}

    def run(**options) -> list[dict]:
        key = tuple(sorted((name, repr(value)) for name, value in options.items()))
        if key not in steps:
            spec = {**DPO, **options}
            folder = write_run(tmp_path_factory.mktemp("dpo") / "run", **spec)
            result = launch_trainer(folder, tunedeck_home, ranks=spec.get("num_gpus", 2))
            assert result.returncode == 0, result.output
            steps[key] = result.events_of_kind(0, "step")
            run.notices[key] = [event["message"] for event in result.events_of_kind(0, "notice")]
            run.footprints[key] = result.events_of_kind(0, "footprint")
            run.evals[key] = [event["eval_loss"] for event in result.events_of_kind(0, "eval")]
            assert len(steps[key]) == spec["max_steps"]
        return steps[key]

    run.notices, run.footprints, run.evals = {}, {}, {}
    return run


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_lora_dpo_raises_the_preference_accuracy_from_a_coin_toss(dpo_run):
    steps = dpo_run(num_gpus=2, learning_rate=2e-3, max_steps=40)
    assert all(set(FIGURES) <= step.keys() for step in steps)
    first, last = steps[0], steps[-5:]
    # Step 1: the policy is the reference (the adapter starts at zero), so every reward is 0,
    # the loss is log 2 and no pair is preferred yet.
    assert abs(first["loss"] - 0.6931) < 1e-3 and abs(first["reward_margin"]) < 1e-4
    assert first["reward_accuracy"] == 0.5  # every pair a tie: a coin toss
    accuracy = mean(step["reward_accuracy"] for step in last)
    assert accuracy > 0.9, [round(step["reward_accuracy"], 2) for step in steps]
    assert mean(step["reward_margin"] for step in last) > 0.5
    assert mean(step["loss"] for step in last) < 0.35
    print(f"preference accuracy: step 1 {first['reward_accuracy']:.2f}, last 5 steps {accuracy:.3f}")


def test_zero2_and_fsdp_train_the_same_dpo_curve(dpo_run):
    options = {"precision": "fp32", "lora": {"dropout": 0.0}, "max_steps": 12,
               "learning_rate": 1e-3}
    zero2 = dpo_run(backend="zero2", **options)
    fsdp = dpo_run(backend="fsdp", **options)
    for name in ("loss", "reward_margin", "logps_chosen"):
        gaps = [abs(a[name] - b[name]) / max(abs(b[name]), 1e-3) for a, b in zip(fsdp, zero2)]
        assert max(gaps) < 1e-3, (name, gaps)


@pytest.mark.parametrize("backend", ["zero2", "fsdp"])
def test_a_full_dpo_with_a_frozen_copy_equals_its_precomputed_reference(dpo_run, backend):
    # With an eval set: its pairs' reference is precomputed too, before step 1.
    options = {"method": "full", "backend": backend, "precision": "fp32", "max_steps": 4,
               "learning_rate": 1e-4, "eval_split": 0.1}
    live = dpo_run(**options)
    precomputed = dpo_run(**options, dpo={"reference": "precomputed"})
    for name in ("loss", "reward_margin", "rewards_chosen"):
        assert max(abs(a[name] - b[name]) for a, b in zip(live, precomputed)) < 1e-4, name
    assert live[-1]["reward_margin"] > live[0]["reward_margin"]
    live_key = tuple(sorted((k, repr(v)) for k, v in options.items()))
    precomputed_key = tuple(sorted((k, repr(v)) for k, v in {
        **options, "dpo": {"reference": "precomputed"}}.items()))
    (notice,) = [message for message in dpo_run.notices[precomputed_key]
                 if message.startswith("reference log-probabilities")]
    assert "pairs computed" in notice
    (live_eval,), (precomputed_eval,) = dpo_run.evals[live_key], dpo_run.evals[precomputed_key]
    assert abs(live_eval - precomputed_eval) < 1e-4
    # The frozen copy is counted among the weights this rank holds, as the plan counts it.
    (with_copy,), (without,) = dpo_run.footprints[live_key], dpo_run.footprints[precomputed_key]
    assert with_copy["params_bytes"] > without["params_bytes"]


# sigmoid, ipo and hinge are held to TRL's own loss in tests/trainer/test_preference_loss.py.
@pytest.mark.parametrize("loss", ["simpo", "orpo"])
def test_the_reference_free_losses_train(dpo_run, loss):
    steps = dpo_run(num_gpus=1, dpo={"loss": loss}, learning_rate=2e-3, max_steps=15)
    assert steps[-1]["reward_margin"] > steps[0]["reward_margin"]
    assert mean(step["loss"] for step in steps[-3:]) < steps[0]["loss"]
