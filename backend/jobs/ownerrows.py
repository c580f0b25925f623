"""What an owner's launch rows and exit observations say about a job: the machine's
events they prove (backend.jobs.machine), read the same way by the runner that sent the
launch and by a generation that resumes a record from evidence (backend.jobs.resume)."""

from __future__ import annotations

from typing import Any

from . import machine as jm

__all__ = ["events_of_row", "exit_event", "owner_time", "still_running"]


def events_of_row(row: dict[str, Any]) -> list[jm.Event]:
    """The events an owner launch row proves: launched, and exited if it already ended.
    An ``uncertain`` row is the owner's memory of a launch whose row it could not write
    (a full disk): its process was started and is watched, and its ``exit``, once it
    ended, is known there. (A row of another state names a start whose end nobody can
    tell: Lost.)"""
    state = row.get("state", "running")
    if state == "failed":
        err = row.get("error") or {}
        return [jm.LaunchRefused(str(err.get("code", "LAUNCH_FAILED")),
                                 str(err.get("msg", "launch failed")))]
    if row.get("pid") is None or row.get("start_ticks") is None:
        return [jm.Lost({"reason": "the owner's launch row has no process", "row": row})]
    events: list[jm.Event] = [jm.Launched(int(row["pid"]), int(row["start_ticks"]),
                                          owner_time(row.get("started_at")))]
    if _shows_exit(row):
        ex = row.get("exit") or {}
        events.append(jm.Exited(ex.get("exit_code"), ex.get("signal"), row["pid"],
                                owner_time(row.get("ended_at"))))
    elif not still_running(row):
        events.append(jm.Lost({"reason": f"the owner's launch row says {state}",
                               "row": row}))
    return events


def _shows_exit(row: dict[str, Any]) -> bool:
    """Whether the owner's launch ``row`` says how its process ended: ``exited``, or
    ``uncertain`` (its row not written) holding the exit."""
    state = row.get("state", "running")
    return state == "exited" or (state == "uncertain" and isinstance(row.get("exit"), dict))


def still_running(row: dict[str, Any]) -> bool:
    """Whether the owner's launch ``row`` says its process runs: ``running``, or
    ``uncertain`` with no exit yet."""
    return row.get("state", "running") in ("running", "uncertain") and not _shows_exit(row)


def exit_event(e: dict[str, Any]) -> jm.Exited:
    """The Exited event of an owner ``exit`` observation, at the time the owner saw the
    exit (its ``at``): the record's end is the exit's, however late a backend hears of
    it."""
    return jm.Exited(e.get("exit_code"), e.get("signal"), e.get("pid"),
                     owner_time(e.get("at")))


def owner_time(v: Any) -> float | None:
    """A wall-clock time from the owner, or None when it is missing or not a number."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
