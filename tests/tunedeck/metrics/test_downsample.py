"""Min/max-per-bucket downsampling keeps the ends and the extremes, and stays within bounds."""
import math
import random

from tunedeck.metrics.downsample import downsample_tuples, figure_array, keep_positions


def keep_indices(columns, count, max_points):
    """The sorted indices (of `count` points) to keep, the columns given as lists."""
    return keep_positions(figure_array(columns, count), max_points).tolist()


def downsample_rows(rows, max_points, value_keys):
    """At most `max_points` of `rows` (dicts, in their order), kept by the extremes of every
    key in `value_keys`: how a chart's rows would be thinned by the product's buckets."""
    columns = [[row.get(key) for row in rows] for key in value_keys]
    return [rows[index] for index in keep_indices(columns, len(rows), max_points)]


def _rows(count, spike_at=None):
    rows = [{"step": step, "loss": math.sin(step / 50)} for step in range(count)]
    if spike_at is not None:
        rows[spike_at]["loss"] = 99.0
    return rows


def test_short_series_come_back_whole():
    rows = _rows(10)
    assert downsample_rows(rows, 2000, ["loss"]) == rows


def test_long_series_are_cut_to_at_most_max_points_keeping_ends_and_spike():
    rows = _rows(100_000, spike_at=54_321)
    kept = downsample_rows(rows, 2000, ["loss"])
    assert len(kept) <= 2000
    assert len(kept) > 1500
    assert kept[0] is rows[0] and kept[-1] is rows[-1]
    assert any(row["loss"] == 99.0 for row in kept)
    assert [row["step"] for row in kept] == sorted(row["step"] for row in kept)


def test_extremes_of_every_key_are_kept():
    rows = [{"a": 0.0, "b": 0.0} for _ in range(1000)]
    rows[100]["a"] = -5.0
    rows[700]["b"] = 7.0
    kept = downsample_rows(rows, 50, ["a", "b"])
    assert len(kept) <= 50
    assert rows[100] in kept and rows[700] in kept


def test_missing_values_are_skipped_not_compared():
    rows = [{"x": None} if step % 2 else {"x": float(step)} for step in range(500)]
    kept = downsample_rows(rows, 40, ["x"])
    assert len(kept) <= 40 and kept[0] is rows[0] and kept[-1] is rows[-1]


def test_tiny_limits():
    rows = _rows(100)
    assert downsample_rows(rows, 0, ["loss"]) == []
    assert downsample_rows(rows, 1, ["loss"]) == [rows[0]]
    assert downsample_rows(rows, 2, ["loss"]) == [rows[0], rows[-1]]


def _loop_keep_indices(columns, count, max_points):
    """The plain per-bucket loop the numpy reductions replaced: first holder of each bucket's
    min and max, None/NaN skipped, an all-empty bucket keeps its first point."""
    def extremes(buckets):
        kept, inner = {0, count - 1}, count - 2
        buckets = max(1, min(buckets, inner))
        for bucket in range(buckets):
            start, stop = 1 + bucket * inner // buckets, 1 + (bucket + 1) * inner // buckets
            found = False
            for column in columns:
                values = [(value, index) for index, value in enumerate(column[start:stop], start)
                          if value is not None and value == value]
                if values:
                    found = True
                    kept.add(min(values)[1])
                    kept.add(min(values, key=lambda pair: (-pair[0], pair[1]))[1])
            if not found:
                kept.add(start)
        return kept
    buckets = max(1, (max_points - 2) // (2 * max(1, len(columns))))
    kept = extremes(buckets)
    if len(kept) < max_points // 2:
        finer = extremes(buckets * (max_points - 2) // len(kept))
        kept = finer if len(finer) <= max_points else kept
    return sorted(kept)


def test_the_vectorised_buckets_keep_what_a_plain_loop_keeps():
    generator = random.Random(5)
    for count, max_points in ((5000, 300), (1234, 100), (999, 50), (20_000, 2000)):
        columns = [
            [generator.choice([None, float("nan"), 1.0, 2.0, generator.random()]) for _ in range(count)],
            [3.0] * count,  # flat: shares its points, so the finer pass runs
            [generator.randint(0, 5) for _ in range(count)],  # ties: the first holder is kept
            [None] * (count // 2) + [generator.gauss(0, 1) for _ in range(count - count // 2)],
        ]
        assert keep_indices(columns, count, max_points) == _loop_keep_indices(columns, count, max_points)


def test_lines_keyed_by_several_columns_are_downsampled_apart():
    rows = [(step * 4 + line, "a" if line < 2 else "b", line % 2, float(step % 7))
            for step in range(1000) for line in range(4)]
    kept = downsample_tuples(rows, group_width=2, max_points=20)
    assert kept == sorted(kept)
    for line in range(4):
        mine = [point_id for point_id in kept if point_id % 4 == line]
        assert 2 < len(mine) <= 20 and mine[0] == line and mine[-1] == 999 * 4 + line
