"""The guardian's own release: which sealed release the guardian runs from, and the trial
of a new one after `tenure guardian upgrade` (runtime/guardian-release.json).

A guardian is started from the installed code (by systemd or `tenure up`); when the
record names a release, that guardian verifies it and replaces itself with the release's
guardian (exec: same pid, same lock, same backend child). An upgrade writes a *trial*
record and execs into the new release; the new guardian confirms it once it has booted.
A guardian that starts while a trial is unconfirmed is not that trial (the trial died
before it was ready): it goes back to the release before it and says so.

States (of the record) and events, every pair in :data:`TRANSITIONS`:

=============  ===============================================================
``installed``  no release recorded: the guardian runs the code it was started with
``selected``   the guardian runs ``release`` (confirmed)
``trial``      the guardian moved to ``release`` and has not confirmed it yet
=============  ===============================================================

``upgrade`` (the operator chose a release), ``started-as`` (a guardian started that runs
the recorded release), ``started-other`` (a guardian started from other code),
``ready`` (the guardian booted and serves), ``exec-failed`` (the recorded release could
not be executed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from protocol.durable import atomic_write_json, read_json
from protocol.errors import OperationInProgress, StateCorrupt, TenureError
from protocol.layout import release_of

from .manifest import is_release_id

__all__ = ["KIND", "TRANSITIONS", "Event", "Pointer", "Running", "State", "load", "pack",
           "running_release", "save", "step", "unpack"]

log = logging.getLogger("tenure.guardian")

KIND = "tenure-guardian-release"


class State(StrEnum):
    INSTALLED = "installed"
    SELECTED = "selected"
    TRIAL = "trial"


class Event(StrEnum):
    UPGRADE = "upgrade"
    STARTED_AS = "started-as"
    STARTED_OTHER = "started-other"
    READY = "ready"
    EXEC_FAILED = "exec-failed"


@dataclass(frozen=True)
class Pointer:
    """What runtime/guardian-release.json says. ``reverted`` is the last automatic
    return from a trial: ``{"release", "reason", "at"}``."""

    release: str | None = None
    previous: str | None = None
    trial: bool = False
    reverted: dict[str, Any] | None = None

    @property
    def state(self) -> State:
        if self.trial:
            return State.TRIAL
        return State.INSTALLED if self.release is None else State.SELECTED

    def to_wire(self) -> dict[str, Any]:
        return {"state": str(self.state), "release": self.release,
                "previous": self.previous, "reverted": self.reverted}


Handler = Callable[[Pointer, str | None], Pointer]


def _stay(p: Pointer, arg: str | None) -> Pointer:
    return p


def _try(p: Pointer, arg: str | None) -> Pointer:
    assert arg is not None
    return Pointer(release=arg, previous=p.release, trial=True, reverted=p.reverted)


def _refuse(p: Pointer, arg: str | None) -> Pointer:
    raise OperationInProgress(f"the guardian's move to release {p.release} is not "
                              "confirmed yet; wait until the guardian is ready",
                              {"release": p.release})


def _confirm(p: Pointer, arg: str | None) -> Pointer:
    return replace(p, trial=False)


def _revert(p: Pointer, arg: str | None) -> Pointer:
    return Pointer(release=p.previous, previous=None, trial=False,
                   reverted={"release": p.release, "reason": arg or "unknown",
                             "at": round(time.time(), 3)})


TRANSITIONS: dict[tuple[State, Event], Handler] = {
    (State.INSTALLED, Event.UPGRADE): _try,
    (State.INSTALLED, Event.STARTED_AS): _stay,
    (State.INSTALLED, Event.STARTED_OTHER): _stay,   # a release runs: it cannot go back
    (State.INSTALLED, Event.READY): _stay,
    (State.INSTALLED, Event.EXEC_FAILED): _stay,
    (State.SELECTED, Event.UPGRADE): _try,
    (State.SELECTED, Event.STARTED_AS): _stay,
    (State.SELECTED, Event.STARTED_OTHER): _stay,    # the caller execs into the release
    (State.SELECTED, Event.READY): _stay,
    (State.SELECTED, Event.EXEC_FAILED): _stay,      # runs as it is; tried again next start
    (State.TRIAL, Event.UPGRADE): _refuse,
    (State.TRIAL, Event.STARTED_AS): _stay,          # this is the trial
    (State.TRIAL, Event.STARTED_OTHER): _revert,     # the trial died before it was ready
    (State.TRIAL, Event.READY): _confirm,
    (State.TRIAL, Event.EXEC_FAILED): _revert,
}
assert set(TRANSITIONS) == {(s, e) for s in State for e in Event}


def step(p: Pointer, event: Event, arg: str | None = None) -> Pointer:
    """The record after ``event`` (``arg``: the release of an upgrade, the reason of a
    failure). Pure. Raises OperationInProgress for an upgrade during a trial."""
    return TRANSITIONS[(p.state, event)](p, arg)


def pack(p: Pointer) -> dict[str, Any]:
    return {"kind": KIND, "format": 1, "release": p.release, "previous": p.previous,
            "trial": p.trial, "reverted": p.reverted}


def unpack(obj: dict[str, Any], where: str = KIND) -> Pointer:
    """Raises StateCorrupt for a missing or malformed field (extra keys are ignored)."""
    def rid(key: str) -> str | None:
        v = obj.get(key)
        if v is not None and not is_release_id(v):
            raise StateCorrupt(f"{where}: {key} is not a release id", {"field": key})
        return v
    trial, reverted = obj.get("trial"), obj.get("reverted")
    if not isinstance(trial, bool):
        raise StateCorrupt(f"{where}: trial must be true or false", {"field": "trial"})
    if reverted is not None and not (isinstance(reverted, dict) and
                                     all(isinstance(k, str) for k in reverted)):
        raise StateCorrupt(f"{where}: reverted must be an object", {"field": "reverted"})
    p = Pointer(rid("release"), rid("previous"), trial, reverted)
    if p.trial and p.release is None:
        raise StateCorrupt(f"{where}: a trial names no release", {"field": "release"})
    return p


def load(path: str) -> Pointer:
    """The record, or the ``installed`` one when there is none. Raises StateCorrupt,
    UnsafePath."""
    try:
        return unpack(read_json(path, KIND), path)
    except FileNotFoundError:
        return Pointer()


def save(path: str, p: Pointer) -> None:
    atomic_write_json(path, pack(p))


def running_release(releases: Path) -> str | None:
    """The id of the installed release this code was loaded from, or None (the
    installed code). Told by where this module lies, so it cannot be claimed."""
    return release_of(__file__, releases)


@dataclass
class Running:
    """This guardian's side of the record: the release it runs from (None: the installed
    code), the record as it stands, the release it must exec into at start (``follow``)
    and why the last move failed (``error``, wire form). Every change is saved first."""

    release: str | None
    record: Pointer
    follow: str | None = None
    error: dict[str, Any] | None = None

    @classmethod
    def start(cls, paths: Any, release: str | None) -> Running:
        """A guardian starts running ``release``: go back from a trial that did not
        become ready; follow the recorded release. Raises StateCorrupt, UnsafePath."""
        before = load(paths.guardian_release)
        event = Event.STARTED_AS if before.release == release else Event.STARTED_OTHER
        me = cls(release, before)
        me._apply(paths, event, "it did not become ready")
        if before.trial and not me.record.trial:
            log.error("the guardian's move to release %s failed: it did not become ready; "
                      "back to %s", before.release, me.record.release or "the installed code")
        if me.record.release not in (None, release):
            me.follow = me.record.release
        return me

    def exec_failed(self, paths: Any, err: TenureError) -> None:
        self.follow, self.error = None, err.to_wire()
        self._apply(paths, Event.EXEC_FAILED, err.msg)

    def ready(self, paths: Any) -> None:
        self._apply(paths, Event.READY)

    def upgrade(self, paths: Any, release: str) -> None:
        """Raises OperationInProgress while a trial is unconfirmed."""
        self._apply(paths, Event.UPGRADE, release)

    def _apply(self, paths: Any, event: Event, arg: str | None = None) -> None:
        after = step(self.record, event, arg)
        if after != self.record:
            save(paths.guardian_release, after)
            self.record = after

    def to_wire(self) -> dict[str, Any]:
        return {"running": self.release, **self.record.to_wire(), "error": self.error}
