"""Server-side downsampling of chart series, so a 100,000-point job ships a few thousand.

Min/max per bucket: the points are cut into equal buckets in order, and each bucket keeps
the points holding the smallest and the largest value of every charted figure. A spike (a
loss blow-up, a memory peak) therefore always survives, which evenly spaced thinning
loses. The first and the last point are always kept: the chart starts where the job
started and ends at the newest point. Pure functions; no I/O.

The core works on columns (one list of numbers or None a figure), so a store can hand it
figures straight from SQL without building a dict a point; the buckets' extremes are
whole-array numpy reductions, not a Python loop a point.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

DEFAULT_MAX_POINTS = 2000

Column = Sequence[Any]


def figure_array(columns: Sequence[Column], count: int) -> np.ndarray:
    """The columns as one float array, a row a figure, with NaN for a missing value (None,
    NaN, an infinity, anything not a number)."""
    if not columns:
        return np.empty((0, count))
    try:
        # One C pass: a store's columns come out of SQL as floats and None already.
        figures = np.array(columns, dtype=float).reshape(len(columns), count)
    except (TypeError, ValueError):
        figures = np.array([[value if value.__class__ in (float, int) else math.nan
                             for value in column] for column in columns],
                           dtype=float).reshape(len(columns), count)
    figures[~np.isfinite(figures)] = math.nan
    return figures


def keep_positions(figures: np.ndarray, max_points: int) -> np.ndarray:
    """The sorted positions to keep of a line given as `figure_array` (a row a figure):
    at most `max_points`."""
    count = figures.shape[1]
    if count <= max_points:
        return np.arange(count)
    if max_points < 3:
        return np.array([0, count - 1][:max(0, max_points)] if count > 1 else [0], dtype=int)
    # Each bucket keeps up to two points a figure; the first and last points come on top.
    buckets = max(1, (max_points - 2) // (2 * max(1, len(figures))))
    kept = _bucket_extremes(figures, buckets)
    if len(kept) < max_points // 2:
        # Flat figures (a constant learning rate) share their points: one finer pass,
        # taken only if it stays within the limit.
        finer = _bucket_extremes(figures, buckets * (max_points - 2) // len(kept))
        kept = finer if len(finer) <= max_points else kept
    return kept


def _bucket_extremes(figures: np.ndarray, buckets: int) -> np.ndarray:
    """The first and last positions, and in each of `buckets` equal runs of the points
    between them the first point holding each figure's minimum and maximum (a run with
    no value at all keeps its first point, to mark where the line runs)."""
    count = figures.shape[1]
    inner = count - 2
    buckets = max(1, min(buckets, inner))
    # Offsets into the inner points (1 .. count - 2) where each bucket starts; every bucket
    # holds at least one point since buckets <= inner. Whole-array reductions in C: this
    # is the hot path of a 10^5-point page.
    offsets = np.arange(buckets) * inner // buckets
    sizes = np.diff(offsets, append=inner)
    positions = np.arange(inner)
    kept = [np.array([0, count - 1]), ]
    found = np.zeros(buckets, dtype=bool)
    for figure in figures[:, 1:count - 1]:
        for extreme in (np.fmin.reduceat(figure, offsets), np.fmax.reduceat(figure, offsets)):
            # fmin/fmax skip NaN; a bucket's extreme is NaN only when it has no value.
            holders = np.where(figure == np.repeat(extreme, sizes), positions, inner)
            first = np.minimum.reduceat(holders, offsets)
            kept.append(first[first < inner] + 1)
        found |= ~np.isnan(extreme)
    kept.append(offsets[~found] + 1)
    return np.unique(np.concatenate(kept))


def downsample_tuples(rows: Sequence[Sequence[Any]], *, group_width: int,
                      max_points: int) -> list[Any]:
    """For rows `(id, *group key, *figures)` in chart order (as a store selects them): the
    ids to keep, each group (a rank, a GPU) downsampled on its own, in the rows' order."""
    if not rows:
        return []
    columns = list(zip(*rows))  # transposed in C, not a Python loop a point
    ids, keys = columns[0], columns[1:1 + group_width]
    figures = figure_array(columns[1 + group_width:], len(rows))
    return [ids[position] for position in _keep_line_positions(keys, figures, max_points)]


def _keep_line_positions(keys: Sequence[Sequence[Any]], figures: np.ndarray,
                         max_points: int) -> np.ndarray:
    kept = [line[keep_positions(figures[:, line], max_points)]
            for line in _line_positions(keys, figures.shape[1])]
    return np.sort(np.concatenate(kept))


def _line_positions(keys: Sequence[Sequence[Any]], count: int) -> list[np.ndarray]:
    """The positions of each line's rows (rows sharing every key column), each ascending."""
    code = np.zeros(count, dtype=np.int64)
    for key in keys:
        _values, inverse = np.unique(np.asarray(key), return_inverse=True)  # ints, or str
        code = code * (int(inverse.max()) + 1) + inverse
    order = np.argsort(code, kind="stable")
    _codes, starts = np.unique(code[order], return_index=True)
    return np.split(order, starts[1:])
