"""What the New job form offers under its model and dataset fields."""
from __future__ import annotations

from app.auth.principal import Principal
from app.views.input_suggestions import input_suggestions
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings



def test_recent_values_first_then_builtins_uploads_and_the_allowed_folders(database, tmp_path):
    root = tmp_path / "data"
    (root / "models" / "llama-3b").mkdir(parents=True)
    (root / "models" / "llama-3b" / "config.json").write_text("{}")
    (root / "models" / "llama-3b" / "inner.jsonl").write_text("{}")  # a model's own file
    (root / "sets").mkdir()
    (root / "sets" / "chat.jsonl").write_text("{}")
    (root / "sets" / "notes.txt").write_text("not a dataset")
    (root / "saved").mkdir()
    (root / "saved" / "dataset_info.json").write_text("{}")
    (root / ".hidden.jsonl").write_text("{}")
    settings = Settings(home=tmp_path / "home", allowed_roots=str(root))
    uploads = settings.upload_dir_for("ana")
    uploads.mkdir(parents=True)
    (uploads / "0123abcd-mine.jsonl").write_text("{}")
    (uploads / ".upload-partial.jsonl").write_text("")
    with database.transaction() as session:
        for owner, model, dataset in (("ana", "org/older", str(root / "sets" / "chat.jsonl")),
                                      ("bo", "org/bos-model", "org/bos-data"),
                                      ("ana", "org/newest", "org/data"),
                                      ("ana", "org/newest", "org/data")):  # twice, once offered
            job_store.create_job(session=session, owner=owner,
                                 spec=JobSpec(model=model, dataset=dataset, max_steps=10))
    ana = Principal(name="ana", is_admin=False)
    offered = input_suggestions(database=database, principal=ana, settings=settings)
    assert offered.models == ["org/newest", "org/older", "builtin:tiny-llama",
                              str(root / "models" / "llama-3b")]
    assert offered.datasets == ["org/data", str(root / "sets" / "chat.jsonl"),
                                "builtin:arithmetic", str(uploads / "0123abcd-mine.jsonl"),
                                str(root / "saved")]
    # Another user's recent values are theirs alone.
    assert "org/bos-model" not in offered.models
