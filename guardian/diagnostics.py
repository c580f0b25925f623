"""supervisor-state.json: what `tenure status` shows when no backend answers — the
guardian's view of the owner, the selected releases, the generation in control, the
last activation and the recovery certificate (:func:`snapshot`).

The guardian rewrites it every second (its owner watch) and after every phase, so it is
written without fsyncs: it reports on running daemons, and the durable facts are in
guardian.db. A write that fails is logged, never raised (:class:`Diagnostics`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.durable import atomic_write_json, read_json, refuse_unprivate
from protocol.errors import GuardianFault, TenureError

if TYPE_CHECKING:
    from .coordinator import Coordinator

__all__ = ["DELAY_S", "KIND", "Diagnostics", "check_diagnostics", "snapshot"]

log = logging.getLogger("tenure.guardian")

KIND = "tenure-supervisor-state"
DELAY_S = 0.1  # phase changes within it share one write of the diagnostics


def check_diagnostics(path: str) -> None:
    """Refuse to start on a supervisor-state.json that is not ours to replace: a symlink
    (its target would be what `tenure status` shows), not a regular file, another
    user's, or one open to others. The guardian rewrites it every second and could
    not write it (nor answer `status`, which reads it) for as long as it ran: it stops
    before changing anything, as for state.db and guardian.key. Absent: fine (the first
    start writes it). Raises UnsafePath naming the path."""
    if os.path.lexists(path):
        refuse_unprivate(path)


class Diagnostics:
    """The file at ``path``, written from ``build()``."""

    def __init__(self, path: str, build: Callable[[], dict[str, Any]]) -> None:
        self.path = path
        self._build = build
        self._due: asyncio.TimerHandle | None = None   # a write :meth:`soon` arranged
        self._closed = False
        # why the last write failed (logged once), None after a success
        self._failing: str | None = None

    def read(self) -> dict[str, Any]:
        return read_json(self.path, KIND)

    def write(self, state: dict[str, Any] | None = None) -> None:
        """Write it now (``state``: what ``build()`` made just now, not made again).
        Never raises: a file that cannot be written is logged, not
        fatal; once for a run of the same failure (the owner watch would log it every
        second, a traceback each time, megabytes of log in minutes) and once more when a
        write succeeds again. An expected failure (a path we may not use, a full disk)
        is logged without a traceback. Nothing once closed."""
        if self._closed:
            return
        try:
            atomic_write_json(self.path, self._build() if state is None else state,
                              sync=False)
        except Exception as exc:
            expected = isinstance(exc, TenureError | OSError)
            if self._new_failure(str(exc) if expected else f"{type(exc).__name__}: {exc}"):
                log.error("could not write %s: %s (said once while it keeps failing)",
                          self.path, exc, exc_info=None if expected else exc)
        else:
            if self._failing is not None:
                log.info("wrote %s again", self.path)
            self._failing = None

    def _new_failure(self, why: str) -> bool:
        """Record ``why`` the file could not be written; True when it is not what failed
        the last time (so it is to be logged)."""
        new, self._failing = why != self._failing, why
        return new

    def soon(self) -> None:
        """:meth:`write` DELAY_S from now, once for all the calls until then (at once
        outside a running loop). A handoff's phases follow one another within its pause
        (~40-70 ms with 200 apps) and the file takes ~0.9 ms of CPU to build and write:
        written once after them, it takes nothing from the processes the pause waits
        for. The file lags at most that long behind: it reports on running daemons, the
        owner watch rewrites it every second, and a failed activation's ending is
        written at once (Coordinator.end)."""
        if self._due is not None or self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write()
            return
        self._due = loop.call_later(DELAY_S, self._write_due)

    def _write_due(self) -> None:
        self._due = None
        self.write()

    def close(self) -> None:
        """Write what :meth:`soon` arranged now, and nothing after: the state it is built
        from closes next (the loop's own shutdown would otherwise run a write still
        arranged, against a closed state.db, and log its traceback)."""
        if self._due is not None:
            self._due.cancel()
            self._write_due()
        self._closed = True


def snapshot(co: Coordinator) -> dict[str, Any]:
    """The file's contents, as of now."""
    sel = co.state.selector()
    last = co.state.activations(1)
    try:
        cert = co.certificate()
        refused = co.certificate_refusal(cert, sel.current)
    except Exception as exc:
        cert = {"valid": False, "error": f"unreadable: {GuardianFault.wrap(exc).msg}"}
        refused = None
    body = cert.get("body") or {}
    return {
        "kind": KIND, "format": 1, "updated_at": time.time(),
        "guardian": co.identity.to_wire(),
        "guardian_release": co.own.to_wire() if co.own is not None else None,
        "owner": co.owner_identity.to_wire() if co.owner_identity else None,
        "owner_link": co.owner_link.to_wire(),
        "epoch": co.state.last_epoch(),
        "selector": {"current": sel.current, "previous": sel.previous,
                     "revision": sel.revision},
        "backend": co.current.to_wire() if co.current else None,
        "last_activation": last[0].to_wire() if last else None,
        # valid: it would be accepted; refused: why one marked valid would not be
        "certificate": {"valid": bool(cert.get("valid")) and refused is None,
                        "refused": refused,
                        "activation": body.get("activation"),   # the generation that wrote it
                        "age": round(time.time() - body["at"], 1) if "at" in body
                        else None, "launches": body.get("launches"),
                        "error": cert.get("error") or (f"damaged: {cert['damaged']}"
                                                       if cert.get("damaged") else None),
                        "invalidated": None if cert.get("valid") else
                        body.get("invalidated"),
                        "changed_at": cert.get("updated_at")},
        "blocked": co.blocked,
        "recovery_failing": co.recovery_failing,
        "unhealthy": co.unhealthy}
