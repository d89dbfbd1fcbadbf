"""A generation's answer in words, as `tunedeck generate` and the job page's "Try it" say it.
Pure: numbers in, text out."""
from __future__ import annotations


def short_seconds(seconds: float) -> str:
    """"1.24 s"; under a second in milliseconds with three significant digits ("3.41 ms",
    "253 ms"), where "0.00 s" would say nothing (a tiny model answers in a few ms)."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.3g} ms"


def speed_text(tokens: int, seconds: float) -> str:
    """"12 tokens in 3.41 ms (3,519 tokens/s)": the generation alone, not the model's load."""
    rate = f" ({tokens / seconds:,.0f} tokens/s)" if seconds > 0 and tokens else ""
    return f"{tokens} tokens in {short_seconds(seconds)}{rate}"
