"""The preset store, on SQLite and (marked) PostgreSQL: per-owner names, overwrite, and the
spec read back as the typed model."""
import pytest

from tunedeck import presets
from tunedeck.spec.job_spec import JobSpec

SPEC = JobSpec(name="preset-test", max_steps=7, backend="fsdp", learning_rate=1e-3,
               lora={"r": 16, "alpha": 32})


def test_a_saved_spec_reads_back_as_the_typed_model_and_a_second_save_overwrites(database):
    with database.transaction() as session:
        first, created = presets.save_preset(session=session, owner="alice", name="fsdp",
                                             spec=SPEC)
        assert created
    with database.transaction() as session:
        again, created = presets.save_preset(session=session, owner="alice", name="fsdp",
                                             spec=SPEC.model_copy(update={"max_steps": 9}))
        assert (created, again.id) == (False, first.id)
    with database.transaction() as session:
        stored = presets.get_preset(session=session, owner="alice", name="fsdp")
        assert isinstance(stored.spec_model, JobSpec)
        assert stored.spec_model == SPEC.model_copy(update={"max_steps": 9})
        assert stored.updated_at >= stored.created_at


def test_each_owner_has_their_own_names_and_open_access_is_its_own_owner(database):
    with database.transaction() as session:
        for owner in ("alice", "bob", None):
            presets.save_preset(session=session, owner=owner, name="same",
                                spec=SPEC.model_copy(update={"name": f"of {owner}"}))
        presets.save_preset(session=session, owner=None, name="same", spec=SPEC)  # overwrite
        presets.save_preset(session=session, owner="alice", name="b-second", spec=SPEC)
        presets.save_preset(session=session, owner="alice", name="a-first", spec=SPEC)
    with database.transaction() as session:
        assert [p.name for p in presets.list_presets(session=session, owner="alice")] == [
            "a-first", "b-second", "same"]
        assert [p.spec_model.name for p in presets.list_presets(session=session, owner="bob")] \
            == ["of bob"]
        assert len(presets.list_presets(session=session, owner=None)) == 1
        presets.delete_preset(session=session, owner="bob", name="same")
        with pytest.raises(presets.PresetNotFound):
            presets.get_preset(session=session, owner="bob", name="same")
        assert presets.get_preset(session=session, owner="alice", name="same").owner == "alice"


@pytest.mark.parametrize("name, expected", [("  fast lora  ", "fast lora"), ("x" * 80, "x" * 80)])
def test_names_are_trimmed(name, expected):
    assert presets.clean_name(name) == expected


@pytest.mark.parametrize("name", ["", "   ", "x" * 81, "a\x00b"])
def test_a_bad_name_is_refused_naming_the_field(name):
    with pytest.raises(ValueError, match=r"^name: "):
        presets.clean_name(name)
