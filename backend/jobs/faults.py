"""Test-only fault injection into a job's life in the backend.

``TENURE_JOB_FAULT=<point>:<job id>:<attempt>`` SIGKILLs the backend generation when
that record reaches the point (unset, always, outside tests, nothing here does
anything). Points, in the order of a job's life:

==============  ==========================================================================
``admitted``    the record is committed, the submitter has not had the answer (attempt 0)
``starting``    ``starting`` is committed, the owner has not been asked to launch
``launched``    the owner answered the launch, ``running`` is not committed
``exited``      the owner reported the exit, the final state is not committed
==============  ==========================================================================

Every generation started with the variable reads it, but a record reaches each point
of one attempt once, so the fault fires once.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field

__all__ = ["POINTS", "JobFault"]

log = logging.getLogger("tenure.jobs")

POINTS = ("admitted", "starting", "launched", "exited")


@dataclass
class JobFault:
    spec: str | None = field(default_factory=lambda: os.environ.get("TENURE_JOB_FAULT")
                             or None)

    def at(self, point: str, job_id: int, attempt: int) -> None:
        """SIGKILL this process if the fault names this point of this attempt."""
        if self.spec is not None and self.spec == f"{point}:{job_id}:{attempt}":
            log.warning("test fault: killing the backend at %s of job %d attempt %d",
                        point, job_id, attempt)
            os.kill(os.getpid(), signal.SIGKILL)
