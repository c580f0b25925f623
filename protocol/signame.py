"""The name of a signal number, as every message of tenure spells it."""

from __future__ import annotations

import signal

__all__ = ["signal_name"]


def signal_name(num: int) -> str:
    """``9`` → ``SIGKILL``; a number this system does not name → ``signal 42``."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
