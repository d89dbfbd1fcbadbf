"""Rows as a plain text table a person reads in a terminal: a header, columns padded to
their widest cell, numbers right-aligned."""
from __future__ import annotations

from typing import Sequence

GAP = "  "


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
               right_aligned: Sequence[str] = ()) -> str:
    """`headers` over `rows` (cells already text); the columns named in `right_aligned`
    are padded on the left. Trailing spaces are trimmed."""
    widths = [max([len(header), *(len(row[column]) for row in rows)])
              for column, header in enumerate(headers)]
    right = {column for column, header in enumerate(headers) if header in right_aligned}

    def line(cells: Sequence[str]) -> str:
        padded = [cell.rjust(width) if column in right else cell.ljust(width)
                  for column, (cell, width) in enumerate(zip(cells, widths))]
        return GAP.join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])
