"""Live progress of long commands on a terminal: one line on stderr, rewritten in place
(``upgrade: draining  1.4s``), cleared when the command ends.

The command runs in the calling thread; a daemon thread asks ``probe`` (its own
connection, never the command's) every :data:`EVERY` seconds what is happening and
shows it. Only when stderr is a terminal and ``--json`` is off: piped and scripted
runs see nothing of it. A probe that fails shows the last answer, never an error: the
command itself reports what went wrong.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any, TextIO

__all__ = ["EVERY", "live"]

EVERY = 0.2


@contextmanager
def live(args: Any, label: str, probe: Callable[[], str | None],
         stream: TextIO | None = None) -> Iterator[None]:
    """Show ``label: <probe()>  <elapsed>`` while the body runs (see the module)."""
    out = sys.stderr if stream is None else stream
    if getattr(args, "json", False) or not out.isatty():
        yield
        return
    import threading  # only for a terminal: a few ms of every scripted command
    done = threading.Event()
    t0 = time.monotonic()

    def show() -> None:
        text = ""
        while not done.wait(EVERY):
            try:
                text = probe() or text
            except Exception:  # the command reports failures, not this line
                pass
            line = f"{label}: {text}  {time.monotonic() - t0:.1f}s"
            out.write("\r\x1b[K" + line[:200])
            out.flush()

    thread = threading.Thread(target=show, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(1.0)
        out.write("\r\x1b[K")
        out.flush()
