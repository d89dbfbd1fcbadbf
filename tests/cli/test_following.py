"""`watch` and `logs --follow` wait out a server whose database is unreachable: a real HTTP
server answering 503 with Retry-After, then 200, and the command's real call."""
from __future__ import annotations

import argparse
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli.server_calls import get_following
from tunedeck.db.outage import unreachable_body


class Answers(BaseHTTPRequestHandler):
    statuses: list[int] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        status = self.statuses.pop(0)
        body = json.dumps(unreachable_body() if status == 503 else
                          {"detail": "job 9 not found"} if status == 404 else {"id": 9}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if status == 503:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def arguments(server: str) -> argparse.Namespace:
    return argparse.Namespace(server=server, token=None)


def test_a_503_is_waited_out_said_once_and_the_answer_returned(server):
    Answers.statuses = [503, 503, 200]
    notes = io.StringIO()
    answer = get_following(arguments(server), "/api/jobs/9", refusal="cannot watch job 9",
                           notes=notes)
    assert answer == {"id": 9}
    lines = notes.getvalue().splitlines()
    assert lines[0] == ("the database is unreachable; retrying (HTTP 503): waiting, asking "
                        "again every 1 s (Ctrl-C stops)")
    assert lines[1].startswith("TuneDeck answers again after ") and len(lines) == 2


def test_any_other_refusal_still_ends_the_command(server):
    Answers.statuses = [404]
    with pytest.raises(SystemExit) as exited:
        get_following(arguments(server), "/api/jobs/9", refusal="cannot watch job 9",
                      notes=io.StringIO())
    assert str(exited.value) == "cannot watch job 9: job 9 not found"
