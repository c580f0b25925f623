"""Redraw a view every few seconds until Ctrl-C, like watch(1): ``status -w`` and
``tenure top``."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from protocol.errors import TenureError

__all__ = ["TITLE_LINES", "error_frame", "redraw", "view_height"]

TITLE_LINES = 2   # on a terminal, above each view: the title and a blank line


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


def view_height() -> int:
    """Lines a view may print under the title on this terminal: the line the cursor
    is left on after the view's last one counts too, or the terminal would scroll the
    title away. Use on a terminal only."""
    return shutil.get_terminal_size().lines - TITLE_LINES - 1


def error_frame(exc: TenureError, as_json: bool = False) -> int:
    """Print, as the view, why it could not be drawn this time (no backend answers: why,
    as ``status`` says it; a handoff, a timeout: the error), and return that frame's exit
    code: a redrawing view goes on, and shows the next answer once there is one. With
    ``as_json`` the frame is the error object ``--json`` prints for any error."""
    from protocol.errors import BackendUnavailable

    from . import render
    from .exits import Exit
    code = Exit.UNREACHABLE if isinstance(exc, BackendUnavailable) else Exit.ERROR
    if as_json:
        import json
        print(json.dumps({"ok": False, "error": exc.to_wire()}, default=str,
                         sort_keys=True), flush=True)
    elif isinstance(exc, BackendUnavailable):
        print(render.no_backend_of(exc.data, None))
    else:
        print(f"tenure: {exc.code_str}: {exc.msg}")
    return code
