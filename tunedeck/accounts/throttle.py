"""Sign-in throttling: after MAX_FAILURES wrong passwords (or refused API tokens) within a
minute, for one account or from one client address, every attempt is refused (even with
the right password) until a delay has passed since the newest failure; each further
failure once it has passed doubles it, up to MAX_DELAY.

The failures are the audit trail's own rows (`sign_in_failed`, `token_refused`), so every
web process, and a restarted one, counts the same attempts: no state lives in a process.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunedeck.accounts import audit
from tunedeck.db.models import AuditEvent, as_utc, utc_now

MAX_FAILURES = 5
TRIGGER_WINDOW = timedelta(minutes=1)
# Failures this old no longer count towards the delay's growth.
MEMORY = timedelta(minutes=15)
FIRST_DELAY = timedelta(seconds=30)
MAX_DELAY = timedelta(minutes=15)


def wait_seconds(failures: Sequence[datetime], now: datetime) -> float:
    """How long attempts must still wait, given the failure times (any order); 0: go on."""
    recent = sorted((as_utc(moment) for moment in failures if now - as_utc(moment) <= MEMORY),
                    reverse=True)
    if len(recent) < MAX_FAILURES:
        return 0.0
    # Throttled once MAX_FAILURES fell within one minute of each other, at any point of the
    # remembered window; each failure past those doubles the delay.
    if not any(recent[index] - recent[index + MAX_FAILURES - 1] <= TRIGGER_WINDOW
               for index in range(len(recent) - MAX_FAILURES + 1)):
        return 0.0
    delay = min(FIRST_DELAY * 2 ** (len(recent) - MAX_FAILURES), MAX_DELAY)
    return max(0.0, (recent[0] + delay - now).total_seconds())


def sign_in_wait(*, session: Session, name: str | None, client: str | None,
                 now: datetime | None = None) -> float:
    """Seconds a sign-in (or a bearer token) for `name` from `client` must wait: the longer
    of the account's and the address's."""
    now = now or utc_now()
    since = now - MEMORY
    failed = (audit.SIGN_IN_FAILED, audit.TOKEN_REFUSED)
    waits = [0.0]
    for column, value in ((AuditEvent.actor, name), (AuditEvent.client, client)):
        if not value:
            continue
        times = session.scalars(select(AuditEvent.time).where(
            AuditEvent.time >= since, AuditEvent.action.in_(failed), column == value[:100]))
        waits.append(wait_seconds(list(times), now))
    return max(waits)

