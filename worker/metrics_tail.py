"""Follows the ranks' metric files, returning only whole new lines, each with its number."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tunedeck.metrics.events import decode_event
from tunedeck.run_folder import RunFolder


class MetricsTail:
    """`ranks`: only these ranks' files (a node's own ranks, when the run folder is one
    that every node of a job on several nodes shares); None: every rank's."""

    def __init__(self, run: RunFolder, ranks: range | None = None):
        self._run = run
        self._ranks = ranks
        self._offsets: dict[int, int] = {}
        self._line_counts: dict[int, int] = {}

    @property
    def run_path(self) -> Path:
        return self._run.path

    def read_new_events(self) -> list[tuple[int, dict[str, Any]]]:
        """(seq, event) for every complete line written since the last call, all ranks."""
        events: list[tuple[int, dict[str, Any]]] = []
        for rank, path in self._run.rank_metrics_files():
            if self._ranks is None or rank in self._ranks:
                events.extend(self._read_rank(rank, path))
        return events

    def _read_rank(self, rank: int, path: Path) -> list[tuple[int, dict[str, Any]]]:
        offset = self._offsets.get(rank, 0)
        with path.open("rb") as file:
            file.seek(offset)
            chunk = file.read()
        # A line without its newline is still being written: leave it for the next read.
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offsets[rank] = offset + len(complete)
        events = []
        for raw_line in complete.splitlines():
            seq = self._line_counts.get(rank, 0)
            self._line_counts[rank] = seq + 1
            event = decode_event(raw_line.decode("utf-8", errors="replace"))
            if event is not None:
                event["rank"] = rank  # the file, not the line, says whose it is
                events.append((seq, event))
        return events
