"""Drain one application pipe (stdout or stderr of one launch) into the journal.

The owner must read every pipe whether or not anyone reads the journal, so that an app
never blocks on a full pipe. A :class:`PipeDrainer` reads on the owner's asyncio loop
(``loop.add_reader``), never blocks it, and hands complete lines to
:meth:`owner.journal.Journal.append_split`, which only enqueues.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Final

from .journal import Journal, LogSource
from .linesplit import LineSplitter

__all__ = ["PARTIAL_DELAY", "READ_SIZE", "PipeDrainer"]

log = logging.getLogger(__name__)

READ_SIZE: Final = 65536
READS_PER_WAKEUP: Final = 4
"""Bounded so that one chatty app cannot starve the loop's other work."""
PARTIAL_DELAY: Final = 0.1


class PipeDrainer:
    """Owns ``fd`` (the read end of a pipe) from construction until EOF or :meth:`close`.

    Invariant: every byte read reaches the journal (``append_split``; ``append`` for a
    partial line), which may count it as dropped on overflow, in order; a partial line
    waits at most ``partial_delay`` seconds after the last completed line before it is
    recorded with the ``PARTIAL`` flag.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        journal: Journal,
        source: LogSource,
        stream: str,
        *,
        on_eof: Callable[[], None] | None = None,
        partial_delay: float = PARTIAL_DELAY,
        splitter: LineSplitter | None = None,
    ) -> None:
        """Set ``fd`` non-blocking and start watching it on ``loop``.

        Must be called on the loop's thread. Raises ``OSError`` if ``fd`` is not open
        (the fd is then left to the caller).
        """
        os.set_blocking(fd, False)
        self._loop = loop
        self._fd = fd
        self._journal = journal
        self._source = source
        self._stream = stream
        self._on_eof = on_eof
        self._delay = partial_delay
        self._splitter = splitter if splitter is not None else LineSplitter()
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self.bytes_read = 0
        loop.add_reader(fd, self._on_readable)

    @property
    def closed(self) -> bool:
        """True once EOF was seen or :meth:`close` ran."""
        return self._closed

    def _on_readable(self) -> None:
        lines: list[bytes | bytearray] = []
        flags: list[int] | None = None  # None while every flag is 0
        eof = False
        for _ in range(READS_PER_WAKEUP):
            try:
                data = os.read(self._fd, READ_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                log.warning("reading %s of %s failed: %s", self._stream, self._source, exc)
                eof = True
                break
            if not data:
                eof = True
                break
            self.bytes_read += len(data)
            got, got_flags = self._splitter.split(data)
            if got_flags is not None or flags is not None:
                if flags is None:
                    flags = [0] * len(lines)
                flags += [0] * len(got) if got_flags is None else got_flags
            lines += got
            if len(data) < READ_SIZE:
                break
        if lines:
            self._journal.append_split(self._source, self._stream, lines, flags)
        if eof:
            self._finish(notify=True)
        else:
            self._arm_partial(bool(lines))

    def _arm_partial(self, completed: bool) -> None:
        """(Re)start the partial-line timer when a new partial line begins."""
        if not self._splitter.pending_bytes:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif self._timer is None or completed:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_later(self._delay, self._flush_partial)

    def _flush_partial(self) -> None:
        self._timer = None
        record = self._splitter.take_partial()
        if record is not None:
            self._journal.append(self._source, self._stream, [record])

    def _finish(self, *, notify: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._flush_partial()
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        if notify and self._on_eof is not None:
            try:
                self._on_eof()
            except Exception:
                log.exception("on_eof callback for %s %s failed", self._source, self._stream)

    def close(self) -> None:
        """Stop watching, record any pending partial line and close the fd. Idempotent.

        Does not call ``on_eof`` (we closed it; the pipe did not end). Raises nothing.
        """
        self._finish(notify=False)
