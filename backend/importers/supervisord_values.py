"""supervisord's value types and ``%(name)s`` expansion, as supervisord reads them.

Each reader takes the raw string and returns the typed value, or raises ValueError with
a message for the report. The rules follow supervisord's documentation and its
``datatypes.py``: booleans are ``true/false/yes/no/on/off/1/0`` in any case; ``autorestart``
is a boolean or ``unexpected``; ``environment`` is ``KEY="val",KEY2=val2`` tokenised like a
POSIX shell word list; ``exitcodes`` and ``programs`` are comma separated.
"""

from __future__ import annotations

import re
import shlex
import signal
from collections.abc import Mapping
from enum import StrEnum

__all__ = ["AutoRestart", "auto_restart", "boolean", "exit_codes", "expand", "integer",
           "key_value_pairs", "list_of_strings", "octal", "signal_name"]

_TRUE = ("yes", "true", "on", "1")
_FALSE = ("no", "false", "off", "0")
# %(name)<spec> with a printf conversion, or %% for a literal percent sign
_EXPANSION = re.compile(
    r"%(?:\((?P<name>[^)]*)\)(?P<spec>[#0\- +]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa])|(?P<pct>%))")


class AutoRestart(StrEnum):
    TRUE = "true"
    FALSE = "false"
    UNEXPECTED = "unexpected"


def expand(value: str, names: Mapping[str, str | int]) -> str:
    """Replace every ``%(name)s`` (any printf conversion: ``%(process_num)02d``) and
    ``%%``. Raises ValueError for an unknown name or a ``%`` that starts neither, where
    supervisord would fail or format its whole table of names into the value."""
    out: list[str] = []
    pos = 0
    for m in _EXPANSION.finditer(value):
        _check_plain(value[pos:m.start()])
        out.append(value[pos:m.start()])
        pos = m.end()
        if m.group("pct"):
            out.append("%")
            continue
        name = m.group("name")
        if name not in names:
            raise ValueError(f"%({name}) cannot be expanded; known names: "
                             + ", ".join(sorted(names)))
        try:
            out.append(("%" + m.group("spec")) % (names[name],))
        except (TypeError, ValueError) as e:
            raise ValueError(f"%({name}){m.group('spec')}: {e}") from None
    _check_plain(value[pos:])
    out.append(value[pos:])
    return "".join(out)


def _check_plain(text: str) -> None:
    if "%" in text:
        raise ValueError("a '%' that is not '%(name)s' or '%%' (write '%%' for a "
                         "literal percent sign)")


def boolean(value: str) -> bool:
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"not a boolean: {value!r}")


def integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None


def octal(value: str) -> int:
    """A umask: octal digits (``022``, ``0o022``), as supervisord reads it, within
    0..0o777."""
    try:
        number = int(value.strip(), 8)
    except ValueError:
        raise ValueError(f"not an octal number: {value!r}") from None
    if not 0 <= number <= 0o777:
        raise ValueError(f"a umask is 0 to 777 (octal), not {value!r}")
    return number


def auto_restart(value: str) -> AutoRestart:
    low = value.lower()
    if low == "unexpected":
        return AutoRestart.UNEXPECTED
    try:
        return AutoRestart.TRUE if boolean(low) else AutoRestart.FALSE
    except ValueError:
        raise ValueError(f"not true, false or unexpected: {value!r}") from None


def signal_name(value: str) -> str:
    """A signal given by name (``TERM``, ``SIGTERM``) or number, as its name without
    ``SIG``."""
    text = value.strip()
    try:
        return signal.Signals(int(text)).name.removeprefix("SIG")
    except ValueError:
        pass
    full = text.upper() if text.upper().startswith("SIG") else "SIG" + text.upper()
    member = signal.Signals.__members__.get(full)
    if member is None:
        raise ValueError(f"not a signal: {value!r}")
    return member.name.removeprefix("SIG")


def list_of_strings(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")] if value else []


def exit_codes(value: str) -> list[int]:
    codes = [integer(part) for part in value.split(",")] if value else []
    for code in codes:
        if not 0 <= code <= 255:
            raise ValueError(f"exit code out of range 0..255: {code}")
    return codes


def key_value_pairs(value: str) -> dict[str, str]:
    """``KEY="a b",KEY2=c`` → a dict. The value is split like supervisord does: shell-like
    words where letters, digits, ``_`` and ``/.+-():`` (and anything quoted) form a word,
    then ``KEY = VALUE`` triples, each followed by one separator token (a comma).
    Raises ValueError when the words do not form such triples."""
    lexer = shlex.shlex(value, posix=True)
    lexer.wordchars += "/.+-():"
    try:
        tokens = list(lexer)
    except ValueError as e:
        raise ValueError(f"cannot split {value!r}: {e}") from None
    pairs: dict[str, str] = {}
    for i in range(0, len(tokens), 4):
        triple = tokens[i:i + 3]
        if len(triple) != 3 or triple[1] != "=":
            raise ValueError(f"not KEY=value pairs separated by commas: {value!r}")
        pairs[triple[0]] = triple[2]
    return pairs
