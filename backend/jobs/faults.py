"""Test-only fault injection into a job's life in the backend.

``TENURE_JOB_FAULT=<point>:<job id>:<attempt>[:<target>]`` (several separated by ',')
SIGKILLs a process when that record reaches the point (unset, always, outside tests,
nothing here does anything). Points, in the order of a job's life:

==============  ==========================================================================
``admitted``    the record is committed, the submitter has not had the answer (attempt 0)
``starting``    ``starting`` is committed, the owner has not been asked to launch
``launched``    the owner answered the launch, ``running`` is not committed
``exited``      the owner reported the exit, the final state is not committed
==============  ==========================================================================

Targets: ``backend`` (the default: this generation), ``guardian`` (the guardian that
serves ``guardian.sock``, found by the socket's peer credentials; this generation goes
on), ``both`` (the guardian, then this generation: nobody is left to restore it until
a guardian starts again).

Every generation started with the variable reads it, but a record reaches each point
of one attempt once, so each fault fires once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket

from msgspec import Struct, field

from protocol.procfs import read_stat
from protocol.sockets import peer_credentials

__all__ = ["POINTS", "TARGETS", "JobFault"]

log = logging.getLogger("tenure.jobs")

POINTS = ("admitted", "starting", "launched", "exited")
TARGETS = ("backend", "guardian", "both")


def _specs() -> dict[str, str]:
    """``<point>:<id>:<attempt>`` → target, from the environment."""
    out: dict[str, str] = {}
    for item in (os.environ.get("TENURE_JOB_FAULT") or "").split(","):
        parts = item.strip().split(":")
        if len(parts) in (3, 4):
            out[":".join(parts[:3])] = parts[3] if len(parts) == 4 else "backend"
    return out


class JobFault(Struct):
    specs: dict[str, str] = field(default_factory=_specs)
    guardian_sock: str | None = None

    def at(self, point: str, job_id: int, attempt: int) -> None:
        """SIGKILL the fault's target if a fault names this point of this attempt."""
        target = self.specs.get(f"{point}:{job_id}:{attempt}")
        if target is None:
            return
        log.warning("test fault: killing the %s at %s of job %d attempt %d", target, point,
                    job_id, attempt)
        if target in ("guardian", "both"):
            self._kill_guardian()
        if target in ("backend", "both"):
            os.kill(os.getpid(), signal.SIGKILL)

    def _kill_guardian(self) -> None:
        if self.guardian_sock is None:
            log.error("test fault: no guardian socket known; nothing killed")
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.guardian_sock)
            pid = peer_credentials(s).pid
        os.kill(pid, signal.SIGKILL)
        while True:  # gone before this generation goes on: the fault means "at" the point
            stat = read_stat(pid)
            if stat is None or stat.zombie:
                return
            os.sched_yield()
