"""Who a request acted for a moment ago, for the time the database cannot say.

AccessMiddleware checks every credential against the database. While the database is
unreachable (a PostgreSQL restart, a failover, a locked SQLite file) it cannot, and a page
left open would be signed out by the outage. A credential this process found valid within
the grace period stays good meanwhile: nobody could have revoked it, since revoking writes
to the database. Kept by digest, never the secret itself, and in memory only: a restart
forgets them all.
"""
from __future__ import annotations

import hashlib
import threading
import time

from app.auth.principal import Principal

# How long a credential this web checked stays good while the database is unreachable: an
# outage is seconds to minutes; a page left open longer signs in again once it is back.
OUTAGE_GRACE_SECONDS = 600.0
# A bound on memory: past it, the entries older than the grace period are dropped.
MAX_VOUCHED = 10_000


class VouchedCredentials:
    """The credentials this process found valid within the last `grace_seconds`, by their
    digest, with whom they act for: honoured only while the database cannot be asked."""

    def __init__(self, grace_seconds: float = OUTAGE_GRACE_SECONDS):
        self.grace_seconds = grace_seconds
        self._seen: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def remember(self, credential: str | None, principal: Principal) -> None:
        if credential is None:
            return
        now = time.monotonic()
        with self._lock:
            self._seen[_digest(credential)] = (principal, now)
            if len(self._seen) > MAX_VOUCHED:  # forget the stale ones, not the live
                self._seen = {key: seen for key, seen in self._seen.items()
                              if now - seen[1] < self.grace_seconds}

    def forget(self, credential: str | None) -> None:
        if credential is not None:
            with self._lock:
                self._seen.pop(_digest(credential), None)

    def principal_for(self, credential: str | None) -> Principal | None:
        if credential is None:
            return None
        with self._lock:
            seen = self._seen.get(_digest(credential))
        if seen is None or time.monotonic() - seen[1] >= self.grace_seconds:
            return None
        return seen[0]


def _digest(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()
