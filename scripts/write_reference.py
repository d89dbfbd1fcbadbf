#!/usr/bin/env python
"""Write the reference pages under docs/reference/ from the code itself.

    python scripts/write_reference.py           # (re)write cli.md, http-api.md, job-spec.md
    python scripts/write_reference.py --check   # exit 1, naming each page that differs

- cli.md: every command and subcommand of `cli.main._build_parser()`, with its
  arguments, their types, defaults and help.
- http-api.md: every route of the web app's OpenAPI document (`app.main.create_app(...)`,
  built against a throw-away TUNEDECK_HOME with a migrated SQLite database, then
  `app.openapi()`), with its parameters, body and status codes, and the request bodies.
- job-spec.md: every field of `JobSpec.model_json_schema()`, following its $refs into the
  sections (LoRA, columns, ZeRO-2, FSDP).

The output depends on the code only: commands, routes and fields are sorted, no path of
this machine and no time is written, and argparse's terminal width is never consulted.
A spec field's label and description are its own (`Field(title=..., description=...)` in
tunedeck/spec/job_spec.py and tunedeck/spec/sections.py); a field without a description stops
the script, so a new field cannot reach the page undescribed.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from scripts.reference import PAGES, REFERENCE  # noqa: E402  (after the path is set)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each page that differs from the code")
    arguments = parser.parse_args(argv)
    drifted = []
    rendered = {name: render() for name, render in PAGES.items()}  # all, before writing any
    for name, text in rendered.items():
        path = REFERENCE / name
        shown = path.relative_to(ROOT).as_posix()
        if arguments.check:
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            if current != text:
                drifted.append(shown)
                diff = difflib.unified_diff(current.splitlines(), text.splitlines(),
                                            f"{shown} (on disk)", f"{shown} (from the code)",
                                            lineterm="", n=1)
                print("\n".join(list(diff)[:40]), file=sys.stderr)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {shown}")
    if drifted:
        print("out of date: " + ", ".join(drifted)
              + "; run `python scripts/write_reference.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
