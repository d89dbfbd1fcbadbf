"""Send a live page only what changed since its last tick.

A timer-driven page re-sends every output each tick; the browser then re-renders each one,
and a chart re-renders its whole series even when not one point moved. Each output's update
is reduced to a digest of what it would show (a component update by its constructor
arguments, a frame by its cells); an output whose digest equals the one sent last tick is
answered with `gr.skip()`, which Gradio neither sends nor redraws. The digests live in the
browser session's `gr.State`, so a reload (a new session) gets everything once."""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import gradio as gr
import pandas as pd


def update_digest(value: Any) -> str:
    digest = hashlib.blake2b(digest_size=16)
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest, value: Any) -> None:
    if isinstance(value, pd.DataFrame):
        digest.update(repr((list(value.columns), [str(t) for t in value.dtypes],
                            value.shape)).encode())
        digest.update(pd.util.hash_pandas_object(value, index=False).values.tobytes())
    elif isinstance(value, gr.blocks.Block):
        digest.update(type(value).__name__.encode())
        _feed(digest, value.constructor_args)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(repr(value).encode())


def only_changed(updates: Sequence[Any], sent: Sequence[str] | None,
                 *, held: frozenset[int] = frozenset()) -> tuple[list[Any], tuple[str, ...]]:
    """(`updates` with every unchanged one replaced by `gr.skip()`, the digests now shown).

    `held`: positions not to send this tick (a chart the user cannot see); they keep the
    digest of what they last showed, so they are sent once they are seen again."""
    sent = tuple(sent or ())
    previous = sent if len(sent) == len(updates) else ("",) * len(updates)
    out, shown = [], []
    for position, update in enumerate(updates):
        if position in held:
            out.append(gr.skip())
            shown.append(previous[position])
            continue
        digest = update_digest(update)
        out.append(gr.skip() if digest == previous[position] else update)
        shown.append(digest)
    return out, tuple(shown)
