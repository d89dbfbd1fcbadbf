"""Online RL (GRPO) end to end on real torchrun ranks (trainer/objectives/grpo.py): a tiny
model fine-tuned on builtin:arithmetic (SFT, LoRA) is trained on its own completions to
builtin:arithmetic-rl's questions, with rewards it can raise.

The reward: `contains` "7" (1 when the completion has a 7 in it) plus half a
`numeric_match` within 10 of the answer. The tiny model (2 layers, 64 wide) cannot do sums,
but a 7 is a choice among the digits it already writes, so the share of rewarded samples
climbs from about a fifth within twenty steps: the whole loop (sampling, scoring, group
advantages, the clipped step) has to work for it to climb at all. ZeRO-2 and FSDP sample
the same completions and train the same curve; a KL term against a frozen copy and a round
trained on twice run on both."""
import pytest

from tests.trainer.conftest import launch_trainer, write_run

pytestmark = pytest.mark.torchrun

REWARDS = [{"name": "contains", "text": "7"},
           {"name": "numeric_match", "tolerance": 10, "weight": 0.5}]
GRPO = {"objective": "grpo", "dataset": "builtin:arithmetic-rl", "seq_len": 48,
        "micro_batch_size": 8, "lr_schedule": "constant", "learning_rate": 3e-3,
        "grpo": {"num_generations": 4, "max_completion_length": 8, "rewards": REWARDS}}
RL_FIGURES = ("reward", "reward_std", "frac_reward_zero_std", "reward_means", "clip_ratio_low",
              "clip_ratio_high", "entropy", "completion_length", "completion_length_min",
              "completion_length_max", "clipped_ratio", "sampling_seconds", "scoring_seconds",
              "training_seconds")


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory, tunedeck_home, builtin_model_dir):
    """The merged weights of a short SFT job on builtin:arithmetic: a model that answers
    with digits and stops, as a GRPO job continues from."""
    run = write_run(tmp_path_factory.mktemp("sft") / "run", max_steps=60, micro_batch_size=4)
    result = launch_trainer(run, tunedeck_home)
    assert result.returncode == 0, result.output
    return run.merged_dir


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory, tunedeck_home, sft_model):
    """grpo_run(**spec_options) -> rank 0's step events, each set of options launched once."""
    steps = {}

    def run(**options) -> list[dict]:
        key = repr(sorted(options.items()))
        if key not in steps:
            spec = {**GRPO, "model": str(sft_model), **options}
            folder = write_run(tmp_path_factory.mktemp("grpo") / "run", **spec)
            result = launch_trainer(folder, tunedeck_home)
            assert result.returncode == 0, result.output
            steps[key] = result.events_of_kind(0, "step")
            run.rollouts[key] = result.events_of_kind(0, "rollout")
            run.notices[key] = [event["message"] for event in result.events_of_kind(0, "notice")]
            assert len(steps[key]) == spec["max_steps"]
            assert not result.events_of_kind(1, "rollout")  # rank 0 keeps them
        return steps[key]

    run.rollouts, run.notices = {}, {}
    return run


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


@pytest.mark.parametrize("backend", ["zero2", "fsdp"])
def test_grpo_raises_the_mean_reward_on_both_backends(grpo_run, backend):
    steps = grpo_run(backend=backend, max_steps=30)
    assert all(set(RL_FIGURES) <= step.keys() for step in steps)
    rewards = [step["reward"] for step in steps]
    first, last = mean(rewards[:10]), mean(rewards[-10:])
    print(f"{backend}: mean reward, first 10 steps {first:.3f}, last 10 {last:.3f}: "
          f"{[round(value, 2) for value in rewards]}")
    assert last > first + 0.4, rewards
    contains = [step["reward_means"]["contains"] for step in steps]
    assert mean(contains[-10:]) > 0.8 > mean(contains[:10])
    for step in steps:
        assert 1 <= step["completion_length_min"] <= step["completion_length"] \
            <= step["completion_length_max"] <= 8
        assert 0 <= step["frac_reward_zero_std"] <= 1 and 0 <= step["clipped_ratio"] <= 1
        assert step["sampling_seconds"] > 0 and step["training_seconds"] > 0
        assert "kl" not in step  # beta 0: no reference is held
    key = repr(sorted({"backend": backend, "max_steps": 30}.items()))
    # lora.dropout 0.05 by default: GRPO trains without it, and says so.
    assert any(message.startswith("objective grpo trains without dropout")
               for message in grpo_run.notices[key])
    # Kept every 10 steps (and at step 1): 2 prompts, each with its 4 completions.
    rollouts = grpo_run.rollouts[key]
    assert [rollout["step"] for rollout in rollouts] == [1, 10, 20, 30]
    for rollout in rollouts:
        assert len(rollout["samples"]) == 2
        for sample in rollout["samples"]:
            assert sample["prompt"].startswith("What is ") and len(sample["completions"]) == 4
            for completion in sample["completions"]:
                expected = completion["rewards"]["contains"] \
                    + 0.5 * completion["rewards"]["numeric_match"]
                assert abs(completion["reward"] - expected) < 1e-9
                assert completion["rewards"]["contains"] == float("7" in completion["text"])


