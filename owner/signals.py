"""What applications inherit from the owner's signal state: nothing.

Across exec a process keeps its ignored signals and its signal mask (a handled signal
goes back to its default). Whoever started the owner may have left both set: ``nohup``
ignores SIGHUP, a shell's background job ignores SIGINT and SIGQUIT, some supervisors
block signals. Apps would inherit them, so an app whose stop signal is SIGINT would
never see it. At start-up the owner clears its mask and replaces every ignored signal
(but SIGPIPE, which Python ignores and subprocess restores in children) by a handler
that does nothing: the owner goes on ignoring it, and its children start with the
default, as under systemd.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType

__all__ = ["clear_inherited"]

log = logging.getLogger("tenure.owner")

_KEEP = {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE}


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Stands in for SIG_IGN in the owner; reset to the default in every child."""


def _name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {int(sig)}"


def clear_inherited() -> list[str]:
    """Unblock every signal and turn inherited SIG_IGN into a no-op handler. Returns
    the names of the signals that were ignored or blocked (for the log). Call it in
    the main thread before any other thread starts (threads inherit the mask)."""
    blocked = signal.pthread_sigmask(signal.SIG_SETMASK, set())
    found = {_name(s) for s in blocked}
    for sig in signal.valid_signals():
        if sig in _KEEP:
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, _ignore)
                found.add(_name(sig))
        except (OSError, ValueError, RuntimeError):
            continue  # real-time signals Python does not name, or not settable
    return sorted(found)
