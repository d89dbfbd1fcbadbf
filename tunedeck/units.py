"""Byte units, and sizes and counts as people read them (the plan's table and its reasons).

The one definition of each unit: decimal ones (MB, GB: what the planner and the pages
print) and binary ones (MIB: what the CUDA allocator, psutil and NVML readings are divided
by; their fields are still called `*_mb`). Pure: the trainer imports it.
"""
from __future__ import annotations

import math

MB = 10**6  # bytes in a megabyte
GB = 10**9  # bytes in a gigabyte
MIB = 2**20  # bytes in a mebibyte
GIB = 2**30  # bytes in a gibibyte
FP32_BYTES = 4  # bytes of one fp32 element


def compute_bytes(precision: str) -> int:
    """Bytes of one element computed in `precision` (fp32; else bf16 or fp16)."""
    return FP32_BYTES if precision == "fp32" else 2


def format_size(gb: float) -> str:
    """A figure given in GB (10^9 bytes) with three significant digits and its unit: "208 GB",
    "59.9 GB", "1.88 GB"; under 1 GB in MB ("340 MB", "3.20 MB")."""
    if gb <= 0:
        return "0"
    value, unit = (gb, "GB") if gb >= 1 else (gb * (GB // MB), "MB")
    if value < 0.01:
        return f"<0.01 {unit}"
    value = float(f"{value:.3g}")  # round first: 99.96 is "100", not "100.0"
    digits = max(0, 2 - math.floor(math.log10(value)))
    return f"{value:,.{digits}f} {unit}"


def format_count(count: int) -> str:
    """A parameter count as people say it: 13.0B, 6.74M, 301K."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.3g}{suffix}"
    return str(count)


def format_seconds(seconds: float) -> str:
    """A short duration with three significant digits in the unit that reads best: "1.45 s",
    "12.3 ms", "1.45 µs" (not "1.45e-06 s")."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= scale:
            return f"{float(f'{seconds / scale:.3g}'):g} {unit}"
    return f"{float(f'{seconds * 1e9:.3g}'):g} ns" if seconds > 0 else "0 s"
