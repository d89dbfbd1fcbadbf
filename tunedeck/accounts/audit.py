"""The audit trail: who submitted, cancelled, resumed, retried, archived, deleted or
downloaded what, who saved or deleted a preset, who signed in (or failed to) and who made
or revoked a token, and when. Rows are only added.
The caller owns the transaction, so an action and its record commit together."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunedeck.db.models import AuditEvent

SUBMIT, CANCEL, RESUME, RETRY, COMPARE_BACKENDS = "submit", "cancel", "resume", "retry", "compare_backends"
DOWNLOAD, UPLOAD = "download", "upload"
DELETE, ARCHIVE, UNARCHIVE = "delete", "archive", "unarchive"  # jobs
PREFLIGHT = "preflight"  # a worker was asked to read a dataset (and the model's tokenizer)
GENERATE = "generate"  # a prompt to a finished job's model ("Try it"); detail: the variant
SIGN_IN, SIGN_IN_FAILED, SIGN_OUT = "sign_in", "sign_in_failed", "sign_out"
# Refused by the throttle (tunedeck/accounts/throttle.py) before any password was checked,
# and an API token that matched no live token.
SIGN_IN_THROTTLED, TOKEN_REFUSED = "sign_in_throttled", "token_refused"
TOKEN_CREATED, TOKEN_REVOKED = "token_created", "token_revoked"
USER_CREATED, USER_CHANGED = "user_created", "user_changed"
PRESET_SAVED, PRESET_DELETED = "preset_saved", "preset_deleted"  # detail: the preset's name


def record(*, session: Session, actor: str, action: str, job_id: int | None = None,
           detail: str = "", client: str | None = None) -> None:
    session.add(AuditEvent(actor=actor[:64], action=action, job_id=job_id,
                           detail=detail[:2000], client=(client or None) and client[:100]))


def list_events(*, session: Session, limit: int = 200, job_id: int | None = None,
                actor: str | None = None) -> list[AuditEvent]:
    query = select(AuditEvent)
    if job_id is not None:
        query = query.where(AuditEvent.job_id == job_id)
    if actor is not None:
        query = query.where(AuditEvent.actor == actor)
    return list(session.scalars(query.order_by(AuditEvent.id.desc()).limit(limit)))


def event_to_dict(event: AuditEvent) -> dict:
    return {"id": event.id, "time": event.time.isoformat(), "actor": event.actor,
            "action": event.action, "job_id": event.job_id, "detail": event.detail,
            "client": event.client}
