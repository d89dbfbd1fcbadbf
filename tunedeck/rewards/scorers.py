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

    def score_all(self, prompts: list[str], completions: list[str],
                  columns: Mapping[str, list[Any]]) -> list[float]:
        """Each completion's score (`columns`: each column's values, one a completion); a
        scorer that is cheaper in batches (a model, the user's function) takes them whole."""
        return [self.score(prompt, completion, {name: values[index]
                                                for name, values in columns.items()})
                for index, (prompt, completion) in enumerate(zip(prompts, completions))]


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


class PythonReward(Scorer):
    """Your own function, `def reward(prompts, completions, **columns) -> list[float]`, in a
    .py file under the allowed folders: called with the step's prompts, completions and the
    columns it reads (a list each, one value a completion). It runs your code on the worker,
    so it is off unless an administrator turns Python rewards on (TUNEDECK_PYTHON_REWARDS=1
    on the web and the workers); otherwise a spec naming one is refused."""
    description: ClassVar[str] = ("your own function in a .py file, def reward(prompts, "
                                  "completions, **columns) -> list[float] (an administrator "
                                  "turns these on)")
    name: Literal["python"] = Field(title="Scorer", description="`python`: picks this scorer")
    path: str = Field(title="File", min_length=1, max_length=1000, pattern=r"\.py$",
                      description="absolute path of the .py file, under the allowed folders")
    function: str = Field("reward", title="Function", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$",
                          description="the function's name in the file")
    reads: list[str] = Field(default_factory=list, max_length=32, title="Columns it reads",
                             description="dataset columns passed to the function by name")

    @field_validator("reads")
    @classmethod
    def _not_the_functions_own_arguments(cls, reads: list[str]) -> list[str]:
        taken = sorted({"prompts", "completions"} & set(reads))
        if taken:
            raise ValueError(f"{', '.join(taken)}: the function gets these itself; name only "
                             "dataset columns")
        return reads

    @property
    def columns(self) -> frozenset[str]:
        return frozenset(self.reads)

    def score_all(self, prompts: list[str], completions: list[str],
                  columns: Mapping[str, list[Any]]) -> list[float]:
        function = _user_function(self.path, self.function)
        values = function(prompts=list(prompts), completions=list(completions),
                          **{name: list(columns[name]) for name in self.reads})
        where = f"python reward {self.path}:{self.function}"
        if not isinstance(values, (list, tuple)) or len(values) != len(completions):
            raise ValueError(f"{where} returned {type(values).__name__} "
                             f"{_length(values)}; expected a list of {len(completions)} numbers, "
                             "one a completion")
        scores = []
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ValueError(f"{where} returned {value!r} for a completion; expected a "
                                 "finite number")
            scores.append(float(value))
        return scores

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        return self.score_all([prompt], [completion], {name: [value]
                                                       for name, value in columns.items()})[0]


class RewardModel(Scorer):
    """A reward model: a local sequence-classification folder (one output) scores the prompt
    and the completion, rendered as a chat when its tokenizer has a template. It runs on each
    rank's own device, loaded once a process, in batches."""
    description: ClassVar[str] = ("a local reward model (a sequence-classification folder with "
                                  "one output) scores the prompt and completion")
    name: Literal["reward_model"] = Field(title="Scorer",
                                          description="`reward_model`: picks this scorer")
    path: str = Field(title="Model folder", min_length=1, max_length=1000,
                      description="absolute path of the folder, under the allowed folders")
    batch_size: int = Field(8, ge=1, le=512, title="Batch size",
                            description="completions scored in one forward")

    def score_all(self, prompts: list[str], completions: list[str],
                  columns: Mapping[str, list[Any]]) -> list[float]:
        import torch

        model, tokenizer = _reward_model(self.path)
        texts = [_reward_text(tokenizer, prompt, completion)
                 for prompt, completion in zip(prompts, completions)]
        # A chat template writes the special tokens itself (BOS would be there twice).
        templated = bool(getattr(tokenizer, "chat_template", None))
        scores: list[float] = []
        device = next(model.parameters()).device
        for start in range(0, len(texts), self.batch_size):
            batch = tokenizer(texts[start:start + self.batch_size], return_tensors="pt",
                              padding=True, truncation=True,
                              add_special_tokens=not templated).to(device)
            with torch.no_grad():
                logits = model(**batch).logits
            scores += logits[:, 0].float().tolist()
        return scores

    def score(self, prompt: str, completion: str, columns: Mapping[str, Any]) -> float:
        return self.score_all([prompt], [completion], {})[0]


