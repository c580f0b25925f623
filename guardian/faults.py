"""Test-only fault injection into the guardian's activation flows.

``TENURE_GUARDIAN_FAULT`` names one fault; unset (always, outside tests) nothing here
does anything. Two forms:

- ``<phase>``: SIGKILL the guardian right after an activation reached that phase (its row
  is committed, nothing after it ran);
- ``<point>:<action>``: at the named await point of a flow (handoff.POINTS and
  cold.POINTS list them; ``trial.boot`` is where a guardian that has just moved to a new
  release has booted but not confirmed it; ``start.locked`` is where a starting guardian
  holds its lock, before its own release and its socket), do ``action`` once:

  ======================  ============================================================
  ``kill-guardian``       SIGKILL this guardian
  ``kill-incumbent``      SIGKILL the generation being handed over from
  ``kill-candidate``      SIGKILL the generation being handed over to (or started)
  ``kill-owner``          SIGKILL the execution owner
  ``hang-incumbent``      SIGSTOP the incumbent (it hangs until killed)
  ``hang-candidate``      SIGSTOP the candidate
  ``hang-guardian``       this guardian blocks right there for good (``start.locked``:
                          it holds guardian.lock but never listens, as a guardian
                          whose release hangs at boot); SIGTERM still ends it
  ``raise``               raise an unexpected exception (RuntimeError) right there
  ``lose-reply``          the next RPC this guardian makes is performed, but its answer
                          is dropped (TransportLost), as if the connection broke
  ======================  ============================================================

A fault fires once per guardian process. A target that does not exist at that point
(no candidate yet) makes the fault a no-op, logged, so a matrix cell stays meaningful.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from protocol.errors import TransportLost

__all__ = ["ACTIONS", "Fault", "InjectedFault"]

log = logging.getLogger("tenure.guardian")

ACTIONS = ("kill-guardian", "kill-incumbent", "kill-candidate", "kill-owner",
           "hang-incumbent", "hang-candidate", "hang-guardian", "raise", "lose-reply")


class InjectedFault(RuntimeError):
    """The ``raise`` action: deliberately not a TenureError (the catch-alls must hold)."""


@dataclass
class Fault:
    spec: str | None = field(default_factory=lambda: os.environ.get("TENURE_GUARDIAN_FAULT")
                             or None)
    fired: bool = False
    lose_next_reply: bool = False

    @property
    def point(self) -> str | None:
        return self.spec.split(":", 1)[0] if self.spec and ":" in self.spec else None

    @property
    def action(self) -> str | None:
        return self.spec.split(":", 1)[1] if self.spec and ":" in self.spec else None

    def check(self, phase: str) -> None:
        """After a phase advance: the ``<phase>`` form kills the guardian."""
        if self.spec is not None and ":" not in self.spec and self.spec == phase:
            log.warning("test fault: killing the guardian after phase %s", phase)
            os.kill(os.getpid(), signal.SIGKILL)

    def at(self, point: str, pids: Callable[[str], int | None]) -> None:
        """At an await point: fire the ``<point>:<action>`` fault if it names this point.
        ``pids(role)`` gives the pid of ``incumbent``, ``candidate`` or ``owner``."""
        if self.fired or self.point != point:
            return
        self.fired = True
        action = self.action or ""
        log.warning("test fault: %s at %s", action, point)
        if action == "kill-guardian":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "hang-guardian":
            _hang()
        elif action == "raise":
            raise InjectedFault(f"injected fault at {point}")
        elif action == "lose-reply":
            self.lose_next_reply = True
        elif action.startswith(("kill-", "hang-")):
            verb, role = action.split("-", 1)
            self._signal(role, pids(role), signal.SIGKILL if verb == "kill" else signal.SIGSTOP)
        else:
            log.error("test fault: unknown action %r", action)

    def _signal(self, role: str, pid: int | None, sig: int) -> None:
        if pid is None:
            log.warning("test fault: no %s at this point; nothing done", role)
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            log.warning("test fault: the %s (pid %d) is already gone", role, pid)

    def after_reply(self, method: str) -> None:
        """Called with every RPC answer: drop it once when ``lose-reply`` fired."""
        if self.lose_next_reply:
            self.lose_next_reply = False
            log.warning("test fault: dropping the answer to %s", method)
            raise TransportLost(f"test fault: the answer to {method} was lost")


def _hang() -> NoReturn:
    """Block this thread for good (the ``hang-guardian`` action); signals keep their
    dispositions, so SIGTERM before the serve loop ends the process."""
    while True:
        time.sleep(3600)
