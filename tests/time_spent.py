"""Where the suite's time goes: after the run, the seconds each folder of tests took (set-up,
call and tear-down added up, over every process) and the share of the whole, so a slow CI
run says which part grew. `--durations=30` (the Makefile's) lists the slowest tests."""
from __future__ import annotations

from collections import defaultdict
from pathlib import PurePosixPath

import pytest

SECONDS_BY_FOLDER: dict[str, float] = defaultdict(float)
SECONDS_BY_FILE: dict[str, float] = defaultdict(float)


def folder_of(nodeid: str) -> str:
    """`tests/e2e/test_x.py::test_y` -> `tests/e2e`; a file at the top -> `tests`."""
    return str(PurePosixPath(nodeid.split("::", 1)[0]).parent)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under xdist the controller receives every process's reports here.
    SECONDS_BY_FOLDER[folder_of(report.nodeid)] += report.duration
    SECONDS_BY_FILE[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    total = sum(SECONDS_BY_FOLDER.values())
    if total < 1:
        return
    write = terminalreporter.write_line
    terminalreporter.section("seconds by folder (all processes added)")
    for folder, seconds in sorted(SECONDS_BY_FOLDER.items(), key=lambda item: -item[1]):
        write(f"{seconds:8.1f} s {seconds / total:6.1%}  {folder}")
    write(f"{total:8.1f} s in all")
    terminalreporter.section("the 15 slowest files")
    for name, seconds in sorted(SECONDS_BY_FILE.items(), key=lambda item: -item[1])[:15]:
        write(f"{seconds:8.1f} s  {name}")
