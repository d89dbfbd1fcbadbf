"""A small disk for tests of a full one: a tmpfs of a given size mounted on a folder, which
a test can grow (`remount`) and fill (`fill_leaving`). Mounting needs root (CI runs as
root); `mount_problem()` says why it cannot be done here, for the test's skip reason."""
from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

FILLER_NAME = "filler.bin"
_CHUNK_BYTES = 1 << 20


def mount_problem() -> str | None:
    """Why a tmpfs cannot be mounted here (None: it can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (CI runs these tests as root)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "no mount/umount on PATH"
    return None


class SmallDisk:
    def __init__(self, path: Path):
        self.path = path

    @property
    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free

    def remount(self, size_bytes: int) -> None:
        """Grow (or shrink, down to what it holds) the disk in place; files stay."""
        _mount_command("mount", "-o", f"remount,size={size_bytes}", str(self.path))

    def fill_leaving(self, free_bytes: int) -> Path:
        """Write a filler file until about `free_bytes` are left (within a page)."""
        filler = self.path / FILLER_NAME
        to_write = max(0, self.free_bytes - free_bytes)
        with filler.open("ab") as file:
            while to_write > 0:
                chunk = min(to_write, _CHUNK_BYTES)
                file.write(b"\0" * chunk)
                to_write -= chunk
        return filler


@contextmanager
def small_disk(path: Path, size_bytes: int) -> Iterator[SmallDisk]:
    """A tmpfs of `size_bytes` on `path` (made if missing), unmounted after whatever
    happened. Raises OSError when it cannot be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    _mount_command("mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path))
    try:
        yield SmallDisk(path)
    finally:
        # Lazily: a process of the test that still holds a file there must not keep the
        # mount (and the test's temporary folder) alive.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _mount_command(*argv: str) -> None:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")
