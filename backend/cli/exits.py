"""The exit statuses of every ``tenure`` command, in one table (docs/cli.md, "Exit
statuses", lists the same). Commands return a member, never a bare number."""

from __future__ import annotations

import enum

__all__ = ["Exit"]


class Exit(enum.IntEnum):
    OK = 0            # success
    ERROR = 1         # tenure reported an error; its code is printed
    USAGE = 2         # usage error, or a request rejected as malformed (BAD_REQUEST)
    UNREACHABLE = 3   # a daemon is not reachable (CONNECT_FAILED, BACKEND_UNAVAILABLE)
    UNSETTLED = 4     # the command ran but the instances did not settle in --timeout
    STALE = 5         # status, inspect, backend status: the answer is not current
    INTERRUPTED = 130  # Ctrl-C
