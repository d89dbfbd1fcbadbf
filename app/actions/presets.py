"""Presets, one policy for the API and the UI: a principal lists, saves, loads and deletes
only their own (an admin too: presets are a user's form, not something to administer).
Open-access presets belong to nobody, as open-access jobs do. Saves and deletes are audited
in the same transaction."""
from __future__ import annotations

from app.actions.errors import Invalid, NotFound
from app.auth.job_access import owner_for_new_job
from app.auth.principal import Principal
from tunedeck import presets as preset_store
from tunedeck.accounts import audit
from tunedeck.db.engine import Database
from tunedeck.db.models import Preset
from tunedeck.spec.job_spec import JobSpec


def _name(name: str) -> str:
    try:
        return preset_store.clean_name(name)
    except ValueError as error:
        raise Invalid([(("name",), str(error))]) from error


def list_presets(principal: Principal, *, database: Database) -> list[Preset]:
    """The principal's presets, by name."""
    with database.transaction() as session:
        return preset_store.list_presets(session=session, owner=owner_for_new_job(principal))


def save_preset(principal: Principal, name: str, spec: JobSpec, *, database: Database,
                client: str | None = None) -> tuple[Preset, bool]:
    """(the preset, True when new): creates it or overwrites the principal's same-named
    one. Invalid naming `name` for an empty or over-long name; nothing is stored then."""
    cleaned = _name(name)
    with database.transaction() as session:
        preset, created = preset_store.save_preset(
            session=session, owner=owner_for_new_job(principal), name=cleaned, spec=spec)
        audit.record(session=session, actor=principal.name, action=audit.PRESET_SAVED,
                     detail=cleaned, client=client)
    return preset, created


def load_preset(principal: Principal, name: str, *, database: Database) -> Preset:
    """The principal's preset; NotFound for a missing one and another user's alike."""
    with database.transaction() as session:
        try:
            return preset_store.get_preset(session=session, owner=owner_for_new_job(principal),
                                           name=(name or "").strip())
        except preset_store.PresetNotFound as error:
            raise NotFound(str(error)) from error


def delete_preset(principal: Principal, name: str, *, database: Database,
                  client: str | None = None) -> None:
    """NotFound for a missing preset and another user's alike."""
    cleaned = (name or "").strip()
    with database.transaction() as session:
        try:
            preset_store.delete_preset(session=session, owner=owner_for_new_job(principal),
                                       name=cleaned)
        except preset_store.PresetNotFound as error:
            raise NotFound(str(error)) from error
        audit.record(session=session, actor=principal.name, action=audit.PRESET_DELETED,
                     detail=cleaned, client=client)
