"""Signal handlers on an asyncio loop that a flood of signals cannot deadlock.

asyncio learns of a signal through a byte CPython's C handler writes to the loop's
wakeup socket. When that socket is full (thousands of SIGCHLD while the loop is busy,
as when the owner stops thousands of apps at once), the C handler, by default, queues
a report of the failed write: it takes the interpreter's pending-calls lock from inside
the signal handler, and a signal that lands while the same thread holds that lock waits
for itself forever. An owner stopping 5,000 apps hung so, every thread waiting on a
futex, its apps neither stopped nor watched. With ``warn_on_full_buffer=False`` a full
socket is skipped silently instead. The byte is lost either way (the report only said
so): the bytes already in the socket wake the loop, and for SIGCHLD a lost byte loses
nothing, since one run of its handler reaps every exited child; another signal whose
byte finds the socket full is lost as it was before.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

__all__ = ["add_signal_handler"]


def add_signal_handler(loop: asyncio.AbstractEventLoop, sig: int,
                       callback: Callable[..., object], *args: Any) -> None:
    """``loop.add_signal_handler(sig, callback, *args)``, then the wakeup socket set not
    to report a full buffer (asyncio sets it again, reporting, at every call)."""
    loop.add_signal_handler(sig, callback, *args)
    csock = getattr(loop, "_csock", None)   # the loop's end of its self-pipe
    fd = csock.fileno() if csock is not None else signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
