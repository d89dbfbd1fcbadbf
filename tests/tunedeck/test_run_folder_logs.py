"""Each rank's own log files, as torchrun --log-dir lays them out."""
import os

from tunedeck.run_folder import RunFolder


def test_the_rank_logs_of_the_newest_launch_and_attempt(tmp_path):
    run = RunFolder(tmp_path)
    assert run.rank_log_files(0) == []
    for launch, attempt in (("old_1", 0), ("new_2", 0), ("new_2", 1)):
        folder = run.rank_logs_dir / launch / f"attempt_{attempt}" / "1"
        folder.mkdir(parents=True)
        (folder / "stdout.log").write_text(launch)
        (folder / "stderr.log").write_text(launch)
    os.utime(run.rank_logs_dir / "old_1", (1, 1))
    files = run.rank_log_files(1)
    assert [path.relative_to(run.rank_logs_dir).as_posix() for path in files] == [
        "new_2/attempt_1/1/stdout.log", "new_2/attempt_1/1/stderr.log"]
    assert run.rank_log_files(0) == []
