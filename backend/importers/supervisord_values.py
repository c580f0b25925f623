"""supervisord's value types and ``%(name)s`` expansion, as supervisord reads them.

Each reader takes the raw string and returns the typed value, or raises ValueError with
a message for the report. The rules follow supervisord's documentation and its
``datatypes.py``: booleans are ``true/false/yes/no/on/off/1/0`` in any case; ``autorestart``
is a boolean or ``unexpected``; ``environment`` is ``KEY="val",KEY2=val2`` split as its
``dict_of_key_value_pairs`` splits it (a non-POSIX shlex, then the quotes at each value's
ends stripped); ``exitcodes`` and ``programs`` are comma separated.
"""

from __future__ import annotations

import re
import shlex
import signal
import uuid
from collections.abc import Callable, Mapping
from enum import StrEnum

__all__ = ["AutoRestart", "auto_restart", "boolean", "exit_codes", "expand", "expand_pairs",
           "integer", "key_value_pairs", "list_of_strings", "octal", "signal_name"]

_TRUE = ("yes", "true", "on", "1")
_FALSE = ("no", "false", "off", "0")
# %(name)<spec> with a printf conversion, or %% for a literal percent sign
_EXPANSION = re.compile(
    r"%(?:\((?P<name>[^)]*)\)(?P<spec>[#0\- +]*(?P<width>\d*)(?:\.(?P<precision>\d+))?"
    r"[diouxXeEfFgGcrsa])|(?P<pct>%))")
# The widest field or longest precision a conversion may ask for. Python would build
# what %(process_num)099999999999d asks for (a 100 GB string, MemoryError): no real
# value needs more than a few characters of padding.
MAX_FIELD = 1000


class AutoRestart(StrEnum):
    TRUE = "true"
    FALSE = "false"
    UNEXPECTED = "unexpected"


def expand(value: str, names: Mapping[str, str | int],
           missing: Callable[[str, str], str] | None = None) -> str:
    """Replace every ``%(name)s`` (any printf conversion: ``%(process_num)02d``) and
    ``%%``. Raises ValueError for an unknown name or a ``%`` that starts neither, where
    supervisord would fail or format its whole table of names into the value. With
    ``missing``, an unknown name is replaced by ``missing(reference, problem)`` instead."""
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
            problem = _unknown(m.group(0), name, names)
            if missing is None:
                raise ValueError(problem)
            out.append(missing(m.group(0), problem))
            continue
        out.append(_format(name, m, names[name]))
    _check_plain(value[pos:])
    out.append(value[pos:])
    return "".join(out)


def _format(name: str, m: re.Match[str], value: str | int) -> str:
    """``value`` formatted by the conversion ``m`` holds. Raises ValueError for a
    conversion that does not fit the value (``%(program_name)d``, ``%c`` of a number
    beyond Unicode) or a width or precision over :data:`MAX_FIELD`."""
    spec = m.group("spec")
    for part in ("width", "precision"):
        digits = m.group(part) or ""
        if len(digits) > len(str(MAX_FIELD)) or int(digits or 0) > MAX_FIELD:
            raise ValueError(f"%({name}){spec}: a {part} over {MAX_FIELD} characters")
    try:
        return ("%" + spec) % (value,)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"%({name}){spec}: {e}") from None


def _unknown(reference: str, name: str, names: Mapping[str, str | int]) -> str:
    """Why ``reference`` cannot be expanded. The ``ENV_`` names are not listed: they are
    the importing machine's whole environment, too many to read, and not for a report
    that may be shared."""
    if name.startswith("ENV_"):
        return (f"{reference} cannot be expanded: {name[4:]} is set neither in the "
                "environment `tenure import` runs in nor by `environment`")
    known = ", ".join(sorted(n for n in names if not n.startswith("ENV_")))
    return f"{reference} cannot be expanded; known names: {known} and ENV_ names"


def expand_pairs(value: str, names: Mapping[str, str | int]) -> tuple[dict[str, str],
                                                                      dict[str, str]]:
    """An ``environment`` value expanded, then split into pairs, as supervisord does it;
    and, apart, why each pair that uses a name that cannot be expanded was left out, so
    that the other pairs are kept. Raises ValueError when the value as a whole cannot be
    expanded or split. An unknown name is expanded to a unique placeholder word, so the
    value splits as supervisord would split it with any word there; a pair holding a
    placeholder is one to leave out."""
    holes: dict[str, tuple[str, str]] = {}  # placeholder -> (reference, problem)

    def hole(reference: str, problem: str) -> str:
        # letters and digits only: one word to the splitter, as a value would be
        placeholder = f"UNEXPANDED{uuid.uuid4().hex}"
        holes[placeholder] = (reference, problem)
        return placeholder

    def restore(text: str) -> str:
        for placeholder, (reference, _) in holes.items():
            text = text.replace(placeholder, reference)
        return text

    try:
        pairs = key_value_pairs(expand(value, names, hole))
    except ValueError as e:
        raise ValueError(restore(str(e))) from None
    left_out: dict[str, str] = {}
    for key, val in list(pairs.items()):
        problems = [p for h, (_, p) in holes.items() if h in key or h in val]
        if problems:
            del pairs[key]
            left_out[restore(key)] = "; ".join(problems)
    return pairs, left_out


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
    """``KEY="a b",KEY2=c`` → a dict, split as supervisord's ``dict_of_key_value_pairs``
    splits it: words of a non-POSIX ``shlex`` (letters, digits, ``_`` and ``/.+-():``,
    or a quoted string kept with its quotes; no backslash escapes), taken as ``KEY =
    VALUE`` triples each followed by one separator token (a comma), every quote at
    either end of a value then stripped (``"'hello'"`` is ``hello``, ``"\\\\srv"``
    keeps its four backslashes). Raises ValueError when the words do not form such
    triples."""
    lexer = shlex.shlex(value)
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
        pairs[triple[0]] = triple[2].strip("'\"")
    return pairs
