"""The built-in scorers: what each rewards, the options each takes, the columns each
reads, and that a spec's `rewards` list is validated by the same classes."""
from __future__ import annotations

import time

import pytest
from pydantic import TypeAdapter, ValidationError

from tunedeck.rewards.scorers import (SCORER_NAMES, Reward, parse_number, reward_label,
                                      total_rewards)

REWARDS = TypeAdapter(list[Reward])


def one(**fields):
    (reward,) = REWARDS.validate_python([fields])
    return reward


@pytest.mark.parametrize("completion,answer,expected", [
    ("7 + 5 = 12", "12", 1.0),
    ("It is 12.", "12", 1.0),               # a full stop after the number
    ("12, no wait, 13", "12", 0.0),         # the last number counts
    ("The total is 1,234", "1234", 1.0),    # thousands commas
    ("-3", "-3.0", 1.0),
    ("no number here", "4", 0.0),
    ("4", "four", 0.0),                     # an answer that is no number matches nothing
])
def test_numeric_match_compares_the_last_number_with_the_answer(completion, answer, expected):
    assert one(name="numeric_match").score("7 + 5 =", completion, {"answer": answer}) == expected


def test_numeric_match_reads_the_column_it_is_given_within_its_tolerance():
    reward = one(name="numeric_match", column="solution", tolerance=0.01)
    assert reward.columns == {"solution"}
    assert reward.score("", "about 3.14", {"solution": 3.1416}) == 1.0
    assert reward.score("", "about 3.2", {"solution": 3.1416}) == 0.0


def test_exact_match_ignores_white_space_around_and_case_only_when_asked():
    assert one(name="exact_match").score("", "  Paris\n", {"answer": "Paris"}) == 1.0
    assert one(name="exact_match").score("", "paris", {"answer": "Paris"}) == 0.0
    assert one(name="exact_match", case_sensitive=False).score("", "paris", {"answer": "Paris"}) == 1.0


def test_regex_match_finds_a_format_and_stops_a_pattern_that_runs_away():
    tagged = one(name="regex_match", pattern=r"<answer>\d+</answer>")
    assert tagged.score("", "work... <answer>12</answer>", {}) == 1.0
    assert tagged.score("", "<answer>twelve</answer>", {}) == 0.0
    whole = one(name="regex_match", pattern=r"\d+", full_match=True)
    assert (whole.score("", "12", {}), whole.score("", "12 apples", {})) == (1.0, 0.0)
    runaway = one(name="regex_match", pattern=r"(x+x+)+y")
    started = time.monotonic()
    assert runaway.score("", "x" * 5000, {}) == 0.0
    assert time.monotonic() - started < 5


def test_contains_and_the_length_penalty():
    assert one(name="contains", text="Because").score("", "because I said so", {}) == 1.0
    assert one(name="contains", text="Because", case_sensitive=True).score("", "because", {}) == 0.0
    length = one(name="length", target=10)
    assert [length.score("", "x" * n, {}) for n in (5, 10, 15, 20, 40)] == [0.0, 0.0, -0.5, -1.0, -1.0]


@pytest.mark.parametrize("fields,named", [
    ({"name": "bleu"}, "name"),                                   # not a scorer
    ({"name": "numeric_match", "colum": "answer"}, "colum"),      # a misspelt option
    ({"name": "regex_match", "pattern": "(unclosed"}, "pattern"),
    ({"name": "length", "target": 0}, "target"),
    ({"name": "contains"}, "text"),                               # a required option missing
])
def test_a_bad_reward_is_refused_naming_the_field(fields, named):
    with pytest.raises(ValidationError) as refused:
        REWARDS.validate_python([fields])
    assert named in str(refused.value)


