"""Who wrote a journal line (:class:`LogSource`), and the checks every name and number
given to the journal passes first: a malformed one is refused with ``BadRequest`` naming
its field, before anything is queued, written or read (owner.journal)."""

from __future__ import annotations

import dataclasses

from protocol.errors import BadRequest

__all__ = ["LogSource", "check_int", "check_name"]


def check_name(what: str, value: object) -> str:
    """``value`` if it is a non-empty UTF-8 string without NUL; raises ``BadRequest``
    naming ``what`` otherwise."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise BadRequest(f"{what} must be a non-empty string without NUL", {"field": what})
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{what} is not valid UTF-8", {"field": what}) from None
    return value


def check_int(what: str, value: object, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``; raises
    ``BadRequest`` naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"{what} must be an int >= {minimum}", {"field": what})
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class LogSource:
    """Who wrote a line. Raises ``BadRequest`` on malformed fields."""

    stack: str
    app: str
    instance: int
    generation: int

    def __post_init__(self) -> None:
        check_name("stack", self.stack)
        check_name("app", self.app)
        check_int("instance", self.instance)
        check_int("generation", self.generation)
