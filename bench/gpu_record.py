"""The record of one bench/gpu_check.sh run: a dated markdown file in bench/results/
(`<YYYY-MM-DD>-<gpu-name>.md`), committed, so each GPU run adds one and the docs quote
their figures from there.

gpu_check.sh calls it three times; the benches append their own tables in between
(`--markdown FILE`):
  new --results-dir DIR --device-line LINE  the file, with the date, the git commit, the
                                            device and the packages' versions; prints its path
  tests FILE --log LOG --exit-code N        tests/gpu's summary line and slowest tests
  log FILE LOG                              everything the script printed, folded away
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("torch", "transformers", "peft", "deepspeed", "liger-kernel", "flash-attn")
# pytest's last line: "4 passed, 3 skipped in 41.20s", "1 failed, 3 passed in 9.1s".
PYTEST_SUMMARY = re.compile(r"\b\d+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed)\b"
                            r"|no tests ran")
DURATIONS_HEADING = re.compile(r"slowest (\d+ )?durations")
# timeout(1)'s exit code, and a shell's for a command ended by SIGINT.
STOPPED_CODES = {124: "stopped at its time budget", 130: "interrupted"}
FENCE = "~~~~"  # not ``` : a log may hold those


def gpu_slug(device_line: str) -> str:
    """"NVIDIA H200, 143771 MiB, 570.124.06" -> "nvidia-h200"."""
    name = device_line.split(",")[0]
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def record_path(results_dir: Path, day: datetime.date, device_line: str) -> Path:
    """`<day>-<gpu>.md`, or `-2`, `-3`... for another run on the same day and GPU."""
    stem = f"{day.isoformat()}-{gpu_slug(device_line)}"
    path, number = results_dir / f"{stem}.md", 2
    while path.exists():
        path, number = results_dir / f"{stem}-{number}.md", number + 1
    return path


def git_commit(repo: Path = REPO) -> str:
    """The commit the run measured. A copy without .git (a GPU machine given the working
    tree only) says so; TUNEDECK_COMMIT names it there."""
    if os.environ.get("TUNEDECK_COMMIT"):
        return os.environ["TUNEDECK_COMMIT"]
    try:
        commit = _git(repo, "rev-parse", "HEAD")
        changed = _git(repo, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git checkout here; set TUNEDECK_COMMIT)"
    return commit + (" with local changes" if changed else "")


def _git(repo: Path, *arguments: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *arguments], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


def package_versions(names: tuple[str, ...] = PACKAGES) -> str:
    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"
    return ", ".join([f"python {platform.python_version()}",
                      *(f"{name} {version(name)}" for name in names)])


def preamble(*, now: datetime.datetime, device_line: str, commit: str, versions: str) -> str:
    return "\n".join([
        f"# bench/gpu_check.sh on {device_line.split(',')[0].strip()}, {now:%Y-%m-%d}", "",
        f"- date: {now:%Y-%m-%d %H:%M %Z}".rstrip(),
        f"- commit: {commit}",
        f"- device (nvidia-smi name, memory, driver): {device_line.strip()}",
        f"- versions: {versions}", ""])


def tests_section(log_text: str, *, exit_code: int) -> str:
    """tests/gpu's summary line (or what stopped it) and pytest's slowest-tests list."""
    lines = log_text.splitlines()
    summary = next((line.strip(" =") for line in reversed(lines) if PYTEST_SUMMARY.search(line)),
                   "no summary line")
    if exit_code in STOPPED_CODES:
        summary += f" ({STOPPED_CODES[exit_code]})"
    section = ["## tests/gpu", "", f"`{summary}` (exit code {exit_code})", ""]
    durations = _durations(lines)
    if durations:
        section += [FENCE + "text", *durations, FENCE, ""]
    return "\n".join(["", *section])


def _durations(lines: list[str]) -> list[str]:
    start = next((index for index, line in enumerate(lines) if DURATIONS_HEADING.search(line)),
                 None)
    if start is None:
        return []
    block = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("="):
            break
        block.append(line)
    return block


def log_section(log_text: str) -> str:
    return "\n".join(["", "<details><summary>Everything gpu_check.sh printed</summary>", "",
                      FENCE + "text", log_text.rstrip("\n"), FENCE, "", "</details>", ""])


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new")
    new.add_argument("--results-dir", type=Path, required=True)
    new.add_argument("--device-line", required=True)
    tests = commands.add_parser("tests")
    tests.add_argument("file", type=Path)
    tests.add_argument("--log", type=Path, required=True)
    tests.add_argument("--exit-code", type=int, required=True)
    log = commands.add_parser("log")
    log.add_argument("file", type=Path)
    log.add_argument("log", type=Path)
    arguments = parser.parse_args(argv)
    if arguments.command == "new":
        now = datetime.datetime.now(datetime.timezone.utc)
        arguments.results_dir.mkdir(parents=True, exist_ok=True)
        path = record_path(arguments.results_dir, now.date(), arguments.device_line)
        path.write_text(preamble(now=now, device_line=arguments.device_line,
                                 commit=git_commit(), versions=package_versions()),
                        encoding="utf-8")
        print(path)
    elif arguments.command == "tests":
        append(arguments.file, tests_section(_read(arguments.log), exit_code=arguments.exit_code))
    else:
        append(arguments.file, log_section(_read(arguments.log)))
    return 0


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


if __name__ == "__main__":
    sys.exit(main())
