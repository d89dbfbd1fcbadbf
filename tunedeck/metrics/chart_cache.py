"""The charted figures of each job's lines, held in memory between requests, so a page that
polls a 100,000-step job reads only the rows added since its last poll.

Metric points are only ever inserted (a conflicting line is skipped, never updated), so a
line's rows seen once stay valid: a request reads the rows above the highest id it holds.
On PostgreSQL ids come from a sequence at insert, so two writers of one job's points (the
nodes of a job on several nodes) can commit a smaller id after a larger one: for such a job
each request also checks the lines' row count, and a count that does not add up reloads the
line set whole. A job on one node has one writer (its worker's supervision loop, one
transaction after another), so its ids become visible in order; its count is checked only
every VERIFY_SECONDS, to bound what an unforeseen second writer (a worker cut off, then
back) could hide. SQLite needs no count: one writer at a time holds the lock from insert to
commit.

Each line (a rank's rows) is one float array, a row a point: `(id, rank, *order keys,
*figures)`, sorted by the order keys then id, NaN for null. The answer rows built from the
points kept are held too, by id, so a finished job's page builds no row twice.
"""
from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
from prometheus_client import Counter
from sqlalchemy import Engine, Select, func, select
from sqlalchemy.orm import Session

# What the cache may hold, all jobs together: a 100,000-step job's train and memory lines
# are about 2 million floats (16 MB).
CACHED_FLOATS = 16_000_000
# Answer rows kept by id for a line set; a running job's kept points drift, so past this
# the rows no longer kept are dropped. A row (a dict of ~10 fields) counts as 64 floats.
CACHED_ROWS_PER_LINE_SET = 20_000
FLOATS_A_ROW = 64
# How often a single-writer line set's row count is checked anyway (see above).
VERIFY_SECONDS = 60.0

# Unregistered: the web's /metrics registry takes it (app/monitoring/endpoint.py).
# hit: the held lines served, with only the rows added since read; miss: nothing held
# (first read, or dropped for room); reload: held rows did not add up, read whole again.
CHART_CACHE_COLLECTOR = Counter(
    "tunedeck_chart_cache_reads", "chart line-set reads by what the cache held",
    ["result"], registry=None)
for _result in ("hit", "miss", "reload"):
    CHART_CACHE_COLLECTOR.labels(_result)


@dataclass(frozen=True)
class LineSet:
    """One series of a job as of some point: its lines by rank, and what they were read up to."""

    lines: dict[int, np.ndarray]
    count: int
    max_id: int
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    # When its count was last found to add up (time.monotonic()).
    verified_at: float = field(default_factory=time.monotonic)

    @property
    def floats(self) -> int:
        return sum(line.size for line in self.lines.values()) + FLOATS_A_ROW * len(self.rows)


class ChartCache:
    """Line sets by (job, series), least recently read dropped first; safe across threads
    (an entry's lines are never changed, only replaced; its answer rows, all final, are
    only added or dropped)."""

    def __init__(self, max_floats: int = CACHED_FLOATS):
        self.max_floats = max_floats
        self._entries: OrderedDict[tuple, LineSet] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> LineSet | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: tuple, entry: LineSet) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            total = sum(held.floats for held in self._entries.values())
            while total > self.max_floats and len(self._entries) > 1:
                _key, dropped = self._entries.popitem(last=False)
                total -= dropped.floats


