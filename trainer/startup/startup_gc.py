"""The cyclic garbage collector through a rank's imports.

A rank imports torch, transformers and their dependencies: some 300,000 long-lived objects
(modules, functions, classes), which the collector traverses again on every full
collection, six of them in a tiny job's start-up (0.6 s of a CPU rank, over 1 s on a
loaded machine). The entry point pauses collection before the imports; once the imports
are done, what they left is frozen (moved where the collector never looks) and collection
resumes, so neither the rest of the start-up nor the training loop scans it again.
"""
from __future__ import annotations

import gc


def pause_collection() -> None:
    gc.disable()


def resume_collection_after_imports() -> None:
    """Freeze what exists now and collect again, if `pause_collection` paused it (a caller
    that never paused it, such as a test calling train(), keeps its collector as it was).
    The cyclic garbage the imports made is frozen with the rest: under 1 MB measured
    (tuples, cells, functions), and no weights exist yet, so it is not worth a full
    collection's time."""
    if gc.isenabled():
        return
    gc.freeze()
    gc.enable()
