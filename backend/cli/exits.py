"""The exit statuses of every ``tenure`` command, in one table (docs/cli.md, "Exit
statuses", lists the same). Commands return a member, never a bare number."""

from __future__ import annotations

import enum

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Exit", "current"]


class Exit(enum.IntEnum):
    OK = 0            # success
    ERROR = 1         # tenure reported an error; its code is printed
    USAGE = 2         # usage error, or a request rejected as malformed (BAD_REQUEST)
    UNREACHABLE = 3   # a daemon is not reachable (CONNECT_FAILED, BACKEND_UNAVAILABLE,
    #                   OWNER_UNAVAILABLE)
    UNSETTLED = 4     # the command ran but the instances did not settle in --timeout
    STALE = 5         # status, inspect, backend status, top: the answer is not current
    INTERRUPTED = 130  # Ctrl-C


def current(answer: dict[str, Any]) -> Exit:
    """STALE when the answer says the backend's view of the owner is not current."""
    return Exit.OK if (answer.get("owner_link") or {}).get("current", True) else Exit.STALE
