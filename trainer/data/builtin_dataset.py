"""`builtin:arithmetic`: a synthetic instruction set a tiny model visibly learns.

Short questions with one- to three-digit answers: the answer format (digits, then the end of
the turn) is learned within tens of steps, so a falling loss shows the whole pipeline works.
"""
from __future__ import annotations

import random

ARITHMETIC_SEED = 7
ARITHMETIC_SIZE = 2000
OPERAND_LIMIT = 50


def arithmetic_pairs(size: int = ARITHMETIC_SIZE, seed: int = ARITHMETIC_SEED) -> list[tuple[str, str]]:
    """(prompt, response) pairs such as ("What is 12 + 7?", "19"); the same on every call."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(size):
        left, right = rng.randrange(OPERAND_LIMIT), rng.randrange(OPERAND_LIMIT)
        if rng.random() < 0.5:
            pairs.append((f"What is {left} + {right}?", str(left + right)))
        else:
            # Keep differences non-negative so every answer is plain digits.
            left, right = max(left, right), min(left, right)
            pairs.append((f"What is {left} - {right}?", str(left - right)))
    return pairs


# `builtin:arithmetic-preference`: the same questions as preference pairs. The chosen answer
# states the sum in a sentence ("12 + 7 = 19."), the rejected one is a bare wrong number: a
# tiny model learns to prefer the chosen style within tens of steps, so its preference
# accuracy visibly climbs from about 0.5.
ARITHMETIC_PREFERENCE_SIZE = 1000


def arithmetic_preference_records(size: int = ARITHMETIC_PREFERENCE_SIZE,
                                  seed: int = ARITHMETIC_SEED) -> list[dict[str, str]]:
    """{prompt, chosen, rejected} records; the same on every call."""
    rng = random.Random(seed + 1)
    records = []
    for prompt, response in arithmetic_pairs(size, seed):
        question = prompt.removeprefix("What is ").removesuffix("?")
        right = int(response)
        wrong = rng.choice([right + offset for offset in (-3, -2, -1, 1, 2, 3)
                            if right + offset >= 0])
        records.append({"prompt": prompt, "chosen": f"{question} = {response}.",
                        "rejected": str(wrong)})
    return records


# `builtin:arithmetic-rl`: the same questions as prompts, each with its result as `answer`,
# for objective grpo: a numeric_match reward (the last number in the completion equals the
# answer) scores a completion, so a model that already states results (an SFT job on
# builtin:arithmetic) has a reward it can raise.
ARITHMETIC_RL_SIZE = 1000


def arithmetic_rl_records(size: int = ARITHMETIC_RL_SIZE,
                          seed: int = ARITHMETIC_SEED) -> list[dict[str, str]]:
    """{prompt, answer} records; the same on every call."""
    return [{"prompt": prompt, "answer": answer}
            for prompt, answer in arithmetic_pairs(size, seed + 2)]
