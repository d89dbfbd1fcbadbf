"""What the client commands share: a spec file read or a clear exit, a call to a running
server with its token, and local paths made absolute."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def load_spec_or_exit(path: Path):
    from pydantic import ValidationError

    from tunedeck.job_spec import format_validation_error, load_spec_file

    try:
        return load_spec_file(path)
    except OSError as error:
        sys.exit(f"{path}: {error.strerror}")
    except (ValidationError, ValueError) as error:
        sys.exit(f"{path}: invalid job spec\n{format_validation_error(error)}")


def post_to_server(arguments: argparse.Namespace, path: str, body, *,
                    expected_status: int | tuple[int, ...], refusal: str,
                    method: str = "POST") -> dict:
    import httpx

    from tunedeck.settings import load_settings

    server = arguments.server
    if server is None:
        settings = load_settings()
        server = f"http://{settings.host}:{settings.port}"
    token = arguments.token or os.environ.get("TUNEDECK_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        # A preflight's POST waits up to 30 s for its worker's report.
        response = httpx.request(method, f"{server}{path}", json=body, headers=headers,
                                 timeout=60)
    except httpx.HTTPError as error:
        from tunedeck.accounts.redaction import redact_url

        sys.exit(f"cannot reach TuneDeck at {redact_url(server)}: {error}")
    if response.status_code == 401:
        sys.exit(f"{refusal}: the server wants an API token ({response.json().get('detail')}); "
                 "set TUNEDECK_TOKEN to one from `tunedeck token create USER`")
    if response.status_code not in (expected_status if isinstance(expected_status, tuple)
                                    else (expected_status,)):
        sys.exit(f"{refusal} ({response.status_code}): {response.text}")
    return response.json()


def with_absolute_local_paths(spec):
    """A path that exists here means this folder, not the worker's; say so explicitly."""
    changes = {}
    for field in ("model", "dataset", "eval_dataset"):
        value = getattr(spec, field, None)  # a preflight request has no eval_dataset
        if value and not value.startswith("builtin:") and Path(value).expanduser().exists():
            changes[field] = str(Path(value).expanduser().resolve())
    return spec.model_copy(update=changes) if changes else spec
