"""Server-side downsampling of chart series, so a 100,000-point job ships a few thousand.

Min/max per bucket: the points are cut into equal buckets in order, and each bucket keeps
the points holding the smallest and the largest value of every charted figure. A spike (a
loss blow-up, a memory peak) therefore always survives, which evenly spaced thinning
loses. The first and the last point are always kept: the chart starts where the job
started and ends at the newest point. Pure functions; no I/O.

The core works on columns (one list of numbers or None a figure), so a store can hand it
figures straight from SQL without building a dict a point.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Iterable, Sequence

DEFAULT_MAX_POINTS = 2000

Row = dict[str, Any]
Column = Sequence[Any]


def keep_indices(columns: Sequence[Column], count: int, max_points: int) -> list[int]:
    """The sorted indices (of `count` points) to keep: at most `max_points`."""
    if count <= max_points:
        return list(range(count))
    if max_points < 3:
        return [0, count - 1][:max(0, max_points)] if count > 1 else [0]
    lowest_first = [_numbers_or(column, math.inf) for column in columns]
    highest_first = [_numbers_or(column, -math.inf) for column in columns]
    # Each bucket keeps up to two points a figure; the first and last points come on top.
    buckets = max(1, (max_points - 2) // (2 * max(1, len(columns))))
    kept = _bucket_extremes(lowest_first, highest_first, count, buckets)
    if len(kept) < max_points // 2:
        # Flat figures (a constant learning rate) share their points: one finer pass,
        # taken only if it stays within the limit.
        finer = _bucket_extremes(lowest_first, highest_first, count,
                                 buckets * (max_points - 2) // len(kept))
        kept = finer if len(finer) <= max_points else kept
    return sorted(kept)


def downsample_rows(rows: Sequence[Row], max_points: int, value_keys: Iterable[str]) -> list[Row]:
    """At most `max_points` of `rows` (in their order), keeping the first, the last and
    each bucket's extremes of every key in `value_keys` (None values are skipped)."""
    columns = [[row.get(key) for row in rows] for key in value_keys]
    return [rows[index] for index in keep_indices(columns, len(rows), max_points)]


def downsample_groups(rows: Sequence[Row], max_points: int, value_keys: Iterable[str],
                      group_of: Callable[[Row], Hashable]) -> list[Row]:
    """Downsample each line (rows sharing `group_of(row)`: a rank, a GPU) on its own, each
    to at most `max_points`; the rows kept stay in their original order."""
    keys = tuple(value_keys)
    groups: dict[Hashable, list[Row]] = {}
    for row in rows:
        groups.setdefault(group_of(row), []).append(row)
    kept = {id(row) for group in groups.values() for row in downsample_rows(group, max_points, keys)}
    return [row for row in rows if id(row) in kept]


def _bucket_extremes(lowest_first: list[list[float]], highest_first: list[list[float]],
                     count: int, buckets: int) -> set[int]:
    kept = {0, count - 1}
    inner = count - 2
    buckets = max(1, min(buckets, inner))
    for bucket in range(buckets):
        start = 1 + bucket * inner // buckets
        stop = 1 + (bucket + 1) * inner // buckets
        if start >= stop:
            continue
        found = False
        for low_column, high_column in zip(lowest_first, highest_first):
            # min/max and index run in C: this loop is the hot path of a 10^5-point page.
            low_segment, high_segment = low_column[start:stop], high_column[start:stop]
            low, high = min(low_segment), max(high_segment)
            if low != math.inf:
                kept.add(start + low_segment.index(low))
                found = True
            if high != -math.inf:
                kept.add(start + high_segment.index(high))
        if not found:
            kept.add(start)  # a bucket of empty values still marks where the line runs
    return kept


def _numbers_or(column: Column, missing: float) -> list[float]:
    """The column with `missing` for None, NaN and anything not a number (one comprehension:
    this runs over every point of a 10^5-point series)."""
    return [value if (value.__class__ is float or value.__class__ is int) and value == value
            else missing for value in column]


def downsample_tuples(rows: Sequence[Sequence[Any]], *, group_width: int,
                      max_points: int) -> list[Any]:
    """For rows `(id, *group key, *figures)` in chart order (as a store selects them): the
    ids to keep, each group (a rank, a GPU) downsampled on its own, in the rows' order."""
    groups: dict[tuple, list[Sequence[Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[1:1 + group_width]), []).append(row)
    kept: set[Any] = set()
    for group in groups.values():
        figures = range(1 + group_width, len(group[0]))
        columns = [[row[position] for row in group] for position in figures]
        kept.update(group[index][0] for index in keep_indices(columns, len(group), max_points))
    return [row[0] for row in rows if row[0] in kept]
