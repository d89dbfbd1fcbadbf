"""The built-in scorers. Each is a pydantic model: its `name` picks it, `weight` scales it
in the sum a completion is rewarded with, and its other fields are its options, so a job
spec's `rewards` list is validated (unknown keys and names refused, naming them) by the
same classes that score. `score` is a pure function of the prompt, the completion and the
record's columns; `columns` names the columns it reads, so a dataset that lacks one is
refused before any GPU is taken.

Scores are in [0, 1] for the matches and in [-1, 0] for the length penalty, so weights
compare like for like."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Union

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator

# The last number in a text: an optional sign, digits with optional thousands commas, an
# optional fraction or exponent ("-1,234.5", "3e-2").
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
# A user's pattern runs on every completion of every step: one that backtracks badly is
# stopped after this long and scores 0 (the `regex` module's timeout; `re` has none).
PATTERN_SECONDS = 0.1


class Scorer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: ClassVar[str]

    weight: float = Field(1.0, title="Weight", description="how much this reward counts in the sum a completion gets")

    @property
    def columns(self) -> frozenset[str]:
        """The dataset columns `score` reads."""
        return frozenset()

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        raise NotImplementedError


class NumericMatch(Scorer):
    """1 when the last number in the completion equals the record's answer (within
    `tolerance`), else 0: arithmetic and math word problems, where the model may show
    its working before the result."""
    description: ClassVar[str] = "the last number in the completion equals the answer column"
    name: Literal["numeric_match"] = Field(title="Scorer", description="`numeric_match`: picks this scorer")
    column: str = Field("answer", title="Answer column", min_length=1, description="the column holding the expected number")
    tolerance: float = Field(1e-6, title="Tolerance", ge=0, description="largest difference still counted as equal")

    @property
    def columns(self) -> frozenset[str]:
        return frozenset({self.column})

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        expected = parse_number(str(columns[self.column]))
        numbers = NUMBER.findall(completion)
        if expected is None or not numbers:
            return 0.0
        got = parse_number(numbers[-1])
        return float(got is not None and abs(got - expected) <= self.tolerance)


class ExactMatch(Scorer):
    """1 when the completion, stripped of surrounding white space, is the record's answer."""
    description: ClassVar[str] = "the completion is exactly the answer column (white space around it ignored)"
    name: Literal["exact_match"] = Field(title="Scorer", description="`exact_match`: picks this scorer")
    column: str = Field("answer", title="Answer column", min_length=1, description="the column holding the expected text")
    case_sensitive: bool = Field(True, title="Case sensitive", description="whether upper and lower case must agree")

    @property
    def columns(self) -> frozenset[str]:
        return frozenset({self.column})

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        got, expected = completion.strip(), str(columns[self.column]).strip()
        if not self.case_sensitive:
            got, expected = got.casefold(), expected.casefold()
        return float(got == expected)


class RegexMatch(Scorer):
    """1 when the pattern is found in the completion (Python regular-expression syntax),
    e.g. `<answer>.*?</answer>` for an output format; a pattern that runs past
    PATTERN_SECONDS on a completion scores it 0."""
    description: ClassVar[str] = "the completion matches a regular expression (e.g. an output format)"
    name: Literal["regex_match"] = Field(title="Scorer", description="`regex_match`: picks this scorer")
    pattern: str = Field(title="Pattern", min_length=1, description="the regular expression searched for")
    full_match: bool = Field(False, title="Whole completion", description="the whole completion must match, not a part of it")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            regex.compile(pattern)
        except regex.error as error:
            raise ValueError(f"not a regular expression: {error}") from None
        return pattern

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        search = regex.fullmatch if self.full_match else regex.search
        try:
            return float(search(self.pattern, completion, flags=regex.DOTALL,
                                timeout=PATTERN_SECONDS) is not None)
        except TimeoutError:
            return 0.0


class Contains(Scorer):
    """1 when the completion contains the text."""
    description: ClassVar[str] = "the completion contains a given text"
    name: Literal["contains"] = Field(title="Scorer", description="`contains`: picks this scorer")
    text: str = Field(title="Text", min_length=1, description="the text looked for")
    case_sensitive: bool = Field(False, title="Case sensitive", description="whether upper and lower case must agree")

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        if self.case_sensitive:
            return float(self.text in completion)
        return float(self.text.casefold() in completion.casefold())


class Length(Scorer):
    """A soft penalty on long completions: 0 up to `target` characters, then falling
    linearly to -1 at twice `target` (and staying there), so a model is nudged to be
    brief without a cliff at the limit."""
    description: ClassVar[str] = "0 up to a target length in characters, falling to -1 at twice it"
    name: Literal["length"] = Field(title="Scorer", description="`length`: picks this scorer")
    target: int = Field(title="Target length", ge=1, description="completion length in characters from which the penalty starts")

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        over = max(0, len(completion.strip()) - self.target)
        return -min(1.0, over / self.target)


SCORERS: tuple[type[Scorer], ...] = (NumericMatch, ExactMatch, RegexMatch, Contains, Length)
# What a job spec's `rewards` list holds: one of the scorers, picked by its `name`.
Reward = Annotated[Union[NumericMatch, ExactMatch, RegexMatch, Contains, Length],
                   Field(discriminator="name")]
SCORER_NAMES = tuple(scorer.model_fields["name"].annotation.__args__[0] for scorer in SCORERS)


def parse_number(text: str) -> float | None:
    """A number as people write one ("1,234", "-0.5", "3e2", "42."), or None."""
    cleaned = text.strip().replace(",", "").rstrip(".")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def total_rewards(rewards: list[Scorer], prompts: list[str], completions: list[str],
                  columns: Mapping[str, list[Any]]) -> tuple[list[float], dict[str, list[float]]]:
    """Each completion's weighted sum, and each reward's own scores (unweighted) by name, for
    the step's figures. `columns` holds each column's values, one a completion."""
    each: dict[str, list[float]] = {}
    totals = [0.0] * len(completions)
    for reward in rewards:
        scores = [reward.score(prompt, completion, {name: values[index] for name, values in columns.items()})
                  for index, (prompt, completion) in enumerate(zip(prompts, completions))]
        each[reward_label(reward, rewards)] = scores
        totals = [total + reward.weight * score for total, score in zip(totals, scores)]
    return totals, each


def reward_label(reward: Scorer, rewards: list[Scorer]) -> str:
    """The reward's name, numbered when the list holds the same scorer twice
    ("regex_match", "regex_match_2")."""
    same = [other for other in rewards if other.name == reward.name]
    position = next(index for index, other in enumerate(same) if other is reward)
    return reward.name if position == 0 else f"{reward.name}_{position + 1}"
