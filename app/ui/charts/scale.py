"""Data values to positions along a chart's axis, and the ticks each axis labels: "nice"
steps (1, 2, 2.5 or 5 times a power of ten) on a linear axis, 1, 2, 5 of each decade on a
log one."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    """Data values to a 0..1 position along an axis, with the ticks it labels."""
    low: float
    high: float
    ticks: tuple[float, ...]
    tick_step: float  # between a linear scale's ticks, for their format
    logarithmic: bool = False

    @staticmethod
    def linear(low: float, high: float, *, pad: bool = True, count: int = 5,
               whole: bool = False) -> Scale:
        # One value (or one up to float rounding, as an EMA of a constant is): a window
        # around it, not its rounding noise magnified to the plot's height.
        if high - low <= max(abs(low), abs(high)) * 1e-9:
            spread = abs(low) * 0.1 or 1.0
            low, high = low - spread, high + spread
        elif pad:  # a line along the top or bottom edge is hard to read
            margin = (high - low) * 0.05
            low, high = low - margin, high + margin
        step = max(nice_step((high - low) / count), 1.0) if whole else \
            nice_step((high - low) / count)
        first = math.ceil(low / step - 1e-9)
        ticks = tuple(round(k * step, 12) for k in range(first, math.floor(high / step + 1e-9) + 1))
        return Scale(low, high, ticks, step)

    @staticmethod
    def log(low: float, high: float) -> Scale:
        low_exponent, high_exponent = math.log10(low), math.log10(high)
        if high_exponent - low_exponent < 1e-9:
            low_exponent, high_exponent = low_exponent - 0.1, high_exponent + 0.1
        margin = (high_exponent - low_exponent) * 0.05
        low_exponent, high_exponent = low_exponent - margin, high_exponent + margin
        decades = range(math.floor(low_exponent), math.ceil(high_exponent) + 1)
        ticks: list[float] = []
        for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
            ticks = [m * 10.0 ** d for d in decades for m in mantissas
                     if low_exponent <= math.log10(m * 10.0 ** d) <= high_exponent]
            if len(ticks) >= 3:
                break
        # Log ticks are labelled each by its own digits (tick_labels), not by a step.
        return Scale(10.0 ** low_exponent, 10.0 ** high_exponent, tuple(ticks), 1.0,
                     logarithmic=True)

    def position(self, value: float) -> float:
        if self.logarithmic:
            low, high, value = math.log10(self.low), math.log10(self.high), math.log10(value)
        else:
            low, high = self.low, self.high
        return (value - low) / (high - low)


def nice_step(rough: float) -> float:
    """1, 2, 2.5 or 5 times a power of ten, the nearest at or above `rough`."""
    power = 10.0 ** math.floor(math.log10(rough))
    for mantissa in (1, 2, 2.5, 5, 10):
        if mantissa * power >= rough * (1 - 1e-9):
            return mantissa * power
    return 10 * power


def tick_labels(scale: Scale) -> list[str]:
    """A linear axis's labels with the decimals its step needs, thousands grouped; a log
    axis's each with its own digits; an axis of tiny or huge numbers all in scientific
    notation (1.5e-4), so one axis never mixes the two."""
    largest = max((abs(tick) for tick in scale.ticks), default=0.0)
    if largest and (largest < 1e-3 or largest >= 1e9):
        return [_scientific(tick) for tick in scale.ticks]
    if scale.logarithmic:
        return [f"{tick:,g}" for tick in scale.ticks]
    step = scale.tick_step  # 1, 2, 2.5 or 5 x 10^k: 2.5 needs a decimal more than 10^k
    decimals = 0 if step >= 1 else -math.floor(math.log10(step) + 1e-9) + (
        1 if round(step / 10 ** math.floor(math.log10(step) + 1e-9), 6) == 2.5 else 0)
    return [f"{tick:,.{decimals}f}" if tick else "0" for tick in scale.ticks]


def _scientific(value: float) -> str:
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)) + 1e-9)
    return f"{value / 10 ** exponent:.3g}e{exponent}"
