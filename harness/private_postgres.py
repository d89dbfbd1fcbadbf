"""A PostgreSQL cluster of the test's own (its data folder, a free port, trust auth), which
the test may stop as a crash would (`pg_ctl stop -m immediate`) and start again: the real
outage the shared server on 5432 must never suffer.

PostgreSQL refuses to run as root: where the test runs as root, the cluster's folder
belongs to the `postgres` account and pg_ctl runs as it (runuser).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from harness.servers import free_port


def postgres_binaries() -> Path | None:
    """The folder of initdb and pg_ctl (Debian keeps them out of PATH), or None."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                      key=lambda path: int(Path(path).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def why_no_private_postgres() -> str | None:
    """Why this machine cannot run a private cluster (a skip reason), or None."""
    if postgres_binaries() is None:
        return "no pg_ctl (PostgreSQL's server package) on this machine"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root with no `postgres` account to run PostgreSQL as"
    return None


class PrivatePostgres:
    def __init__(self, folder: Path):
        self.bin = postgres_binaries()
        self.folder = folder
        self.data = folder / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, timeout: float = 60) -> None:
        command = [str(self.bin / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, timeout=timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def create(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.folder, account.pw_uid, account.pw_gid)
            # pytest's temporary folders are 0700: the account must pass through them.
            for parent in self.folder.parents:
                if parent == Path("/"):
                    break
                os.chmod(parent, os.stat(parent).st_mode | 0o011)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8")

    def start(self) -> None:
        # fsync off and a small shared memory: a test's cluster, fast to start and stop.
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c shared_buffers=16MB -c max_connections=200")
        self._run("pg_ctl", "start", "-D", str(self.data), "-w", "-t", "60",
                  "-l", str(self.folder / "postgres.log"), "-o", options, timeout=90)

    def stop_immediately(self) -> None:
        """As a crash would: no checkpoint, every connection cut at once."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")

    def stop(self) -> None:
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")

    def answers(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                                 dbname="postgres", connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False


@contextmanager
def private_postgres(folder: Path) -> Iterator[PrivatePostgres]:
    """A started private cluster, migrated for TuneDeck, stopped (and its folder kept for the
    test's logs) afterwards."""
    from tunedeck.db.migrate import upgrade_database

    server = PrivatePostgres(folder)
    server.create()
    server.start()
    try:
        deadline = time.monotonic() + 30
        while not server.answers():
            if time.monotonic() > deadline:
                raise AssertionError(f"the private PostgreSQL on {server.port} did not answer")
            time.sleep(0.2)
        upgrade_database(server.url)
        yield server
    finally:
        if server.answers():
            server.stop()


@contextmanager
def private_postgres_or_skip(folder: Path) -> Iterator[PrivatePostgres]:
    """`private_postgres`, or the test skipped with the reason this machine cannot run one."""
    import pytest

    reason = why_no_private_postgres()
    if reason:
        pytest.skip(reason)
    with private_postgres(folder) as server:
        yield server
