"""A live page's tick sends only the outputs whose content changed."""
from __future__ import annotations

import gradio as gr
import pandas as pd

from app.ui.unchanged_updates import only_changed, update_digest


def frame(*losses):
    return pd.DataFrame({"step": list(range(1, len(losses) + 1)), "loss": list(losses)})


def is_skip(update) -> bool:
    return isinstance(update, dict) and update == gr.skip()


def test_a_digest_follows_what_an_output_would_show():
    assert update_digest(frame(1.0, 0.5)) == update_digest(frame(1.0, 0.5))
    assert update_digest(frame(1.0, 0.5)) != update_digest(frame(1.0, 0.4))
    assert update_digest(frame(1.0, 0.5)) != update_digest(frame(1.0, 0.5, 0.25))
    assert update_digest(gr.LinePlot(frame(1.0), visible=True)) == \
        update_digest(gr.LinePlot(frame(1.0), visible=True))
    assert update_digest(gr.LinePlot(frame(1.0), visible=True)) != \
        update_digest(gr.LinePlot(frame(1.0), visible=False))
    assert update_digest(gr.LinePlot(frame(1.0))) != update_digest(gr.BarPlot(frame(1.0)))
    assert update_digest("step 3 / 10") != update_digest("step 4 / 10")


def test_a_tick_skips_what_did_not_change_and_sends_what_did():
    first, shown = only_changed(["step 1", frame(1.0), gr.Timer(active=True)], None)
    assert not any(is_skip(update) for update in first)  # a new session gets everything

    second, shown = only_changed(["step 2", frame(1.0), gr.Timer(active=True)], shown)
    assert second[0] == "step 2"
    assert is_skip(second[1]) and is_skip(second[2])

    third, _ = only_changed(["step 2", frame(1.0, 0.5), gr.Timer(active=False)], shown)
    assert is_skip(third[0])
    assert isinstance(third[1], pd.DataFrame) and not is_skip(third[2])


def test_a_held_output_is_not_sent_and_is_sent_once_seen_again():
    _, shown = only_changed(["a", frame(1.0)], None)
    held, shown = only_changed(["a", frame(1.0, 0.5)], shown, held=frozenset({1}))
    assert is_skip(held[1])
    seen, _ = only_changed(["a", frame(1.0, 0.5)], shown)
    assert isinstance(seen[1], pd.DataFrame)  # what it shows is still the old frame


def test_outputs_of_another_shape_start_again():
    _, shown = only_changed(["a", "b"], None)
    again, _ = only_changed(["a", "b", "c"], shown)
    assert again == ["a", "b", "c"]
