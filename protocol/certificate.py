"""The recovery certificate's body as both sides judge it: the backend, which writes it
(backend.certify: a stored body this check refuses is never "the same snapshot", so the
next certificate replaces it), and the guardian, which reads it (guardian.recovery: a
refused body is no certificate, and recovery blocks). One check, so that the backend
never keeps a body recovery cannot use while saying it is certified."""

from __future__ import annotations

import math
from typing import Any

from .schema import is_count

__all__ = ["DAMAGED", "is_time", "sound_body"]

DAMAGED = ("move recovery.db aside (with its -wal and -shm; the backend writes a new one); "
           "`tenure backend recover --dry-run` then reviews a forced recovery "
           "(docs/recover.md, \"A damaged recovery.db\")")
"""The way out of a recovery.db that is not a readable database: it only ever holds a
certificate, which the next generation writes again."""


def is_time(v: Any) -> bool:
    """Whether ``v`` is a Unix time as a certificate stores one: a finite number (never
    a bool)."""
    return type(v) in (int, float) and math.isfinite(v)


def sound_body(body: dict[str, Any]) -> bool:
    """Whether recovery can use ``body``: its ``cursor`` and ``launches``, when there, are
    counts and its ``at``, when there, is a time. Extra keys are not looked at."""
    return is_count(body.get("cursor", 0)) and is_count(body.get("launches", 0)) \
        and is_time(body.get("at", 0.0))
