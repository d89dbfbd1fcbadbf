"""The page's one word on a database outage: a warning strip under the title, "the database
is unreachable; retrying", shown while the database does not answer and gone once it does.

Its own timer asks the database every CHECK_SECONDS (`SELECT 1`) whichever tab is shown, the
New job form included, whose widgets never refresh: the handlers that failed meanwhile
changed nothing (database_outage.py), so this strip is all the page says about it, and a
Submit that did nothing must find it there. So an idle page sends one small event every
CHECK_SECONDS; while what the strip says holds, nothing of it is redrawn."""
from __future__ import annotations

import html

import gradio as gr

from tunedeck.db.outage import DATABASE_UNREACHABLE, database_reachable

# A PostgreSQL stopped refuses connections at once, so the strip shows within about this
# long; SQLite's locked file answers only after its busy timeout (tunedeck/db/engine.py).
CHECK_SECONDS = 2.0
BANNER_ID = "database-banner"
BANNER_HTML = (f'<div class="database-banner" role="alert"><span aria-hidden="true">⚠</span> '
               f"{html.escape(DATABASE_UNREACHABLE)}</div>")


def build_database_banner(*, database) -> None:
    """The strip, hidden, where it is built (above the tabs), and the timer that shows and
    hides it."""
    banner = gr.HTML(BANNER_HTML, visible=False, elem_id=BANNER_ID)
    shown = gr.State(False)  # what this browser's strip shows now: sent only when it changes
    timer = gr.Timer(CHECK_SECONDS)

    def check(banner_shown: bool):
        return database_banner_updates(database, banner_shown)

    # No limit on ticks at once (Gradio's default is one at a time across all browsers): one
    # browser's tick waiting out a locked SQLite file must not hold up another's strip.
    timer.tick(check, shown, [banner, shown], show_progress="hidden", concurrency_limit=None)


def database_banner_updates(database, banner_shown: bool) -> tuple:
    """One tick: ask `database` (a tunedeck.db.engine.Database) whether it answers, and
    (the strip's update, whether it is shown)."""
    return banner_updates(database_reachable(database), banner_shown)


def banner_updates(reachable: bool, banner_shown: bool) -> tuple:
    """(the strip's update, whether it is shown): no change while it already says what is so."""
    wanted = not reachable
    if wanted == bool(banner_shown):
        return gr.skip(), gr.skip()
    return gr.HTML(visible=wanted), wanted
