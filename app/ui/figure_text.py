"""Figures as the pages print them: steps of a total, numbers to a pattern, times, the
first line of a long message. Empty where there is no figure, so a cell stays blank."""
from __future__ import annotations

from datetime import datetime

PREVIEW_CHARS = 160


def step_progress(step: int | None, max_steps: int | None) -> str:
    done = "0" if step is None else str(step)
    return f"{done} / {max_steps}" if max_steps else done


def format_number(value: float | None, pattern: str) -> str:
    return pattern.format(value) if isinstance(value, (int, float)) else ""


def format_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""


def first_line(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    lines = (text or "").strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"
