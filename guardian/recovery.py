"""Reading the backend's recovery certificate (recovery.db) without writing to it."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from protocol.certificate import DAMAGED, sound_body
from protocol.digest import inventory_digest
from protocol.durable import connect_read_only, json_map
from protocol.errors import StateCorrupt

__all__ = ["digest", "read_certificate", "refusal"]

digest = inventory_digest
_NOT_A_BODY = ("its body is not a JSON object with counts for its cursor and launches and "
               "a time for its at")


def read_certificate(path: str) -> dict[str, Any]:
    """``{valid, body, updated_at}``; no file means no certificate. A body that is not a
    JSON object whose ``cursor``, when there, is a count, or a valid flag other than 0 or
    1 (a damaged one) makes it no certificate either: not valid, no body, and ``damaged``
    saying so, so that recovery blocks and a forced recovery can still be reviewed; so
    does a file that holds no readable database (``damaged`` then says to move it
    aside). Raises StateCorrupt for a database of another kind or version, or one that
    cannot be read at all (never modified)."""
    if not os.path.exists(path) or os.path.islink(path):
        return {"valid": False, "body": None, "updated_at": None}
    try:
        db = connect_read_only(path)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("kind") != "tenure-recovery" or meta.get("format_version") != "1":
                raise StateCorrupt(f"{path} is not a recovery database of format 1",
                                   {"path": path})
            row = db.execute("SELECT valid, body, updated_at FROM certificate").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        if not _damaged_file(exc):
            raise StateCorrupt(f"{path} is unreadable: {exc}", {"path": path}) from None
        return {"valid": False, "body": None, "updated_at": None,
                "damaged": f"it is not a readable database ({exc}); {DAMAGED}"}
    if row is None:
        return {"valid": False, "body": None, "updated_at": None}
    body = _body(row[1]) if row[1] else None
    if row[1] and body is None:
        return {"valid": False, "body": None, "updated_at": row[2],
                "damaged": _NOT_A_BODY}
    if row[0] not in (0, 1) or type(row[0]) is not int:   # bool('no') is True
        return {"valid": False, "body": None, "updated_at": row[2],
                "damaged": "its valid flag is neither 0 nor 1"}
    return {"valid": row[0] == 1, "body": body, "updated_at": row[2]}


def _damaged_file(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the file holds no readable recovery database (not a database,
    a malformed one, an empty one or one without its tables), as opposed to a failure
    to read it (permissions, I/O, a lock) that says nothing of what it holds."""
    if isinstance(exc, sqlite3.OperationalError):
        return str(exc).startswith("no such table")
    return isinstance(exc, sqlite3.DatabaseError)


def _body(text: Any) -> dict[str, Any] | None:
    """The certificate's body: a JSON object protocol.certificate.sound_body accepts;
    None for anything else."""
    body = json_map(text)
    return body if body is not None and sound_body(body) else None


def refusal(body: dict[str, Any], selected: str | None, owner: dict[str, Any] | None,
            granted: int | None) -> str | None:
    """Why recovery would refuse a certificate marked valid, whatever the owner runs
    now (guardian.cold compares the inventory as well): it names another owner
    instance, another release than ``selected``, or a grant this guardian never issued
    (``granted``: the epoch of the grant recorded for its activation). None when none
    of these holds. ``owner`` None: not known, not compared. With no application
    running, recovery starts all the same."""
    if owner is not None and body.get("owner") != owner:
        return "the certificate names another owner instance"
    if body.get("release") != selected:
        return "the certificate was written by another release than the selected one"
    epoch = body.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or granted != epoch:
        return "the certificate names a grant this guardian never issued"
    return None
