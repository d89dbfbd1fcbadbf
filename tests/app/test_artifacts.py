"""What a download holds (dtype from the safetensors headers, bytes, files), on the job page
and in GET /api/jobs/{id}; and zips that are built on disk, never in memory."""
import threading
import tracemalloc
import zipfile

import torch
from safetensors.torch import save_file

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.job_page import job_handlers
from app.views import artifacts
from app.views.artifacts import artifact_summary, artifact_zip, readable_bytes, summary_text
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder


def write_artifacts(run: RunFolder) -> None:
    """A merged/ of two bf16 shards (one fp32 norm) and an fp32 adapter/, as export leaves them."""
    run.merged_dir.mkdir(parents=True)
    save_file({"a.weight": torch.zeros(64, 64, dtype=torch.bfloat16), "norm": torch.ones(64)},
              str(run.merged_dir / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": torch.zeros(64, 32, dtype=torch.bfloat16)},
              str(run.merged_dir / "model-00002-of-00002.safetensors"))
    (run.merged_dir / "config.json").write_text('{"dtype": "bfloat16"}')
    run.adapter_dir.mkdir()
    save_file({"lora_A": torch.zeros(8, 64)}, str(run.adapter_dir / "adapter_model.safetensors"))


def folder_bytes(folder) -> int:
    return sum(path.stat().st_size for path in folder.iterdir())


def test_a_summary_names_the_dominant_dtype_the_bytes_and_the_files(tmp_path):
    run = RunFolder(tmp_path / "run")
    assert artifact_summary(run, "merged") is None  # before the export
    write_artifacts(run)
    assert artifact_summary(run, "merged") == {"dtype": "BF16", "files": 3,
                                               "bytes": folder_bytes(run.merged_dir)}
    adapter = artifact_summary(run, "adapter")
    assert adapter == {"dtype": "F32", "files": 1, "bytes": folder_bytes(run.adapter_dir)}
    assert summary_text({"dtype": "BF16", "bytes": 1_234_000_000, "files": 3}) == "BF16, 1.2 GB (3 files)"
    assert summary_text({"dtype": "F32", "bytes": 4_500_000, "files": 1}) == "F32, 4.5 MB (1 file)"
    assert readable_bytes(999) == "999 B" and readable_bytes(2_500_000_000_000) == "2500.0 GB"


def test_a_damaged_weights_file_still_lists_the_download_without_a_dtype(tmp_path):
    run = RunFolder(tmp_path / "run")
    run.merged_dir.mkdir(parents=True)
    (run.merged_dir / "model.safetensors").write_bytes(b"\xff" * 16)
    assert artifact_summary(run, "merged") == {"dtype": None, "files": 1, "bytes": 16}


def succeeded_job_with_artifacts(database, tmp_path) -> tuple[int, RunFolder]:
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=2)).id
    run = RunFolder(tmp_path / f"job-{job_id}")
    write_artifacts(run)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
        job_store.mark_job_succeeded(session=session, job_id=job_id)
    return job_id, run


def test_the_job_page_says_each_downloads_dtype_and_size(database, tmp_path):
    job_id, run = succeeded_job_with_artifacts(database, tmp_path)
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    merged_kb = folder_bytes(run.merged_dir) / 1000
    assert f"BF16, {merged_kb:.1f} KB (3 files)" in page.downloads_html
    assert "F32, " in page.downloads_html and "(1 file)" in page.downloads_html


def test_the_api_job_row_lists_its_artifacts_and_the_download_is_the_whole_zip(client, tmp_path):
    job_id, run = succeeded_job_with_artifacts(client.app_state.database, tmp_path)
    row = client.get(f"/api/jobs/{job_id}").json()
    assert row["status"] == "succeeded" and row["id"] == job_id  # the contract fields stay
    assert row["artifacts"] == {
        "merged": {"dtype": "BF16", "bytes": folder_bytes(run.merged_dir), "files": 3},
        "adapter": {"dtype": "F32", "bytes": folder_bytes(run.adapter_dir), "files": 1}}
    response = client.get(f"/api/jobs/{job_id}/artifacts/merged")
    zip_path = run.path / "downloads" / "merged.zip"
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == zip_path.stat().st_size
    assert response.content == zip_path.read_bytes()
    assert client.get(f"/api/jobs/{job_id}").json()["artifacts"]["merged"]["files"] == 3  # zip not counted


def test_building_a_zip_holds_no_whole_file_in_memory(tmp_path):
    run = RunFolder(tmp_path / "run")
    run.merged_dir.mkdir(parents=True)
    size = 64 * 1024 * 1024
    with (run.merged_dir / "model.safetensors").open("wb") as file:
        file.truncate(size)  # sparse: 64 MB to copy, nothing written up front
    tracemalloc.start()
    try:
        zip_path = artifact_zip(run, "merged")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert zipfile.ZipFile(zip_path).getinfo("merged/model.safetensors").file_size == size
    assert peak < size / 16, peak  # copied in small pieces, never read whole


def test_two_builds_at_once_in_one_process_each_leave_a_whole_zip(tmp_path, monkeypatch):
    """Two request threads of one web process (one pid) asking for the same new zip."""
    run = RunFolder(tmp_path / "run")
    write_artifacts(run)
    original_write = zipfile.ZipFile.write
    second_build: list = []

    def write_then_let_another_request_build(self, filename, *args, **kwargs):
        original_write(self, filename, *args, **kwargs)
        if not second_build:  # the first file of the first build: the other thread starts
            second_build.append(None)
            thread = threading.Thread(target=lambda: second_build.append(artifact_zip(run, "merged")))
            thread.start()
            thread.join()

    monkeypatch.setattr(zipfile.ZipFile, "write", write_then_let_another_request_build)
    first = artifact_zip(run, "merged")
    assert second_build[1] == first
    names = zipfile.ZipFile(first).namelist()
    assert len(names) == 3 and zipfile.ZipFile(first).testzip() is None
    assert [path.name for path in first.parent.iterdir()] == ["merged.zip"]  # no partial left
    assert artifacts.DOWNLOADS_DIR == first.parent.name


def test_the_tensorboard_zip_is_rebuilt_when_an_event_file_grows(tmp_path):
    import zipfile

    from tunedeck.run_folder import RunFolder as Run

    run = Run(tmp_path)
    run.tensorboard_dir.mkdir()
    events = run.tensorboard_dir / "events.out.tfevents.1.host"
    events.write_bytes(b"a" * 10)
    first = artifact_zip(run, "tensorboard")
    assert zipfile.ZipFile(first).read("tensorboard/events.out.tfevents.1.host") == b"a" * 10
    import os
    import time as clock

    later = clock.time() + 5
    events.write_bytes(b"a" * 30)
    os.utime(events, (later, later))
    again = artifact_zip(run, "tensorboard")
    assert zipfile.ZipFile(again).read("tensorboard/events.out.tfevents.1.host") == b"a" * 30
    assert artifact_summary(run, "tensorboard") == {"bytes": 30, "files": 1}
    assert summary_text(artifact_summary(run, "tensorboard")) == "30 B (1 file)"
