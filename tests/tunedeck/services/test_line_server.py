"""tunedeck/services/line_server.py: a helper process kept between questions, that prints cannot
confuse, that a too-big or too-slow question cannot take the asking service down with."""
import os
import sys

import pytest

from tunedeck.services.line_server import LineServer, LineServerError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A server whose answer to {"n": N} is N+1, that prints noise first, allocates {"megabytes"},
# sleeps {"sleep"} seconds, and raises for {"fail"}.
SERVER = """
import os, time
from tunedeck.services.line_server import serve_lines

def answer(request):
    print("noise on stdout")
    os.write(1, b"native noise on fd 1\\n")
    if request.get("fail"):
        raise KeyError("no such thing")
    if request.get("megabytes"):
        bytearray(request["megabytes"] * 2**20)
    time.sleep(request.get("sleep", 0))
    return {"n": request["n"] + 1, "pid": os.getpid()}

serve_lines(answer)
"""


def server(**options) -> LineServer:
    return LineServer([sys.executable, "-c", SERVER], env={**os.environ, "PYTHONPATH": REPO},
                      **{"timeout_seconds": 10, **options})


def test_answers_come_from_one_kept_process_whatever_it_prints():
    asking = server()
    first, second = asking.ask({"n": 1}), asking.ask({"n": 41})
    assert (first["n"], second["n"]) == (2, 42) and first["pid"] == second["pid"] == asking.pid
    assert asking.ask({"n": 0, "fail": True}) == {"error": "KeyError: 'no such thing'"}
    assert asking.ask({"n": 2})["pid"] == first["pid"]  # a failed question keeps the server
    asking.stop()


def test_a_question_past_the_memory_cap_fails_alone():
    asking = server(memory_limit_bytes=1024 * 2**20)
    assert asking.ask({"n": 1, "megabytes": 4096}) == {
        "error": "ran out of the memory it may use on this host"}
    assert asking.ask({"n": 1})["n"] == 2
    asking.stop()


def test_a_slow_question_is_ended_and_the_next_starts_a_fresh_server():
    asking = server(timeout_seconds=1)
    pid = asking.ask({"n": 1})["pid"]
    with pytest.raises(LineServerError, match="no answer within 1 s"):
        asking.ask({"n": 1, "sleep": 30})
    assert asking.pid is None
    assert asking.ask({"n": 1})["pid"] != pid
    asking.stop()
