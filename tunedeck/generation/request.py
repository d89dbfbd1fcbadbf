"""A generation request: what `POST /api/jobs/{id}/generate`, `tunedeck generate` and the job
page's "Try it" panel send. Any other key is an error, and a message without text is refused
here, naming `messages`; the cap on `max_new_tokens` is a setting, so the action checks it.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from tunedeck.spec.sections import StrictModel, _no_nul

# Which weights answer: the merged folder, the base with the adapter on top, or the base the
# job started from (what the fine-tune changed is the difference between the two).
Variant = Literal["merged", "adapter", "base"]
VARIANTS: tuple[Variant, ...] = ("merged", "adapter", "base")
MAX_MESSAGE_CHARS = 20_000
MAX_MESSAGES = 64


class Message(StrictModel):
    role: Literal["system", "user", "assistant"] = "user"
    content: str = Field(max_length=MAX_MESSAGE_CHARS)

    @field_validator("content")
    @classmethod
    def _has_text(cls, content: str) -> str:
        if not content.strip():
            raise ValueError("an empty message: write a prompt")
        return _no_nul(content)


class GenerationRequest(StrictModel):
    """The conversation so far (rendered with the model's chat template, as the trainer
    rendered its prompts) and how to sample the answer; temperature 0 is greedy decoding,
    so the same prompt gives the same text."""

    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    variant: Variant = "merged"
    # Sampling (temperature above 0) from this seed gives the same text each time; without
    # one, each request samples afresh.
    seed: int | None = Field(None, ge=0, le=2**32 - 1)

    @field_validator("messages")
    @classmethod
    def _ends_with_the_user(cls, messages: list[Message]) -> list[Message]:
        if messages[-1].role != "user":
            raise ValueError("the last message must be the user's (the model answers it)")
        return messages

    @classmethod
    def of_prompt(cls, prompt: str, **sampling: Any) -> "GenerationRequest":
        """One user message: what the CLI and the "Try it" box send."""
        return cls.model_validate({"messages": [{"role": "user", "content": prompt}], **sampling})
