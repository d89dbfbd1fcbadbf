"""The run folder's JSON files are written whole, even by two writers at once."""
from __future__ import annotations

import threading

from tunedeck.run_folder import read_json, write_json


def test_two_writers_of_one_file_never_rename_each_others_partial(tmp_path):
    # The nodes of a multi-node job share one run folder and each writes spec.json.
    target = tmp_path / "spec.json"
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def write(node: int) -> None:
        start.wait()
        try:
            for round_ in range(200):
                write_json(target, {"node": node, "round": round_})
        except BaseException as error:  # noqa: BLE001 - the test reports it below
            errors.append(error)

    writers = [threading.Thread(target=write, args=(node,)) for node in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()

    assert errors == []
    assert read_json(target)["round"] == 199
    assert [path.name for path in tmp_path.iterdir()] == ["spec.json"]


def test_a_checkpoint_is_complete_only_under_its_final_name_with_its_marker(tmp_path):
    from tunedeck.run_folder import CHECKPOINT_STATE_FILE, RunFolder, remove_partial_checkpoints

    run = RunFolder(tmp_path)
    complete, staged, unmarked = (run.checkpoint_dir(2), run.partial_checkpoint_dir(4),
                                  run.checkpoint_dir(6))
    for folder in (complete, staged, unmarked):
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"\0")
    write_json(complete / CHECKPOINT_STATE_FILE, {"step": 2})
    write_json(staged / CHECKPOINT_STATE_FILE, {"step": 4})  # marked, never renamed
    assert staged.name == ".step-00000004.partial"

    assert run.completed_checkpoints() == [(2, complete)]
    assert run.partial_checkpoints() == [staged, unmarked]
    assert remove_partial_checkpoints(run) == [staged, unmarked]
    assert sorted(run.checkpoints_dir.iterdir()) == [complete]
    assert remove_partial_checkpoints(run) == []
