"""Lines tenure itself writes into an application's log stream.

When a launch fails (the owner writes it) or the backend gives up on an app (the start
limit; the backend asks through ``logs.note``, capability ``logNotes`` 1) one line goes
into that app's journal source, so whoever reads the app's logs sees why it is not
running. Such a record is on stream ``stderr``, its data starts with ``tenure: `` and it
carries the :data:`TENURE` flag, which no pipe drain ever sets: an app can print the same
words but cannot make a record with that flag.
"""

from __future__ import annotations

from typing import Final

from .journal import Journal, LogSource

__all__ = ["MAX_NOTE", "PREFIX", "TENURE", "write_note"]

TENURE: Final = 4
"""Journal record flag (beside CONTINUED 1 and PARTIAL 2, owner.linesplit): written by
tenure, not by the app. Never renumbered."""
PREFIX: Final = b"tenure: "
MAX_NOTE: Final = 1000
"""Longest note text in characters (a note is one short line, never a dump)."""


def write_note(journal: Journal, source: LogSource, text: str) -> bool:
    """Enqueue one tenure line for ``source`` (newlines and the excess over
    :data:`MAX_NOTE` replaced); returns whether the journal accepted it (a full queue
    counts it as dropped, as for any line). Never blocks."""
    line = " ".join(text.split())[:MAX_NOTE]
    return journal.append(source, "stderr",
                          [(PREFIX + line.encode(errors="replace"), TENURE)]) == 1
