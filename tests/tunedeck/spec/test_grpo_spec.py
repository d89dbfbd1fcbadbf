"""objective grpo in the spec: the grpo section's defaults and bounds, the rules it shares
with other fields (each refused naming its field), and what the rest of the code reads from
it (the batch layout, the reference)."""
import pytest
from pydantic import ValidationError

from tunedeck.spec.job_spec import JobSpec
from tunedeck.spec.text import format_validation_error, parse_spec_text
from tunedeck.training_steps import BatchLayout

GRPO = {"objective": "grpo", "dataset": "builtin:arithmetic-rl", "max_steps": 10,
        "micro_batch_size": 8, "seq_len": 512}


def errors_of(**changes) -> str:
    data = {**GRPO, **changes}
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    return format_validation_error(caught.value)


def test_a_grpo_spec_reads_from_yaml_with_its_section_and_rewards():
    spec = parse_spec_text("""
objective: grpo
dataset: builtin:arithmetic-rl
max_steps: 10
micro_batch_size: 8
seq_len: 512
grpo:
  num_generations: 4
  beta: 0.04
  epsilon_high: 0.28
  rewards:
    - {name: numeric_match, column: result}
    - {name: regex_match, pattern: '^\\d+$', weight: 0.5}
""")
    assert spec.grpo.num_generations == 4 and spec.grpo.upper_clip == 0.28
    assert spec.grpo.reward_columns == ("result",)
    assert spec.uses_reference_model and spec.reference_mode == "auto"
    assert spec.display_name == "tiny-llama-grpo-lora-zero2"


def test_the_defaults_are_dapo_with_eight_generations_no_reference_and_numeric_match():
    spec = JobSpec.model_validate(GRPO)
    grpo = spec.grpo
    assert (grpo.num_generations, grpo.max_completion_length, grpo.loss_type,
            grpo.scale_rewards, grpo.beta, grpo.epsilon, grpo.upper_clip) == (
        8, 256, "dapo", "group", 0.0, 0.2, 0.2)
    assert [reward.name for reward in grpo.rewards] == ["numeric_match"]
    assert not spec.uses_reference_model and spec.reference_mode is None


@pytest.mark.parametrize("changes, words", [
    ({"grpo": {"num_generations": 1}}, "grpo.num_generations: Input should be greater than or equal to 2"),
    ({"micro_batch_size": 4}, "grpo.num_generations 8 must divide the completions a rank takes a step"),
    ({"seq_len": 256}, "grpo.max_completion_length 256 leaves no room for a prompt in seq_len 256"),
    ({"grpo": {"rewards": [{"name": "bleu"}]}}, "grpo.rewards.0: Input tag 'bleu'"),
    ({"grpo": {"rewards": []}}, "grpo.rewards: List should have at least 1 item"),
    ({"grpo": {"rewards": [{"name": "contains"}]}}, "grpo.rewards.0.contains.text: Field required"),
    ({"grpo": {"rewards": [{"name": "contains", "text": "x", "colour": 1}]}}, "colour"),
    ({"grpo": {"epsilon_high": 0.1}}, "epsilon_high 0.1 is below epsilon 0.2"),
    ({"eval_split": 0.1}, "objective grpo has no eval loss"),
    ({"packing": True}, "packing: objective grpo lays each completion out as a row"),
    ({"columns": {"response": "answer"}}, "objective grpo reads prompts"),
    ({"grpo": {"loss_type": "ppo"}}, "grpo.loss_type"),
])
def test_bad_grpo_settings_are_refused_naming_the_field(changes, words):
    assert words in errors_of(**changes)


def test_the_divisibility_error_suggests_values_that_fit():
    message = errors_of(micro_batch_size=6)
    assert "micro_batch_size × grad_accum = 6 × 1 = 6" in message
    assert "grpo.num_generations 6" in message
    JobSpec.model_validate({**GRPO, "micro_batch_size": 4, "grad_accum": 2})  # 8 a rank: fits


def test_the_grpo_section_is_read_only_under_its_objective():
    # An sft spec with a grpo section that would not fit (a Retry may switch objectives).
    JobSpec.model_validate({"dataset": "builtin:arithmetic", "max_steps": 1, "micro_batch_size": 3,
                            "grpo": {"num_generations": 4}})


def test_a_grpo_epoch_is_every_prompt_sampled_g_times_and_trained_on_mu_times():
    spec = JobSpec.model_validate({**GRPO, "max_steps": None, "epochs": 1, "num_gpus": 2,
                                   "grpo": {"num_generations": 4, "num_iterations": 2}})
    layout = BatchLayout.of(spec)
    assert layout.unit == "completions" and layout.units_per_step == 16
    # 100 prompts x 4 completions x 2 iterations / 16 completions a step
    assert layout.total_steps(max_steps=None, epochs=1, unit_count=100) == 50
