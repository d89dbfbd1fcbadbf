"""Presets: a user's named job specs, saved from the New job form to load into it again.

One owner's presets are a namespace of names (owner None: those saved with open access).
Specs are stored as JobSpec's JSON and read back as the typed model (Preset.spec_model).
The caller owns the transaction.
"""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunedeck.db.models import Preset, utc_now
from tunedeck.spec.job_spec import JobSpec

NAME_MAX_LENGTH = 80


class PresetNotFound(Exception):
    def __init__(self, name: str):
        super().__init__(f"no preset named {name!r}")
        self.name = name


def clean_name(name: str) -> str:
    """The name as stored: trimmed, 1 to NAME_MAX_LENGTH characters; ValueError (its text
    naming `name`) otherwise."""
    cleaned = (name or "").strip()
    if not cleaned:
        raise ValueError("name: a preset needs a name")
    if len(cleaned) > NAME_MAX_LENGTH:
        raise ValueError(f"name: at most {NAME_MAX_LENGTH} characters (this one has "
                         f"{len(cleaned)})")
    if "\x00" in cleaned:  # PostgreSQL text refuses NUL; say so rather than fail inside
        raise ValueError("name: must not contain a NUL character")
    return cleaned


def _owned_by(owner: str | None):
    # `owner = NULL` is never true in SQL: open-access presets need IS NULL.
    return Preset.owner.is_(None) if owner is None else Preset.owner == owner


def list_presets(*, session: Session, owner: str | None) -> list[Preset]:
    """The owner's presets, by name."""
    query = select(Preset).where(_owned_by(owner)).order_by(Preset.name)
    return list(session.scalars(query))


def find_preset(*, session: Session, owner: str | None, name: str) -> Preset | None:
    query = select(Preset).where(_owned_by(owner), Preset.name == name)
    return session.scalars(query).first()


def get_preset(*, session: Session, owner: str | None, name: str) -> Preset:
    preset = find_preset(session=session, owner=owner, name=name)
    if preset is None:
        raise PresetNotFound(name)
    return preset


def save_preset(*, session: Session, owner: str | None, name: str,
                spec: JobSpec) -> tuple[Preset, bool]:
    """(the preset, True when it is new): the owner's same-named preset gets this spec, or
    a new one is made. `name` must be clean_name's already."""
    data = spec.model_dump(mode="json")
    preset = find_preset(session=session, owner=owner, name=name)
    if preset is not None:
        preset.spec = data
        preset.updated_at = utc_now()  # set even when the spec is unchanged: it was saved
        session.flush()
        return preset, False
    preset = Preset(owner=owner, name=name, spec=data)
    session.add(preset)
    session.flush()
    return preset, True


def delete_preset(*, session: Session, owner: str | None, name: str) -> None:
    session.delete(get_preset(session=session, owner=owner, name=name))
    session.flush()
