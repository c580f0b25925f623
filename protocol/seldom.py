"""Trouble said seldom: count each occurrence of one kind, and log the first at once and
then at most once per interval, with how many happened since the last line. A flood of
the same failure (connections refused, accepts failing, messages dropped) then costs a
line a minute, not a line each."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Seldom"]


class Seldom:
    """One kind of trouble. ``clock`` is ``time.monotonic`` or a fake."""

    def __init__(self, every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self.total = 0           # occurrences, ever
        self._since = 0          # occurrences not said yet
        self._said: float | None = None

    def due(self) -> int:
        """Count one occurrence; return how many to say now (this one and those since
        the last line), or 0 while the last line is younger than ``every``."""
        self.total += 1
        self._since += 1
        now = self.clock()
        if self._said is not None and now - self._said < self.every:
            return 0
        said, self._since, self._said = self._since, 0, now
        return said

    def ended(self) -> bool:
        """The trouble stopped (a write worked again): whether any occurred since the
        last end, to say so. The next occurrence is said at once."""
        was = self._said is not None
        self._since, self._said = 0, None
        return was
