import subprocess
import sys

import pytest

from trainer.model.export import folder_written_in_place



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")
def test_a_rank_asks_to_be_killed_with_its_launcher():
    script = ("import ctypes, signal; from trainer.rank import die_with_launcher; die_with_launcher();"  # PR_GET_PDEATHSIG is 2
              "value = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0);"
              "print(value.value == signal.SIGKILL)")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "True", completed.stderr[-2000:]


def test_output_folder_appears_whole_and_replaces_an_old_one(tmp_path):
    final = tmp_path / "merged"
    final.mkdir()
    (final / "stale.bin").write_text("old")
    with folder_written_in_place(final) as staging:
        (staging / "model.safetensors").write_text("new")
        assert not (final / "model.safetensors").exists()
    assert sorted(path.name for path in final.iterdir()) == ["model.safetensors"]
    assert [path.name for path in tmp_path.iterdir()] == ["merged"]


def test_failed_write_leaves_no_partial_folder(tmp_path):
    final = tmp_path / "merged"
    with pytest.raises(RuntimeError):
        with folder_written_in_place(final) as staging:
            (staging / "half.bin").write_text("x")
            raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []
