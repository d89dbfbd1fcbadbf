"""The page side of a request a worker answers (a data check, a "Try it" prompt): the click
waits a while for the answer; while one is still coming, a timer asks again every second
without waiting, and stops once every answer is in. A page keeps what is still waiting (its
ids, or what its handler needs to ask again) in `waiting`, falsy once all answered."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

POLL_SECONDS = 1.0


@dataclass(frozen=True)
class RequestPolling:
    waiting: gr.State
    timer: gr.Timer

    @property
    def outputs(self) -> list:
        """What a handler's answer ends with: `still_waiting(waiting)`'s two values."""
        return [self.waiting, self.timer]

    def on_tick(self, handler: Callable[..., tuple], outputs: list) -> None:
        """Ask again with `handler(waiting, request)`, which returns values for `outputs`
        followed by `still_waiting(...)`; nothing is asked once nothing waits."""
        def tick(waiting, request: gr.Request):
            if not waiting:  # a tick already on its way as the last answer came in
                return (*(gr.skip() for _ in outputs), None, gr.Timer(active=False))
            return handler(waiting, request)

        self.timer.tick(tick, self.waiting, [*outputs, *self.outputs], show_progress="hidden")


def build_request_polling() -> RequestPolling:
    return RequestPolling(gr.State(None), gr.Timer(POLL_SECONDS, active=False))


def still_waiting(waiting: Any) -> tuple[Any, gr.Timer]:
    """The state and the timer's update for what is still waiting."""
    return waiting or None, gr.Timer(active=bool(waiting))
