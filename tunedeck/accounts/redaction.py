"""URLs as TuneDeck may show them: without their passwords.

The database password (in TUNEDECK_DATABASE_URL), the broker's (in TUNEDECK_BROKER_URL) and
a server's (`tunedeck submit --server https://user:password@host`) become `***` wherever a
URL is printed or logged. The hub token (HF_TOKEN, HUGGING_FACE_HUB_TOKEN) is never
rendered at all: it reaches the ranks through their environment only, and the run folder's
`launch.json` records just the variables TuneDeck itself sets (worker/job_runner.py).
"""
from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

REDACTED = "***"
# Query parameters that carry a credential: SQLAlchemy hands `?password=` to the driver,
# redis-py reads `?password=` too.
SECRET_QUERY_WORDS = ("password", "passwd", "secret", "token")


def redact_url(url: str) -> str:
    """A database, broker or server URL with the password of its user part and any
    credential in its query as `***`; one that does not parse keeps only its scheme.

    Everything between the user name and the last `@` counts as the password, so an
    unescaped `@` in it does not leave a piece behind (SQLAlchemy's own
    `render_as_string(hide_password=True)` splits at the first `@` and would)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        scheme, separator, _rest = url.partition("://")
        return f"{scheme}://{REDACTED}" if separator else REDACTED
    netloc, query = parts.netloc, parts.query
    if parts.password:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:{REDACTED}@{host}"
    if query and any(word in query.lower() for word in SECRET_QUERY_WORDS):
        query = urlencode([(key, REDACTED if _is_secret_key(key) else value)
                           for key, value in parse_qsl(query, keep_blank_values=True)],
                          safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # unchanged, not re-spelled (urlunsplit turns sqlite:/// into sqlite:/)
    return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def _is_secret_key(key: str) -> bool:
    return any(word in key.lower() for word in SECRET_QUERY_WORDS)
