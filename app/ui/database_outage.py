"""What the page's handlers do while the database is unreachable: change nothing.

A handler that reaches for an unreachable database (tunedeck/db/outage.py) raised, and Gradio
drew each raise as a red error toast: a page of timers stacked up one per widget and tick,
for what is one fact. Instead each handler answers "no change" (`gr.skip()` for each of its
outputs): the widgets keep what they last showed, the page's one banner (database_banner.py)
says why, and the first tick after the database is back fills them in. Every other error
stays the error it is.

Applied once to the built Blocks, every registered function wrapped, not handler by handler:
a handler added later cannot forget it."""
from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import gradio as gr

from tunedeck.db.outage import is_database_unreachable

log = logging.getLogger(__name__)

# Where answers_while_unreachable leaves a handler's own answer.
_OWN_ANSWER = "answer_while_database_unreachable"


def answers_while_unreachable(answer: Callable[[], Any]):
    """Mark a handler whose outputs drive the next step of its event chain (a job id to open,
    a tab to show) with what it answers while the database is unreachable: "no change" would
    leave the previous click's value in place, and the `.then` after it would act on it
    again (open the job submitted before)."""
    def mark(handler: Callable) -> Callable:
        setattr(handler, _OWN_ANSWER, answer)
        return handler
    return mark


def unchanged(output_count: int) -> Any:
    """An answer that changes none of a handler's `output_count` outputs."""
    if output_count == 0:
        return None
    if output_count == 1:
        return gr.skip()
    return tuple(gr.skip() for _ in range(output_count))


def wait_out_database_outages(blocks: gr.Blocks) -> None:
    """Every function of `blocks` answers "no change" (or its own answer) instead of
    raising an error that says the database is unreachable. Call once, after building."""
    for function in blocks.fns.values():
        if function.fn is None:  # a browser-only step (js=...)
            continue
        answer = getattr(function.fn, _OWN_ANSWER, None) \
            or functools.partial(unchanged, len(function.outputs))
        function.fn = unchanged_while_unreachable(function.fn, answer)


def unchanged_while_unreachable(handler: Callable, answer: Callable[[], Any]) -> Callable:
    """`handler`, answering `answer()` where it would raise a database-unreachable error (a
    generator yields it and ends). Of the same kind as `handler` (function, generator,
    coroutine, async generator) and, through `__wrapped__`, of its signature: Gradio reads
    from the signature where to pass gr.Request and gr.SelectData, and from the kind how to
    call it."""
    if inspect.isasyncgenfunction(handler):
        @functools.wraps(handler)
        async def async_generator(*args, **kwargs):
            try:
                async for update in handler(*args, **kwargs):
                    yield update
            except Exception as error:
                if not _unreachable(error, handler):
                    raise
                yield answer()
        return async_generator
    if inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def coroutine(*args, **kwargs):
            try:
                return await handler(*args, **kwargs)
            except Exception as error:
                if not _unreachable(error, handler):
                    raise
                return answer()
        return coroutine
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def generator(*args, **kwargs):
            try:
                yield from handler(*args, **kwargs)
            except Exception as error:
                if not _unreachable(error, handler):
                    raise
                yield answer()
        return generator

    @functools.wraps(handler)
    def function(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except Exception as error:
            if not _unreachable(error, handler):
                raise
            return answer()
    return function


def _unreachable(error: Exception, handler: Callable) -> bool:
    if not is_database_unreachable(error):
        return False
    # Debug only: every open page's every tick lands here for as long as the outage lasts;
    # the outage itself is logged and counted once by the web (app/monitoring).
    log.debug("%s changed nothing: the database is unreachable (%s)",
              getattr(handler, "__name__", handler), error)
    return True
