"""No event of the UI has a large layout block as an input or output: Gradio's front end
copies such a block with every component inside it on every later event (the job page's
one-second tick included), so the Tabs or the job page's body there cost the browser a
third of its time on a live job's page (docs/architecture.md, bench/live_view.py)."""
from __future__ import annotations

import gradio as gr

from app.ui.build_ui import build_ui
from tests.app.test_ui_handlers import RecordingCelery
from tunedeck.settings import Settings

# The New job form's option groups (the largest: FSDP's, 16 components) and its column
# pickers, and the Cancel confirmation, shown as the form's choices say; the job page's
# body held ~100, the Tabs all of the app.
SMALL_BLOCK_LIMIT = 16


def _components_inside(block) -> int:
    children = getattr(block, "children", None) or []
    return sum(1 + _components_inside(child) for child in children)


def test_no_event_takes_or_updates_the_tabs_or_a_large_layout_block(database, tmp_path):
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    layout_blocks = {}
    for function in blocks.fns.values():
        for block in [*function.inputs, *function.outputs]:
            if isinstance(block, gr.blocks.BlockContext):
                layout_blocks[block._id] = block
    assert not any(isinstance(block, gr.Tabs) for block in layout_blocks.values())
    too_large = {(type(block).__name__, block.elem_id, _components_inside(block))
                 for block in layout_blocks.values()
                 if _components_inside(block) > SMALL_BLOCK_LIMIT}
    assert not too_large, too_large
    # The job page's body and Try it panel are shown by the headline's class instead.
    shown_by_style = {"job-body", "job-try-it"}
    assert not shown_by_style & {block.elem_id for block in layout_blocks.values()}


def test_an_event_that_shows_no_progress_has_one_progress_target(database, tmp_path):
    """The front end re-applies a loading status to every component that was ever a progress
    target, on each status change of any event: the live page's refresh (~35 outputs) must
    not make them all targets (one_progress_target_when_hidden)."""
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    dependencies = blocks.get_config_file()["dependencies"]
    hidden = [dependency for dependency in dependencies
              if dependency["show_progress"] == "hidden" and len(dependency["outputs"]) > 1]
    refresh = max(hidden, key=lambda dependency: len(dependency["outputs"]))
    assert len(refresh["outputs"]) > 30  # the job page's refresh is among them
    targets = {len(dependency["show_progress_on"] or dependency["outputs"])
               for dependency in hidden}
    assert targets == {1}
    shown = [dependency for dependency in dependencies if dependency["show_progress"] != "hidden"]
    assert all(dependency["show_progress_on"] is None for dependency in shown)


def test_the_job_pages_redraw_while_another_tab_is_shown_changes_nothing(database, tmp_path):
    """The job page's timer keeps ticking while another tab is shown: its redraw then skips
    each output, one value an output (Gradio warns of, and drops, any more)."""
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    redraws = [function for function in blocks.fns.values()
               if getattr(function.fn, "__name__", "") == "refresh"
               and any(getattr(block, "elem_id", None) == "job-id" for block in function.inputs)]
    assert redraws
    for redraw in redraws:
        # job id, cancelling, smoothing, log scale, sent, in view, more charts open, tick
        values = redraw.fn("3", None, 0.0, False, {}, False, True, 4, None)
        assert len(values) == len(redraw.outputs)
        assert all(value == gr.skip() for value in values)
