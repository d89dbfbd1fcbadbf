"""The page while the database is unreachable: every handler answers "no change" instead of
raising (Gradio would draw each raise as a red toast, one per widget and tick), other errors
stay errors, and the one banner shows while the database does not answer and hides once it
does: on a private PostgreSQL stopped as a crash would, and on SQLite that cannot be opened
or is no database."""
from __future__ import annotations

import asyncio
import inspect
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gradio as gr
import pytest
from sqlalchemy import exc, text

from app.ui.build_ui import build_ui
from app.ui.database_banner import (BANNER_ID, banner_updates, database_banner_updates)
from app.ui.database_outage import (answers_while_unreachable, unchanged,
                                    unchanged_while_unreachable, wait_out_database_outages)
from tests.app.test_ui_handlers import RecordingCelery
from tunedeck.db.engine import Database
from tunedeck.db.outage import DATABASE_UNREACHABLE, is_database_unreachable
from tunedeck.settings import Settings

SKIPPED = {"__type__": "update"}  # gr.skip() as Gradio sends it: the browser changes nothing


def unreachable_error() -> exc.OperationalError:
    return exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError(
        "unable to open database file"))


def run_to_end(coroutine) -> Any:
    """`coroutine`'s result, on an event loop of its own thread: a browser test's Playwright
    may hold this thread's loop (pytest runs a file's tests after another's in one process)."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


def run_event(blocks: gr.Blocks, function, inputs: list, state=None) -> list:
    """What Gradio sends the browser for one event, run as the server runs it (inputs
    preprocessed, gr.Request passed by the handler's signature, outputs postprocessed)."""
    request = gr.Request(username=None)
    answer = run_to_end(blocks.process_api(block_fn=function, inputs=inputs, state=state,
                                            request=request))
    return answer["data"]


def banner_answer(updates: tuple) -> tuple:
    """(whether the strip is made visible, hidden, or None: left as it is; the state sent)."""
    strip, shown = updates
    return (None if strip == gr.skip() else strip.constructor_args["visible"]), shown


def count_rows(database: Database) -> int:
    with database.transaction() as session:
        return session.execute(text("SELECT count(*) FROM jobs")).scalar_one()


@pytest.mark.parametrize("output_count", [0, 1, 3])
def test_a_handler_that_finds_the_database_unreachable_changes_none_of_its_outputs(
        output_count):
    requests = []

    def handler(text_value, request: gr.Request):
        requests.append(request)
        raise unreachable_error()

    with gr.Blocks() as blocks:
        box = gr.Textbox("shown before")
        number = gr.Number(3)
        kept = gr.State("kept")
        button = gr.Button()
        button.click(handler, box, [box, number, kept][:output_count])
    wait_out_database_outages(blocks)
    function, = blocks.fns.values()
    state = gr.blocks.SessionState(blocks)
    state[kept._id] = "kept"

    sent = run_event(blocks, function, ["shown before"], state)

    assert len(requests) == 1 and requests[0] is not None  # the signature still asks for it
    # (Gradio sends a State's value nowhere: None in its place.)
    assert sent == [SKIPPED, SKIPPED, None][:output_count]
    assert state[kept._id] == "kept"


def test_other_errors_stay_errors():
    def constraint_broken():
        raise exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE failed"))

    def bug():
        raise KeyError("a bug")

    for handler in (constraint_broken, bug):
        wrapped = unchanged_while_unreachable(handler, lambda: unchanged(1))
        with pytest.raises((exc.IntegrityError, KeyError)):
            wrapped()


def test_unchanged_answers_for_no_one_and_many_outputs():
    assert unchanged(0) is None
    assert unchanged(1) == gr.skip()
    assert unchanged(3) == (gr.skip(), gr.skip(), gr.skip())


def test_each_kind_of_handler_keeps_its_kind_and_signature():
    """Gradio calls a handler by its kind (awaits a coroutine, iterates a generator) and
    passes gr.Request where its signature asks."""
    def function(value, request: gr.Request):
        raise unreachable_error()

    def generator(value, request: gr.Request):
        yield "first"
        raise unreachable_error()

    async def coroutine(value, request: gr.Request):
        raise unreachable_error()

    async def async_generator(value, request: gr.Request):
        yield "first"
        raise unreachable_error()

    def answer():
        return "no change"

    originals = {handler.__name__: handler
                 for handler in (function, generator, coroutine, async_generator)}
    wrapped = {name: unchanged_while_unreachable(handler, answer)
               for name, handler in originals.items()}
    for name, handler in wrapped.items():
        assert inspect.signature(handler) == inspect.signature(originals[name]), name
        assert handler.__name__ == name
    assert wrapped["function"](1, None) == "no change"
    assert list(wrapped["generator"](1, None)) == ["first", "no change"]
    assert inspect.iscoroutinefunction(wrapped["coroutine"])
    assert run_to_end(wrapped["coroutine"](1, None)) == "no change"
    assert inspect.isasyncgenfunction(wrapped["async_generator"])

    async def drain():
        return [update async for update in wrapped["async_generator"](1, None)]

    assert run_to_end(drain()) == ["first", "no change"]


def test_a_handler_may_answer_its_own_no_change():
    """Submit's job id drives "open the new job": while unreachable it is None, not the
    job submitted before."""
    @answers_while_unreachable(lambda: (None, ""))
    def submit(value):
        raise unreachable_error()

    with gr.Blocks() as blocks:
        box = gr.Textbox()
        job_id = gr.State(7)
        gr.Button().click(submit, box, [job_id, box])
    wait_out_database_outages(blocks)
    function, = blocks.fns.values()
    state = gr.blocks.SessionState(blocks)
    state[job_id._id] = 7

    assert run_event(blocks, function, ["form"], state)[1] == ""
    assert state[job_id._id] is None


def test_sqlite_in_a_missing_folder_or_no_database_is_unreachable(tmp_path):
    """What a handler meets when SQLite cannot open its file (what root's chmod cannot
    stage), or the file is no database: no change, and the banner shows."""
    not_a_database = tmp_path / "garbage.db"
    not_a_database.write_bytes(b"not a SQLite file " * 100)
    for url in (f"sqlite:///{tmp_path / 'missing' / 'tunedeck.db'}",
                f"sqlite:///{not_a_database}"):
        database = Database(url)
        try:
            with pytest.raises(Exception) as raised:
                count_rows(database)
            assert is_database_unreachable(raised.value), (url, raised.value)
            handler = unchanged_while_unreachable(lambda: count_rows(database),
                                                  lambda: unchanged(1))
            assert handler() == gr.skip()
            assert banner_answer(database_banner_updates(database, False)) == (True, True)
        finally:
            database.dispose()


def test_banner_updates_only_when_what_it_says_changes():
    assert banner_answer(banner_updates(reachable=False, banner_shown=False)) == (True, True)
    assert banner_answer(banner_updates(reachable=True, banner_shown=True)) == (False, False)
    assert banner_updates(reachable=True, banner_shown=False) == (gr.skip(), gr.skip())
    assert banner_updates(reachable=False, banner_shown=True) == (gr.skip(), gr.skip())


def test_banner_shows_while_postgres_is_stopped_and_hides_once_it_is_back(private_postgres_server):
    database = Database(private_postgres_server.url)
    try:
        assert database_banner_updates(database, False) == (gr.skip(), gr.skip())
        count_rows(database)  # a pooled connection, cut by the stop below

        private_postgres_server.stop_immediately()
        assert banner_answer(database_banner_updates(database, False)) == (True, True)
        handler = unchanged_while_unreachable(lambda: count_rows(database),
                                              lambda: unchanged(2))
        assert handler() == (gr.skip(), gr.skip())

        private_postgres_server.start()
        assert banner_answer(database_banner_updates(database, True)) == (False, False)
        assert handler() == 0  # the next tick draws fresh data
    finally:
        database.dispose()


def test_the_page_has_the_banner_above_the_tabs_and_every_handler_waits_outages_out(
        database, tmp_path):
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    banner, = [block for block in blocks.blocks.values() if block.elem_id == BANNER_ID]
    assert banner.visible is False and DATABASE_UNREACHABLE in banner.value
    top = [child.elem_id for child in blocks.children]
    assert top.index(BANNER_ID) < top.index("tabs")
    backend = [function for function in blocks.fns.values() if function.fn is not None]
    assert backend and all(hasattr(function.fn, "__wrapped__") for function in backend)
