"""Mappings shared by the importers: restart limits, durations, and shell detection.

supervisord (``startretries`` with ``startsecs``) and PM2 (``max_restarts`` with
``min_uptime``) both give up after a number of *quick* failures in a row: runs shorter than
an uptime threshold. tenure's ``start_limit`` instead gives up after more than ``burst``
starts within ``interval`` seconds, counted from the last run that stayed up
``backoff.reset_after`` seconds, which the importers set to that threshold.
:func:`quick_failure_limit` picks the interval that such a streak of quick failures takes
at most under the app's tenure backoff, so tenure gives up at the same start as the
source tool would, while an app whose runs outlive the threshold is restarted as often as
it crashes.
"""

from __future__ import annotations

import re

from ..config import MAX_COUNT, MAX_INSTANCES
from ..model import MAX_STOP_WAIT_S, Backoff, StartLimit

__all__ = ["MAX_INSTANCES", "MAX_STOP_WAIT_S", "needs_shell", "quick_failure_limit",
           "seconds", "too_many_starts"]

# characters and words with a meaning to sh beyond splitting words and quoting them
_SHELL_CHARS = re.compile(r"[|&;<>()$`*?\[\]{}~#\n]")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_WORDS = frozenset({
    "!", ".", "alias", "case", "cd", "eval", "exec", "export", "for", "if", "set",
    "source", "trap", "ulimit", "umask", "unset", "until", "while",
})


def quick_failure_limit(starts: int, uptime: float, backoff: Backoff) -> StartLimit:
    """``starts`` starts allowed in a row of runs shorter than ``uptime`` seconds: the
    interval is the longest such a streak can take with ``backoff`` (every run just under
    ``uptime``; the first restart at once, restart n >= 2 after
    ``min(initial * factor**(n-2), max)``), plus a second for the starts themselves.
    More starts than a start limit takes are cut to its most (:func:`too_many_starts`
    says so)."""
    burst = min(max(1, starts), MAX_COUNT)
    waits, n = 0.0, 2
    while n <= burst:
        wait = backoff.delay(n)
        if wait in (0.0, backoff.max) or backoff.factor == 1.0:
            waits += wait * (burst - n + 1)  # every later wait is the same: no loop
            break
        waits, n = waits + wait, n + 1
    return StartLimit(burst=burst, interval=round(burst * uptime + waits + 1.0, 3))


def too_many_starts(starts: int, key: str, value: int) -> str | None:
    """What to report when ``starts`` (``key`` = ``value`` in the source) passes what a
    start limit takes, else None."""
    if starts <= MAX_COUNT:
        return None
    return (f"{key} = {value:,} allows more starts than tenure's start_limit.burst takes "
            f"(at most {MAX_COUNT:,}); imported as {MAX_COUNT:,}")


def seconds(milliseconds: float) -> float:
    """Milliseconds as seconds, rounded to the millisecond (so 1600 ms is 1.6 s)."""
    return round(milliseconds / 1000.0, 3)


def needs_shell(command: str) -> bool:
    """Whether ``command`` uses shell syntax beyond words and quotes: operators,
    redirections, expansions, globs, comments, a leading ``VAR=value`` or a shell builtin
    such as ``cd`` or ``exec``. Quotes and backslashes alone do not need a shell: the
    command is then split like sh would split it."""
    if _SHELL_CHARS.search(command):
        return True
    first = command.split(None, 1)[0] if command.split() else ""
    return bool(_ASSIGNMENT.match(first)) or first in _SHELL_WORDS
