"""The owner's observation ring: the last 10,000 events with increasing cursors.

Readers ask for everything after a cursor. One that fell behind the ring (its cursor is
older than the oldest event kept) gets ``gap: true`` so it re-syncs from the inventory
instead of silently missing exits.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

__all__ = ["ObservationRing"]

RING_SIZE = 10_000


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
        self._events: deque[tuple[int, dict[str, Any]]] = deque(maxlen=size)
        self.cursor = 0          # cursor of the newest event (0: none yet)
        self.acked = 0           # highest cursor acknowledged by the epoch holder
        self._publish = publish

    def emit(self, kind: str, **fields: Any) -> int:
        """Append one event and push it to subscribers; returns its cursor."""
        self.cursor += 1
        event = {"kind": kind, "at": time.time(), **fields}
        self._events.append((self.cursor, event))
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
        out = [{"cursor": c, **e} for c, e in islice(self._events, skip, skip + limit)]
        last = out[-1]["cursor"] if out else min(after, self.cursor)
        return {"events": out, "gap": gap, "cursor": last, "newest": self.cursor}

    def ack(self, cursor: int) -> int:
        self.acked = max(self.acked, min(cursor, self.cursor))
        return self.acked
