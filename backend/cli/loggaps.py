"""What ``tenure logs`` says of records log retention removed before they were read.

Record ids are shared by every app, so a jump in a source's ids says nothing by itself
(other apps' records lie between). The owner's answer does: its ``pruned`` names, per
source (stack, app, instance, stream), the highest id retention deleted above the id
the page was read from (owner.journalpruned): records that were captured, then pruned
by the app's budget before this reader got to them (a follower that fell behind, a
``--since`` or ``-n`` reaching back past what is kept). Each is said once on stderr, an
instance's streams on one line; with ``--json`` the next record printed of that source
also carries it (logprint.Printer.gaps). The journal file read while tenure is not
running says it too, from the marks the owner stored with the journal. An answer without
``pruned`` (an owner that predates it) says nothing.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["Gap", "RetentionGaps"]

Key = tuple[str, str, int, str]   # stack, app, instance, stream
Gap = dict[str, int]              # {"after": A, "last_id": P}: removed among A+1..P


class RetentionGaps:
    """Says each removal once (see the module docstring); ``follow`` words how the read
    goes on. Keeps, per source, the highest id said so far, so a removal a page reports
    again (a page cut before it, a merged page of several sources) is not said twice."""

    def __init__(self, follow: bool) -> None:
        self._follow = follow
        self._told: dict[Key, int] = {}

    def take(self, page: dict[str, Any]) -> dict[Key, Gap]:
        """Say on stderr what of ``page``'s ``pruned`` was not said yet, and return it
        per source: the removed records lie among ids ``after``+1..``last_id``. Raises
        nothing for an answer without ``pruned``."""
        new: dict[Key, Gap] = {}
        for g in page.get("pruned") or ():
            key = (g["stack"], g["app"], g["instance"], g["stream"])
            after = max(self._told.get(key, 0), int(g["after"]))
            if int(g["last_id"]) <= after:
                continue
            self._told[key] = int(g["last_id"])
            new[key] = {"after": after, "last_id": int(g["last_id"])}
        if new:
            self._say(new)
        return new

    def _say(self, new: dict[Key, Gap]) -> None:
        """One stderr line per instance (its streams' ranges joined)."""
        spans: dict[str, tuple[int, int]] = {}
        for (stack, app, instance, _), gap in sorted(new.items()):
            name = f"{stack}/{app}/{instance}"
            lo, hi = spans.get(name, (gap["after"] + 1, gap["last_id"]))
            spans[name] = (min(lo, gap["after"] + 1), max(hi, gap["last_id"]))
        then = "following on" if self._follow else "printing those kept after them"
        for name, (lo, hi) in spans.items():
            ids = f"id {lo}" if lo == hi else f"among ids {lo}-{hi}"
            sys.stderr.write(f"tenure: logs: records of {name} were removed by log retention "
                             f"before they were read ({ids}); {then}\n")
        sys.stderr.flush()
