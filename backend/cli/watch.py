"""Redraw a view every few seconds until Ctrl-C, like watch(1): ``status -w`` and
``tenure top``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from protocol.errors import TenureError

__all__ = ["error_frame", "redraw"]


def redraw(title: str, every: float, tty: bool, draw: Callable[[], int],
           once: bool = False) -> int:
    """Call ``draw`` (it prints one view and returns its exit code) every ``every``
    seconds until Ctrl-C (``once``: a single view). On a terminal the screen is cleared
    first and a title line with the time is printed; piped, views are separated by a
    blank line. Returns the last view's code."""
    code = 0
    try:
        while True:
            if tty:
                sys.stdout.write("\x1b[H\x1b[2J")
                print(f"every {every:g}s: {title}   {time.strftime('%H:%M:%S')}\n")
            code = draw()
            if once:
                return code
            if not tty:
                print()
            sys.stdout.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return code


def error_frame(exc: TenureError) -> int:
    """Print, as the view, why it could not be drawn this time (no backend answers: why,
    as ``status`` says it; a handoff, a timeout: the error), and return that frame's exit
    code: a redrawing view goes on, and shows the next answer once there is one."""
    from protocol.errors import BackendUnavailable

    from . import render
    from .exits import Exit
    if isinstance(exc, BackendUnavailable):
        print(render.no_backend(exc.data.get("diagnostics"), None, exc.data.get("stopped")))
        return Exit.UNREACHABLE
    print(f"tenure: {exc.code_str}: {exc.msg}")
    return Exit.ERROR
