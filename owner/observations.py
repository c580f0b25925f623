"""The owner's observation ring: the last 4,096 events with increasing cursors.

Readers ask for everything after a cursor. One that fell behind the ring (its cursor is
older than the oldest event kept) gets ``gap: true`` so it re-syncs from the inventory
instead of silently missing exits (the backend then handles every exit it missed from
the owner's records). Events are kept packed (msgpack): as dicts, 10,000 of them held
about 4 MiB of the owner's memory, and a restart-heavy owner grew until the ring was
full; packed, 4,096 take about 0.5 MiB. A connected backend reads within milliseconds,
so the ring only has to cover a handoff or a backend restart.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

import msgpack

__all__ = ["ObservationRing"]

RING_SIZE = 4_096


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
        self.size = size
        self._events: deque[tuple[int, bytes]] = deque(maxlen=size)
        self.cursor = 0          # cursor of the newest event (0: none yet)
        self.acked = 0           # highest cursor acknowledged by the epoch holder
        self._publish = publish

    def emit(self, kind: str, **fields: Any) -> int:
        """Append one event and push it to subscribers; returns its cursor."""
        self.cursor += 1
        event = {"kind": kind, "at": time.time(), **fields}
        self._events.append((self.cursor, msgpack.packb(event)))
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
