"""The owner's observation ring: the last 4,096 events with increasing cursors.

Readers ask for everything after a cursor. One that fell behind the ring (its cursor is
older than the oldest event kept) gets ``gap: true`` so it re-syncs from the inventory
instead of silently missing exits (the backend then handles every exit it missed from
the owner's records). Events are kept packed (msgpack): as dicts, 10,000 of them held
about 4 MiB of the owner's memory, and a restart-heavy owner grew until the ring was
full; packed, 4,096 take about 0.5 MiB. A connected backend reads within milliseconds,
so the ring only has to cover a handoff or a backend restart.

Every event is at most ``EVENT_MAX`` bytes packed, so that the whole ring, with each
event's cursor, fits one answer under the frame limit: an app that sent thousands of
``STATUS=`` lines of 4 KiB filled the ring with 16 MiB, and the answer to the backend's
``observations.subscribe`` (at every handoff and reconnect) could not be sent (INTERNAL)
until the ring turned over; one launch failure naming a 1 MB argv[0] did the same alone.
What apps and commands fill (a notify message's fields, a failure's words) is cut to
fit, and the event says ``truncated``; what names the event (its kind, launch key, pid,
codes) is never cut.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

import msgpack

__all__ = ["EVENT_MAX", "RING_SIZE", "ObservationRing", "bounded"]

RING_SIZE = 4_096
EVENT_MAX = 960
"""Bytes an event takes packed, at most: RING_SIZE of them with their cursors (~3.8 MiB)
fit one answer under protocol.framing's 4 MiB."""
_NAMES = frozenset({"kind", "launch_key", "code", "activation", "key", "stack", "app"})
"""The strings that name an event, never cut (each bounded by the owner's schema); every
other string, and the maps and lists apps and commands fill, is cut to fit EVENT_MAX."""
_FLAGS = ("READY", "STOPPING", "RELOADING", "WATCHDOG")
"""A notify message's flags, kept whatever is cut: the backend acts on READY=1."""
_CUT_CHARS = (160, 16)


def test_knob(name: str, default: int) -> int:
    """A size the tests may shrink (``TENURE_OWNER_RING_SIZE``,
    ``TENURE_OWNER_SUBSCRIBER_BUFFER``) to force an observation gap; unset or invalid:
    ``default``."""
    try:
        value = int(os.environ.get(name) or default)
    except ValueError:
        return default
    return value if value > 0 else default


class ObservationRing:
    def __init__(self, size: int = RING_SIZE,
                 publish: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        size = min(size, RING_SIZE)   # more would not fit one answer
        self.size = size
        self._events: deque[tuple[int, bytes]] = deque(maxlen=size)
        self.cursor = 0          # cursor of the newest event (0: none yet)
        self.acked = 0           # highest cursor acknowledged by the epoch holder
        self._publish = publish

    def emit(self, kind: str, **fields: Any) -> int:
        """Append one event and push it to subscribers; returns its cursor."""
        self.cursor += 1
        event, packed = bounded({"kind": kind, "at": time.time(), **fields})
        self._events.append((self.cursor, packed))
        if self._publish is not None:
            self._publish(self.cursor, event)
        return self.cursor

    @property
    def oldest(self) -> int:
        return self._events[0][0] if self._events else self.cursor + 1

    def read(self, after: int, limit: int) -> dict[str, Any]:
        """Events with cursor > ``after``, at most ``limit``.

        ``gap`` is true when events after ``after`` were dropped from the ring, or when
        ``after`` is beyond this ring's newest cursor (the reader followed another owner
        instance): either way the reader must re-sync from the inventory.
        """
        gap = after > self.cursor or (after + 1 < self.oldest and after < self.cursor)
        skip = max(after + 1, self.oldest) - self.oldest
        out = [{"cursor": c, **msgpack.unpackb(e)}
               for c, e in islice(self._events, skip, skip + limit)]
        last = out[-1]["cursor"] if out else min(after, self.cursor)
        return {"events": out, "gap": gap, "cursor": last, "newest": self.cursor}

    def ack(self, cursor: int) -> int:
        self.acked = max(self.acked, min(cursor, self.cursor))
        return self.acked


def bounded(event: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """``event`` and its packed form, at most EVENT_MAX bytes: else every string but its
    _NAMES cut (to 160 characters, then to 16; lists to 8 items), or, if that is still
    too long, each such field left out but a notify message's _FLAGS; either way marked
    ``truncated``."""
    packed = msgpack.packb(event)
    if len(packed) <= EVENT_MAX:
        return event, packed
    for chars in _CUT_CHARS:
        cut = {k: v if k in _NAMES else _cut(v, chars) for k, v in event.items()}
        cut["truncated"] = True
        packed = msgpack.packb(cut)
        if len(packed) <= EVENT_MAX:
            return cut, packed
    cut = {k: v for k, v in cut.items() if k in _NAMES or not _fills(v)}
    fields = event.get("fields")
    if isinstance(fields, dict):
        cut["fields"] = {k: fields[k] for k in _FLAGS if k in fields
                         and isinstance(fields[k], str) and len(fields[k]) <= 8}
    return cut, msgpack.packb(cut)


def _fills(value: Any) -> bool:
    """Whether ``value`` is what an app or a command filled (text, a map, a list)."""
    return isinstance(value, str | bytes | dict | list | tuple)


def _cut(value: Any, chars: int) -> Any:
    if isinstance(value, str | bytes):
        return value[:chars]
    if isinstance(value, dict):   # keys are few and short (owner.notify's, ours): kept
        return {k: _cut(v, chars) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cut(v, chars) for v in value[:8]]
    return value
