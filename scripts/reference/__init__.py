"""The pages of docs/reference/, each rendered from the code by its own module (cli_page,
http_api_page, job_spec_page, on the shared markdown and schema_fields helpers);
scripts/write_reference.py writes or checks them."""
from __future__ import annotations

from pathlib import Path

from . import cli_page, http_api_page, job_spec_page

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
PAGES = {"cli.md": cli_page.render, "http-api.md": http_api_page.render,
         "job-spec.md": job_spec_page.render}
