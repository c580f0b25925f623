"""Counters per app (stack, app) kept by the journal since the owner started: lines and
bytes committed, lines dropped. They are bounded.

Why: an app name is given by whoever launches, and the counters outlive the app (a
Prometheus counter must not go back while its series lives). Never pruned, tens of
thousands of names (a launcher naming each launch anew) made ``metrics.read``'s answer
larger than a frame: INTERNAL for every scrape and ``status``. At most :data:`APPS_MAX`
apps are kept; past it, the app that counted last longest ago is forgotten, and should
it count again its series restarts from 0 (a counter reset to Prometheus). 2,000 apps
of the longest names (128 characters of four bytes each, twice) stay within 2 MiB of an
answer: half a frame, beside the launches it also carries.
"""

from __future__ import annotations

__all__ = ["APPS_MAX", "AppCounts"]

APPS_MAX = 2000

App = tuple[str, str]


class AppCounts:
    """Sums of ``width`` numbers per app, the last counted kept, at most ``limit`` apps.
    Not thread-safe: the journal calls it under its lock."""

    def __init__(self, width: int, limit: int = APPS_MAX) -> None:
        self._width = width
        self._limit = limit
        self._sums: dict[App, tuple[int, ...]] = {}

    def add(self, app: App, *amounts: int) -> None:
        """Add ``amounts`` (``width`` of them) to ``app``'s sums; it becomes the last
        counted (a dict keeps its order of insertion: the first is the oldest)."""
        sums = self._sums.pop(app, None)
        if sums is None:
            sums = (0,) * self._width
            if len(self._sums) >= self._limit:
                del self._sums[next(iter(self._sums))]
        self._sums[app] = tuple(s + a for s, a in zip(sums, amounts, strict=True))

    def sums(self) -> dict[App, tuple[int, ...]]:
        """A copy: app -> its sums."""
        return dict(self._sums)
