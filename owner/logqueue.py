"""The journal's queue between the pipe drainers and the writer thread: bounded in bytes,
and fair between apps.

Why fair: with one shared bound, an app that writes faster than the disk fills the
queue and every other app's lines are then dropped with its own. Here, when the queue is
full, room for an app is made by dropping the newest queued lines of the app that holds
the most (longest-queue drop): an app whose share is smaller than another's never loses
a line to it. An app loses lines only while it holds at least as much as every other
app, or when its own lines alone do not fit.

An append's lines are held as two parallel lists rather than one ``(data, flags)`` pair
per line: the data of each line, and their flags, or ``None`` when every flag is 0 (the
common case; see :meth:`owner.linesplit.LineSplitter.split`).

Not thread-safe: :class:`owner.journalintake.Intake` calls it under its condition.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .journalsource import LogSource

__all__ = ["APPEND_OVERHEAD", "LINE_OVERHEAD", "FairQueue", "Queued"]

LINE_OVERHEAD: Final = 96
"""Bytes charged per queued line on top of its data: what holding it costs besides,
so that a queue of short lines stays within its bound. On CPython 3.11 (64-bit), a
line is a ``bytearray`` (owner.linesplit): its object is ``sys.getsizeof(bytearray())``
= 56 bytes, 64 in pymalloc's 16-byte size classes; its buffer, allocated apart, holds the
data and a NUL, rounded up to 16 (up to 16 more than the data); and a slot of its
append's list, 8 bytes and up to 1/8 more for the list's growth: 89 bytes besides the
data at most (tracemalloc, which sees no rounding, counts 65). A line as ``bytes``
costs less (33 bytes and the data, rounded up to 16). It was 64: a queue full of one-byte
lines held ~40% more than its bound."""

APPEND_OVERHEAD: Final = 320
"""Bytes charged per queued append on top of its lines: its Queued (104 bytes,
``sys.getsizeof``; 112 allocated), its list of lines (56 bytes and its slots' spare
room), its timestamp (a float, 24), its sequence number and cost (ints, 28 each), and
a slot in each of two deques (16), each rounded up to 16: about 300. A queue of
appends of one line each (many quiet apps, a writer held up) held 5.6 times its
bound without it."""

AppKey = tuple[str, str]
Data = list[bytes | bytearray]
"""The data of each line of an append, in order."""
Flags = list[int] | None
"""The flags of each line (parallel to its data), or None when they are all 0."""


class Queued:
    """One append waiting for the writer: ``lines[i]`` is the data of its line i and
    ``flags[i]`` its flags (``flags`` is None when all are 0). ``lines`` is emptied when
    it is dropped."""

    __slots__ = ("cost", "data_bytes", "dropped", "flags", "lines", "seq", "source",
                 "stream", "ts")

    def __init__(self, source: LogSource, stream: str, ts: float, lines: Data,
                 flags: Flags, data_bytes: int, cost: int, seq: int) -> None:
        self.source, self.stream, self.ts, self.lines = source, stream, ts, lines
        self.flags, self.data_bytes, self.cost, self.seq = flags, data_bytes, cost, seq
        self.dropped = False


def fit(lines: Data, room: int) -> tuple[int, int, int]:
    """How many leading ``lines`` fit in ``room`` as one append, their data bytes and
    cost (APPEND_OVERHEAD included; nothing fits when that alone does not)."""
    used, data, n = APPEND_OVERHEAD, 0, 0
    for d in lines:
        c = len(d) + LINE_OVERHEAD
        if used + c > room:
            break
        used += c
        data += len(d)
        n += 1
    return n, data, used


class FairQueue:
    """Appends in arrival order, at most ``max_bytes`` of cost (data plus per-line and
    per-append overhead: what they take in memory) counting the batch being written.
    See the module docstring."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.queued_bytes = 0  # queued or being written
        self._peak = 0         # the most queued since the queue was last empty
        self._fifo: collections.deque[Queued] = collections.deque()
        self._held: dict[AppKey, int] = {}  # bytes per app, queued or being written
        self._waiting: dict[AppKey, collections.deque[Queued]] = {}  # evictable ones

    def __bool__(self) -> bool:
        return bool(self._fifo)

    def offer(self, source: LogSource, stream: str, ts: float, lines: Data, seq: int,
              flags: Flags = None) -> tuple[int, dict[LogSource, int], int]:
        """Queue what fits of ``lines`` (a prefix; ``flags`` as in :class:`Queued`) as
        append number ``seq`` (increasing), making room by dropping the newest lines of
        apps that hold more than this one would. Returns how many lines were accepted,
        the lines dropped per source (this one's included) and how many queued appends
        were dropped whole to make room. The lists are kept, not copied."""
        app = (source.stack, source.app)
        data_bytes = sum(map(len, lines))
        cost = data_bytes + LINE_OVERHEAD * len(lines) + APPEND_OVERHEAD
        lost: dict[LogSource, int] = {}
        room = self.max_bytes - self.queued_bytes
        evicted = 0
        if cost > room:
            freed, evicted = self._evict(app, self._held.get(app, 0) + cost, cost - room,
                                         lost)
            room += freed
        if cost > room:
            n, data_bytes, cost = fit(lines, room)
            if n < len(lines):
                lost[source] = lost.get(source, 0) + len(lines) - n
            if not n:
                return 0, lost, evicted
            lines = lines[:n]
            flags = None if flags is None else flags[:n]
        item = Queued(source, stream, ts, lines, flags, data_bytes, cost, seq)
        self._fifo.append(item)
        self._waiting.setdefault(app, collections.deque()).append(item)
        self._held[app] = self._held.get(app, 0) + cost
        self.queued_bytes += cost
        if self.queued_bytes > self._peak:
            self._peak = self.queued_bytes
        return len(lines), lost, evicted

    def _evict(self, app: AppKey, would_hold: int, need: int,
               lost: dict[LogSource, int]) -> tuple[int, int]:
        """Drop the newest waiting appends of the app holding the most, while it holds
        more than ``would_hold``, until ``need`` bytes are free. Returns the bytes freed
        and the number of appends dropped."""
        freed = evicted = 0
        while freed < need:
            victim = max(self._held, key=self._held.__getitem__, default=None)
            if victim is None or victim == app or self._held[victim] <= would_hold:
                break
            waiting = self._waiting.get(victim)
            if not waiting:
                break  # all it holds is being written: nothing to take back
            item = waiting.pop()
            item.dropped = True
            lost[item.source] = lost.get(item.source, 0) + len(item.lines)
            item.lines, item.flags = [], None
            self._release(victim, item.cost)
            freed += item.cost
            evicted += 1
        return freed, evicted

    def oldest_seq(self) -> int | None:
        """The sequence number of the oldest append still queued (None if none)."""
        while self._fifo and self._fifo[0].dropped:
            self._fifo.popleft()
        return self._fifo[0].seq if self._fifo else None

    def take(self, max_rows: int, max_bytes: int | None = None) -> list[Queued]:
        """The oldest appends, at least one and up to ``max_rows`` lines and ``max_bytes``
        of data in all (one append may pass either alone), for the writer; their bytes
        stay counted until :meth:`written`."""
        batch: list[Queued] = []
        rows = nbytes = 0
        while self._fifo and rows < max_rows and (max_bytes is None or nbytes < max_bytes):
            item = self._fifo.popleft()
            if item.dropped:
                continue
            self._waiting[(item.source.stack, item.source.app)].popleft()
            batch.append(item)
            rows += len(item.lines)
            nbytes += item.data_bytes
        return batch

    def written(self, batch: list[Queued]) -> int:
        """Release the bytes of a batch the writer is done with (written or lost).
        Returns the largest backlog since the queue was last empty when this emptied
        it, else 0."""
        for item in batch:
            self._release((item.source.stack, item.source.app), item.cost)
        if self.queued_bytes:
            return 0
        peak, self._peak = self._peak, 0
        return peak

    def _release(self, app: AppKey, cost: int) -> None:
        self.queued_bytes -= cost
        left = self._held[app] - cost
        if left:
            self._held[app] = left
        else:
            del self._held[app]
            if not self._waiting.get(app):
                self._waiting.pop(app, None)
