"""Signals a tenure daemon takes no action on, and must not die of.

SIGHUP, SIGUSR1 and SIGUSR2 end a process by default. No tenure daemon reloads or
reopens anything on them (a config is applied with `tenure up`; the daemons' logs are
their stderr), yet they are what an operator's reflex sends (`kill -HUP` to "reload", a
logrotate postrotate, `pkill -HUP python`). One of them ended the owner at once, and
every application it held was left without its owner until a reconcile. So each is
logged and otherwise ignored.

They are caught, not set to SIG_IGN: a caught signal is reset to its default by exec,
so applications the owner starts still get the default disposition.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from .sighandler import add_signal_handler

__all__ = ["STRAY", "ignore_stray_signals"]

STRAY = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

log = logging.getLogger("tenure.signals")


def ignore_stray_signals(loop: asyncio.AbstractEventLoop, daemon: str) -> None:
    """From now on, each of :data:`STRAY` is logged (a warning naming ``daemon`` and
    what to do instead) instead of ending the process."""
    for sig in STRAY:
        add_signal_handler(loop, sig, _stray, daemon, sig)


def _stray(daemon: str, sig: signal.Signals) -> None:
    log.warning("%s ignored: the %s reloads nothing on a signal (apply a config with "
                "`tenure up`; stop with `tenure down` or SIGTERM)", sig.name, daemon)