def test_the_total_is_the_weighted_sum_and_each_reward_keeps_its_own_scores():
    rewards = REWARDS.validate_python([
        {"name": "numeric_match", "weight": 2.0},
        {"name": "regex_match", "pattern": r"^\d+$"},
        {"name": "regex_match", "pattern": "=", "weight": 0.5}])
    totals, each = total_rewards(rewards, ["1+1=", "2+2="], ["2", "so = 5"], {"answer": ["2", "4"]})
    assert totals == [3.0, 0.5]
    assert each == {"numeric_match": [1.0, 0.0], "regex_match": [1.0, 0.0], "regex_match_2": [0.0, 1.0]}
    assert reward_label(rewards[2], rewards) == "regex_match_2"


def test_every_scorer_is_named_and_described():
    assert set(SCORER_NAMES) == {"numeric_match", "exact_match", "regex_match", "contains", "length",
                                 "python", "reward_model"}
    assert parse_number("1,000.") == 1000.0 and parse_number("inf") is None


USER_REWARD = '''
def reward(prompts, completions, answer):
    return [float(completion.strip() == expected) for completion, expected
            in zip(completions, answer)]


def broken(prompts, completions):
    return [1.0]


def not_numbers(prompts, completions):
    return ["high" for _ in completions]
'''


def test_a_python_reward_calls_the_users_function_with_the_columns_it_reads(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(USER_REWARD)
    reward = one(name="python", path=str(path), reads=["answer"])
    assert reward.columns == frozenset({"answer"})
    totals, each = total_rewards([reward], ["q1", "q2"], ["4", " 5 "], {"answer": ["4", "6"]})
    assert totals == [1.0, 0.0] and each == {"python": [1.0, 0.0]}
    with pytest.raises(ValueError, match="returned list of 1; expected a list of 2 numbers"):
        one(name="python", path=str(path), function="broken").score_all(["a", "b"], ["x", "y"], {})
    with pytest.raises(ValueError, match="returned 'high' for a completion"):
        one(name="python", path=str(path), function="not_numbers").score_all(["a"], ["x"], {})
    with pytest.raises(ValueError, match="no function 'missing'"):
        one(name="python", path=str(path), function="missing").score_all(["a"], ["x"], {})
    with pytest.raises(ValidationError, match="path"):
        one(name="python", path=str(tmp_path / "reward.txt"))


def test_python_rewards_are_refused_until_an_administrator_turns_them_on(tmp_path):
    from tunedeck.rewards.scorers import python_reward_problems, reward_paths

    rewards = REWARDS.validate_python([{"name": "contains", "text": "x"},
                                       {"name": "python", "path": "/data/r.py"}])
    (problem,) = python_reward_problems(rewards, allowed=False)
    assert problem[0] == "grpo.rewards[1]" and "TUNEDECK_PYTHON_REWARDS=1" in problem[1]
    assert python_reward_problems(rewards, allowed=True) == []
    assert reward_paths(rewards) == [("grpo.rewards[1].path", "/data/r.py")]


def test_a_reward_model_scores_the_prompt_and_completion_in_batches(tmp_path):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    from trainer.model.builtin_model import ensure_builtin_model

    builtin_tokenizer = AutoTokenizer.from_pretrained(ensure_builtin_model(tmp_path / "home"))

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(builtin_tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         num_labels=1, initializer_range=0.2,
                         pad_token_id=builtin_tokenizer.pad_token_id)
    LlamaForSequenceClassification(config).save_pretrained(tmp_path / "rm")
    builtin_tokenizer.save_pretrained(tmp_path / "rm")
    batched = one(name="reward_model", path=str(tmp_path / "rm"), batch_size=4)
    alone = one(name="reward_model", path=str(tmp_path / "rm"), batch_size=1)
    prompts, completions = ["What is 2 + 2?"] * 3, ["4", "five", "4, surely"]
    scores = batched.score_all(prompts, completions, {})
    assert len(scores) == 3 and len(set(scores)) == 3
    assert scores == pytest.approx(alone.score_all(prompts, completions, {}), abs=1e-5)
