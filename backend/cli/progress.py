"""Live progress of long commands on a terminal: one line on stderr, rewritten in place
(``upgrade: draining  1.4s``), cleared when the command ends.

The command runs in the calling thread; a daemon thread asks ``probe`` (its own
connection, never the command's) every :data:`EVERY` seconds what is happening and
shows it. Only when stderr is a terminal and ``--json`` is off: piped and scripted
runs see nothing of it. A probe that fails shows the last answer, never an error: the
command itself reports what went wrong.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from threading import Event
    from typing import Any, TextIO

__all__ = ["EVERY", "STOPPED_SAY_S", "live", "said_if_stopped"]

EVERY = 0.2


@contextmanager
def live(args: Any, label: str, probe: Callable[[], str | None],
         stream: TextIO | None = None) -> Iterator[None]:
    """Show ``label: <probe()>  <elapsed>`` while the body runs (see the module)."""
    out = sys.stderr if stream is None else stream
    if getattr(args, "json", False) or not out.isatty():
        yield
        return
    t0 = time.monotonic()

    def show(done: Event) -> None:
        text = ""
        while not done.wait(EVERY):
            try:
                text = probe() or text
            except Exception:  # the command reports failures, not this line
                pass
            line = f"{label}: {text}  {time.monotonic() - t0:.1f}s"
            out.write("\r\x1b[K" + line[:_width(out)])
            out.flush()

    try:
        with _beside(show, "progress"):
            yield
    finally:
        out.write("\r\x1b[K")
        out.flush()


def _width(out: TextIO) -> int:
    """How much of the progress line fits the terminal's one row (the line is redrawn
    by a carriage return, which goes back only to the start of its last row: a longer
    one left a stale row per redraw); 200 at most."""
    try:
        columns = os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return LINE_MAX
    # 0: a terminal whose size nobody set (a pty opened by a program): unknown
    return max(10, min(LINE_MAX, columns - 1)) if columns > 0 else LINE_MAX


LINE_MAX = 200
"""The longest progress line (and the one written where no width is known)."""


@contextmanager
def _beside(run: Callable[[Event], None], name: str) -> Iterator[None]:
    """Run ``run(done)`` in a daemon thread while the body runs; ``done`` is set when
    the body ends, and the thread is given a second to see it. (threading is imported
    only here: a few ms of every scripted command that never needs it.)"""
    import threading
    done = threading.Event()
    thread = threading.Thread(target=run, args=(done,), name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(1.0)


STOPPED_SAY_S = 5.0
"""Seconds a daemon a command waits on may be stopped before the command says so."""


@contextmanager
def said_if_stopped(who: str, pid_of: Callable[[], int | None],
                    stream: TextIO | None = None) -> Iterator[None]:
    """While the body waits on daemon ``who`` (``pid_of()``: its pid, once known), say
    once on stderr, terminal or not, when that process has been stopped (SIGSTOP, a
    debugger) for :data:`STOPPED_SAY_S`: the answer cannot come until it is continued,
    and the wait (up to the call's own timeout, ten minutes for an upgrade) was silent."""
    out = sys.stderr if stream is None else stream

    def watch(done: Event) -> None:
        from protocol.procfs import described, read_stat
        since: float | None = None
        while not done.wait(1.0):
            pid = pid_of()
            st = read_stat(pid) if pid is not None else None
            if pid is None or st is None or not st.stopped:
                since = None
                continue
            since = time.monotonic() if since is None else since
            if time.monotonic() - since >= STOPPED_SAY_S:
                out.write(("\r\x1b[K" if out.isatty() else "") +   # one write: the
                          f"tenure: the {who} does not answer: "       # progress line
                          f"{described(pid, st)}; waiting for its answer (Ctrl-C "  # too
                          "stops waiting; what was asked goes on once it is continued)\n")
                out.flush()
                return

    with _beside(watch, "stopped-watch"):
        yield