_caches: weakref.WeakKeyDictionary[Engine, ChartCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def cache_of(session: Session) -> ChartCache:
    """The cache of the session's database (one an engine, gone with it)."""
    bind = session.get_bind()
    engine = getattr(bind, "engine", bind)
    with _caches_lock:
        cache = _caches.get(engine)
        if cache is None:
            cache = _caches[engine] = ChartCache()
        return cache


def read_line_set(session: Session, *, key: tuple, columns: Sequence, where: Sequence,
                  order_width: int, fetch_table: Callable[[Session, Select], np.ndarray],
                  single_writer: bool = False) -> LineSet:
    """The rows matching `where` as lines by rank: `columns` are `(id, rank, *order keys
    (order_width of them), *figures)` of an insert-only table (`MetricPoint`'s). Only the
    rows newer than the cached ones are read when the cached ones still add up.
    `single_writer`: one writer commits these rows, one transaction after another."""
    cache = cache_of(session)
    held = cache.get(key)
    id_column = columns[0]
    statement = select(*columns).where(*where)
    if held is None:
        CHART_CACHE_COLLECTOR.labels("miss").inc()
        entry = _line_set(fetch_table(session, statement), order_width, {})
    else:
        new = fetch_table(session, statement.where(id_column > held.max_id))
        trusted = _ids_visible_in_order(session) or (
            single_writer and time.monotonic() - held.verified_at < VERIFY_SECONDS)
        if trusted:
            CHART_CACHE_COLLECTOR.labels("hit").inc()
            entry = _grown(held, new, order_width, held.verified_at) if len(new) else held
        elif held.count + len(new) == session.scalar(select(func.count(id_column)).where(*where)):
            CHART_CACHE_COLLECTOR.labels("hit").inc()
            entry = _grown(held, new, order_width, time.monotonic())
        else:  # a row committed out of id order: read the line set again, whole
            CHART_CACHE_COLLECTOR.labels("reload").inc()
            entry = _line_set(fetch_table(session, statement), order_width, held.rows)
    if entry is not held:
        cache.put(key, entry)
    return entry


def _ids_visible_in_order(session: Session) -> bool:
    return session.get_bind().dialect.name == "sqlite"


def remember_rows(entry: LineSet, rows: dict[int, dict[str, Any]]) -> None:
    """Keep answer rows (by id) with the line set, for the next request."""
    if len(entry.rows) + len(rows) > CACHED_ROWS_PER_LINE_SET:
        entry.rows.clear()
    entry.rows.update(rows)


def _line_set(table: np.ndarray, order_width: int, rows: dict[int, dict[str, Any]]) -> LineSet:
    lines = {rank: _sorted(line, order_width) for rank, line in _split_by_rank(table).items()}
    return LineSet(lines=lines, count=len(table),
                   max_id=int(table[:, 0].max()) if len(table) else 0, rows=rows)


def _grown(held: LineSet, new: np.ndarray, order_width: int, verified_at: float) -> LineSet:
    if not len(new):
        return replace(held, verified_at=verified_at)
    lines = dict(held.lines)
    for rank, added in _split_by_rank(new).items():
        added = _sorted(added, order_width)
        line = lines.get(rank)
        if line is None:
            lines[rank] = added
            continue
        # A running job's new rows come after the ones held: no sort then.
        in_order = _sort_key(line[-1], order_width) <= _sort_key(added[0], order_width)
        appended = np.concatenate([line, added])
        lines[rank] = appended if in_order else _sorted(appended, order_width)
    return LineSet(lines=lines, count=held.count + len(new),
                   max_id=max(held.max_id, int(new[:, 0].max())), rows=held.rows,
                   verified_at=verified_at)


def _split_by_rank(table: np.ndarray) -> dict[int, np.ndarray]:
    ranks = table[:, 1]
    return {int(rank): table[ranks == rank] for rank in np.unique(ranks)}


def _sorted(line: np.ndarray, order_width: int) -> np.ndarray:
    """Ordered by the order keys (columns 2 .. 2 + order_width), then id (np.lexsort's
    last key is the primary one)."""
    if len(line) < 2:
        return line
    keys = [line[:, 0], *(line[:, column] for column in range(order_width + 1, 1, -1))]
    return line[np.lexsort(keys)]


def _sort_key(row: np.ndarray, order_width: int) -> tuple:
    return (*row[2:2 + order_width].tolist(), row[0])
