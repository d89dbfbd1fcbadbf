"""The embedded broker's transport: kombu's filesystem transport, with each message file
written whole before it appears in the queue folder.

kombu's own `_put` creates the message file in the queue folder and then writes it, and its
`_get` moves away any file it lists there and reads it at once: a worker that lists the
folder between the two read an empty message ("Expecting value: line 1 column 1"), its
consumer stopped, and `tunedeck up` with it. Here the message is written under a name of
its own in a sibling folder on the same filesystem and renamed into the queue folder, which
is atomic: a reader sees no file or the whole one.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

WRITING_FOLDER = "writing"  # beside the queue folder, under the broker folder


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        queue_folder = Path(self.data_folder_out)
        writing = queue_folder.parent / WRITING_FOLDER
        writing.mkdir(exist_ok=True)
        partial = writing / name
        try:
            partial.write_bytes(str_to_bytes(dumps(payload)))
            os.replace(partial, queue_folder / name)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise filesystem.ChannelError(
                f"Cannot add file {name!r} to directory {queue_folder}") from exc


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
