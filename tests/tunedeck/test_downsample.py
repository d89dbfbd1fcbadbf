"""Min/max-per-bucket downsampling keeps the ends and the extremes, and stays within bounds."""
import math

from tunedeck.downsample import downsample_groups, downsample_rows


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


def test_each_group_is_downsampled_on_its_own():
    rows = [{"rank": step % 2, "mb": float(step)} for step in range(10_000)]
    kept = downsample_groups(rows, 100, ["mb"], group_of=lambda row: row["rank"])
    by_rank = {rank: [row for row in kept if row["rank"] == rank] for rank in (0, 1)}
    assert all(len(line) <= 100 for line in by_rank.values())
    assert by_rank[0][-1]["mb"] == 9998.0 and by_rank[1][-1]["mb"] == 9999.0
