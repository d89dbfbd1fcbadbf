"""A markdown table appended to a file row by row, so that a bench cut short (a GPU window
ending, a cell that hangs) still leaves the rows it measured in bench/results/."""
from __future__ import annotations

from pathlib import Path


class MarkdownTable:
    """`path` None: a table that writes nothing, so the benches need no `if markdown:`."""

    def __init__(self, path: Path | None, columns: list[str]):
        self.path = path
        self.columns = columns

    def start(self, title: str, lines: tuple[str, ...] = ()) -> None:
        """A heading, a few lines of prose (the device, the settings) and the header."""
        self._append([f"## {title}", "", *lines, *([""] if lines else []),
                      _row(self.columns), _row(["---"] * len(self.columns))], gap=True)

    def add(self, values: list[str]) -> None:
        if len(values) != len(self.columns):
            raise ValueError(f"{len(values)} values for {len(self.columns)} columns")
        self._append([_row(values)])

    def end(self, lines: tuple[str, ...]) -> None:
        """Notes under the table (what its columns mean, the worst error)."""
        self._append(["", *lines], gap=False)

    def _append(self, lines: list[str], *, gap: bool = False) -> None:
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as file:
            file.write(("\n" if gap else "") + "\n".join(lines) + "\n")


def _row(values: list[str]) -> str:
    # A "|" inside a cell (an error message's) would start a new column.
    return "| " + " | ".join(str(value).replace("|", "\\|").replace("\n", " ")
                             for value in values) + " |"