def test_zero2_and_fsdp_sample_and_train_the_same_curve(grpo_run):
    options = {"precision": "fp32", "lora": {"dropout": 0.0}, "max_steps": 8}
    zero2, fsdp = grpo_run(backend="zero2", **options), grpo_run(backend="fsdp", **options)
    for name in ("loss", "reward", "entropy", "completion_length", "grad_norm"):
        gaps = [abs(a[name] - b[name]) / max(abs(b[name]), 1e-3) for a, b in zip(fsdp, zero2)]
        assert max(gaps) < 1e-3, (name, gaps)


@pytest.mark.parametrize("backend", ["zero2", "fsdp"])
def test_a_kl_term_on_a_frozen_copy_and_a_round_trained_on_twice(grpo_run, backend):
    steps = grpo_run(backend=backend, method="full", precision="fp32", max_steps=4,
                     learning_rate=2e-3, grpo={**GRPO["grpo"], "beta": 0.1, "num_iterations": 2,
                                               "loss_type": "grpo"})
    # Step 1: the policy is the reference: no divergence yet; after an update there is.
    assert steps[0]["kl"] == 0 and all(step["kl"] > 0 for step in steps[1:])
    # Rounds are sampled on steps 1 and 3; steps 2 and 4 train on them again, their ratio
    # to the sampling policy no longer 1, and the round's rewards reported with them.
    assert [step["sampling_seconds"] > 0 for step in steps] == [True, False, True, False]
    assert steps[1]["reward"] == steps[0]["reward"] and steps[3]["reward"] == steps[2]["reward"]


def test_a_python_reward_runs_on_the_ranks_as_the_scorer_it_stands_for(grpo_run, tmp_path_factory):
    """The user's function, imported by each rank, gives the rewards `contains` "7" gives:
    the same completions, the same rewards, the same steps."""
    path = tmp_path_factory.mktemp("rewards") / "sevens.py"
    path.write_text("def reward(prompts, completions, answer):\n"
                    "    assert len(answer) == len(completions)\n"
                    "    return [float('7' in completion) for completion in completions]\n")
    options = {"max_steps": 4, "precision": "fp32", "lora": {"dropout": 0.0}}
    python = grpo_run(**options, grpo={**GRPO["grpo"], "rewards": [
        {"name": "python", "path": str(path), "reads": ["answer"]}]})
    builtin = grpo_run(**options, grpo={**GRPO["grpo"], "rewards": [REWARDS[0]]})
    assert [step["reward"] for step in python] == [step["reward"] for step in builtin]
    assert [step["loss"] for step in python] == [step["loss"] for step in builtin]
    assert set(python[0]["reward_means"]) == {"python"}


def test_a_lora_round_trained_twice_starts_at_ratio_one_with_default_dropout(grpo_run):
    """Dropout is off under GRPO: the first pass over a round has nothing to clip, and the
    KL to the reference (the adapter switched off) is 0 before the first update."""
    steps = grpo_run(max_steps=2, grpo={**GRPO["grpo"], "beta": 0.1, "num_iterations": 2})
    assert steps[0]["kl"] == 0 and steps[0]["clip_ratio_low"] == steps[0]["clip_ratio_high"] == 0
