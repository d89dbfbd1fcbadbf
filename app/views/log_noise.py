"""The known library noise in a job's torchrun log, kept out of the job page's log tail: the
deprecation and future warnings transformers and torch print (once a rank, so twice or
eight times over), the source line Python's warnings module prints under each, and the
steps of a progress bar before it is full. The full log keeps every line; only the tail
the page shows is quieted, and it says how many lines it left out."""
from __future__ import annotations

import re
from dataclasses import dataclass

# torchrun --tee prefixes each line of a rank with "[default0]:" (local rank 0).
_RANK_PREFIX = re.compile(r"^(\[[^\]]*\]:)?")
# warnings.formatwarning: "FILE:LINE: CATEGORY: MESSAGE", then "  SOURCE LINE" when Python
# can read it. Only a library's (site-packages) and only these categories: a warning of the
# job's own code, or of any other kind, may be why it failed.
_LIBRARY_WARNING = re.compile(
    r"^\S*[/\\](site|dist)-packages[/\\]\S+\.py:\d+: "
    r"(FutureWarning|DeprecationWarning|PendingDeprecationWarning|UserWarning): ")
_WARNING_SOURCE_LINE = re.compile(r"^  \S")
# A tqdm bar ("Loading weights:  40%|####      | 8/21 [00:00<...]") short of 100%: torchrun
# writes each redraw as a line of its own; the full bar says the same, once.
_UNFINISHED_PROGRESS = re.compile(r"^[^|]*: +\d{1,2}%\|.*\| *\d+/\d+ \[")


@dataclass(frozen=True)
class QuietTail:
    lines: list[str]  # the last lines, library noise left out
    hidden: int  # how many lines of noise were left out between them


def quiet_log_tail(lines: list[str], keep: int) -> QuietTail:
    """The last `keep` lines of `lines` that are not library noise, and how many noisy lines
    lie among them (from the first kept line to the end)."""
    noisy = noise_marks(lines)
    kept: list[str] = []
    hidden = 0
    for line, is_noise in zip(reversed(lines), reversed(noisy)):
        if len(kept) == keep:
            break
        if is_noise:
            hidden += 1
        else:
            kept.append(line)
    return QuietTail(lines=kept[::-1], hidden=hidden)


def noise_marks(lines: list[str]) -> list[bool]:
    """For each line, whether it is library noise. A warning's source line is the next line
    of the same rank (ranks' lines interleave), indented by two spaces."""
    marks: list[bool] = []
    warned_ranks: set[str] = set()  # ranks whose last line was a hidden warning
    for line in lines:
        prefix = _RANK_PREFIX.match(line).group(0)
        text = line[len(prefix):]
        is_source_line = prefix in warned_ranks and bool(_WARNING_SOURCE_LINE.match(text))
        is_warning = bool(_LIBRARY_WARNING.match(text))
        marks.append(is_source_line or is_warning or bool(_UNFINISHED_PROGRESS.match(text)))
        warned_ranks.discard(prefix)
        if is_warning:
            warned_ranks.add(prefix)
    return marks
