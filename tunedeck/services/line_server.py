"""A long-lived helper process that answers JSON questions, one a line: for work a service
must not do in its own process (the web never imports torch; a worker must not risk its
running jobs on a user's dataset), but should not pay a Python start and torch's imports for
each question either.

`LineServer` (the asking side) starts `argv` on the first question, sends `{"id", "request"}`
lines, and takes the reply line whose id matches; a server that died is started again, and one
that is out of step, too slow or too big is killed (its next question starts a fresh one).
`serve_lines` (the answering side) moves file descriptor 1 to stderr first, so nothing a
library or native code prints can pass for a reply.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable


def installed_module(module: str, *args: str) -> list[str]:
    """The argv that runs `module` as this Python has it installed. `-P` keeps the working
    folder off `sys.path`: a `trainer/` folder there (a user's own project) would otherwise
    stand in for TuneDeck's trainer. (Python 3.10 has no `-P`: there the folder stays.)"""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, "-m", module, *args]


class LineServerError(RuntimeError):
    """The server gave no usable answer (died, timed out, or answered out of step)."""


class LineServer:
    def __init__(self, argv: list[str], *, env: dict[str, str], timeout_seconds: float,
                 memory_limit_bytes: int | None = None):
        self._argv, self._env = argv, env
        self._timeout_seconds = timeout_seconds
        self._memory_limit_bytes = memory_limit_bytes
        self._lock = threading.Lock()  # one question at a time
        self._process: subprocess.Popen | None = None
        self._asked = 0  # the id of the latest question, which its reply must carry

    def ask(self, request: dict) -> dict:
        with self._lock:
            self._asked += 1
            process = self._running()
            try:
                process.stdin.write(json.dumps({"id": self._asked, "request": request}) + "\n")
                process.stdin.flush()
            except BrokenPipeError:  # died since the last question: a fresh one, once
                self.stop()
                process = self._running()
                process.stdin.write(json.dumps({"id": self._asked, "request": request}) + "\n")
                process.stdin.flush()
            try:
                reply = json.loads(self._read_line(process))
                if reply.get("id") != self._asked:
                    raise ValueError(f"a reply to question {reply.get('id')}")
                return reply["answer"]
            except (LineServerError, ValueError, KeyError, AttributeError) as error:
                self.stop()  # out of step, timed out or dead: never reused, never waited twice
                raise LineServerError(str(error)) from None

    def stop(self) -> None:
        """Kill the server (safe from another thread while a question waits: it then fails
        with LineServerError)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _running(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, env=self._env,
                preexec_fn=self._limit_memory if self._memory_limit_bytes else None)
        return self._process

    def _limit_memory(self) -> None:
        import resource

        # Address space: a dataset too big for it fails the question (MemoryError in the
        # server), not the host's OOM killer picking the service or its jobs.
        resource.setrlimit(resource.RLIMIT_AS, (self._memory_limit_bytes, self._memory_limit_bytes))

    def _read_line(self, process: subprocess.Popen) -> str:
        reply: list[str] = []
        reader = threading.Thread(target=lambda: reply.append(process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(self._timeout_seconds)
        if not reply or not reply[0].strip():
            raise LineServerError(f"no answer within {self._timeout_seconds:g} s"
                                  if not reply else "the server stopped")
        return reply[0]


def serve_lines(answer: Callable[[dict], dict]) -> None:
    """Answer each `{"id", "request"}` line of stdin with `{"id", "answer"}` on the original
    stdout, until stdin closes. An answer that raises becomes `{"error": ...}`: one bad
    question must not end the server."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        question = json.loads(line)
        try:
            result = answer(question["request"])
        except MemoryError:
            result = {"error": "ran out of the memory it may use on this host"}
        except Exception as error:  # noqa: BLE001 - see the docstring
            result = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps({"id": question["id"], "answer": result}) + "\n")
        replies.flush()