# The scorers that run the user's code or read a path: refused or checked by name.
USER_CODE_SCORERS = ("python",)
PATH_SCORERS = ("python", "reward_model")
PYTHON_REWARDS_SETTING = "TUNEDECK_PYTHON_REWARDS"


def python_reward_problems(rewards: list[Scorer], *, allowed: bool) -> list[tuple[str, str]]:
    """("grpo.rewards[i]", why) for each reward that would run the user's code where an
    administrator has not turned Python rewards on."""
    if allowed:
        return []
    return [(f"grpo.rewards[{index}]",
             f"grpo.rewards[{index}] ({reward.name} {getattr(reward, 'path', '')}): a Python "
             "reward runs your code on the worker, and Python rewards are off here; an "
             f"administrator turns them on with {PYTHON_REWARDS_SETTING}=1 on the web and "
             "the workers")
            for index, reward in enumerate(rewards) if reward.name in USER_CODE_SCORERS]


def reward_paths(rewards: list[Scorer]) -> list[tuple[str, str]]:
    """("grpo.rewards[i].path", path) of each reward that reads a local file or folder."""
    return [(f"grpo.rewards[{index}].path", reward.path) for index, reward in enumerate(rewards)
            if reward.name in PATH_SCORERS]

SCORERS: tuple[type[Scorer], ...] = (NumericMatch, ExactMatch, RegexMatch, Contains, Length,
                                     PythonReward, RewardModel)
# What a job spec's `rewards` list holds: one of the scorers, picked by its `name`.
Reward = Annotated[Union[NumericMatch, ExactMatch, RegexMatch, Contains, Length, PythonReward,
                         RewardModel], Field(discriminator="name")]
SCORER_NAMES = tuple(scorer.model_fields["name"].annotation.__args__[0] for scorer in SCORERS)


_LOADED: dict[tuple, Any] = {}  # what a process loaded once: user functions, reward models


def _user_function(path: str, name: str):
    """The function `name` of the file at `path`, imported once a process (and again when
    the file changes)."""
    import importlib.util
    import os

    key = ("python", path, name, os.stat(path).st_mtime_ns)
    if key not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"tunedeck_reward_{len(_LOADED)}", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"python reward {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        function = getattr(module, name, None)
        if not callable(function):
            raise ValueError(f"python reward {path}: no function {name!r} in it")
        _LOADED[key] = function
    return _LOADED[key]


def _reward_model(path: str):
    """(model, tokenizer) of a sequence-classification folder, once a process, in eval mode
    on this process's GPU when it has one."""
    key = ("reward_model", path)
    if key not in _LOADED:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForSequenceClassification.from_pretrained(path)
        model.config.pad_token_id = tokenizer.pad_token_id
        device = torch.device("cuda", torch.cuda.current_device()) \
            if torch.cuda.is_available() else torch.device("cpu")
        _LOADED[key] = (model.to(device).eval(), tokenizer)
    return _LOADED[key]


def _reward_text(tokenizer, prompt: str, completion: str) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}],
            tokenize=False)
    return f"{prompt}\n{completion}"


def _length(values: Any) -> str:
    return f"of {len(values)}" if hasattr(values, "__len__") else ""


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
        scores = reward.score_all(prompts, completions, columns)
        each[reward_label(reward, rewards)] = scores
        totals = [total + reward.weight * score for total, score in zip(totals, scores)]
    return totals, each


def reward_label(reward: Scorer, rewards: list[Scorer]) -> str:
    """The reward's name, numbered when the list holds the same scorer twice
    ("regex_match", "regex_match_2")."""
    same = [other for other in rewards if other.name == reward.name]
    position = next(index for index, other in enumerate(same) if other is reward)
    return reward.name if position == 0 else f"{reward.name}_{position + 1}"
