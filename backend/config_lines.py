"""Where in tenure.toml a key lives: dotted key paths and their line numbers.

``tomllib`` returns plain dicts without positions, so a semantic error found after parsing
is located by scanning the text again. The scan understands table headers (``[a.b]``,
``[[a.b]]``), dotted and quoted keys (``a."b.c" = 1``), inline tables
(``ready = { port = 1 }``) and multi-line strings, which is every form a tenure.toml uses.
It is best effort: when the exact key is not written down (a missing required key, a
default), the line of the closest enclosing table or key is reported instead.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Sequence

__all__ = ["KeyPath", "find_line", "format_key", "long_integer_location",
           "syntax_error_location"]

KeyPath = tuple[str | int, ...]
"""A path into the parsed document; ``int`` parts index into arrays."""

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SYNTAX_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_SYNTAX_END = re.compile(r"\s*\(at end of document\)\s*$")
_DECLARED = re.compile(r"Cannot declare (\(.*\)) twice")
_OVERWRITE = "Cannot overwrite a value"
_INLINE_TWICE = re.compile(r"Duplicate inline table key ('.*')$")


def format_key(path: KeyPath) -> str:
    """Render ``path`` as a TOML dotted key; non-bare parts are quoted, indexes are ``[i]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = part if _BARE.fullmatch(part) else _quote(part)
        out = f"{out}.{text}" if out else text
    return out


def _quote(part: str) -> str:
    escaped = part.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped) + '"'


def syntax_error_location(message: str, text: str) -> tuple[str, int, str]:
    """Split a ``tomllib`` error message into ``(problem, line, key)``.

    ``line`` is 1-based (the last line for "at end of document"); ``key`` is the dotted
    key a "Cannot declare ... twice" message names, else "". Never raises.
    """
    line = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
    m = _SYNTAX_AT.search(message)
    if m:
        line = int(m.group(1))
        message = message[: m.start()]
    else:
        e = _SYNTAX_END.search(message)
        if e:
            message = message[: e.start()]
    key = ""
    twice = _INLINE_TWICE.match(message)
    if message.startswith(_OVERWRITE) or twice:
        at = _key_at(text, line)
        if at is not None:
            return (f"its key {twice.group(1)} is given twice" if twice else
                    "is given twice (a key can be given only once in its table)"), at[1], \
                format_key(at[0])
    d = _DECLARED.search(message)
    if d:
        try:
            parts = ast.literal_eval(d.group(1))
        except (ValueError, SyntaxError):
            parts = None
        if isinstance(parts, tuple) and all(isinstance(p, str) for p in parts):
            key = format_key(parts)
            message = "is defined twice (a TOML table can be defined only once)"
    return message, line, key


# a decimal integer as TOML writes it: where a value begins, an optional sign, digits
# with single underscores between them
_DECIMAL = re.compile(r"(?:^|(?<=[=,\[{]))[ \t]*[+-]?([0-9](?:_?[0-9])*)", re.MULTILINE)


def long_integer_location(text: str) -> tuple[int | None, str]:
    """``(line, key)`` of the first decimal integer in ``text`` with more digits than
    Python converts (``sys.get_int_max_str_digits()``, 4300; tomllib then raises
    ValueError, not TOMLDecodeError): its line and the key it is the value of (or
    that of the table or inline table it is in), ``(None, "")`` when none is found.
    Best effort, like :func:`find_line`; never raises."""
    limit = sys.get_int_max_str_digits()
    for m in _DECIMAL.finditer(text):
        if limit and len(m.group(1).replace("_", "")) > limit:
            line = text.count("\n", 0, m.start(1)) + 1
            at = _key_at(text, line)
            return line, format_key(at[0]) if at is not None else ""
    return None, ""


def find_line(text: str, path: KeyPath) -> int | None:
    """The 1-based line that best locates ``path`` in ``text``, or None.

    The line whose key (table header + dotted key, or a key reached inside an inline
    table) covers the longest prefix of ``path`` wins; the first such line on ties.
    Never raises, even for text that is not valid TOML.
    """
    target = _strip_indexes(path)
    best_line, best_len = None, 0
    # the first sub-table of the table ``path`` is in (a table declared only by its
    # sub-tables, e.g. an app with [..ready] and no line of its own), when nothing else
    near_line: int | None = None
    prefix: tuple[str, ...] = ()
    for lineno, line in _logical_lines(text):
        stripped = line.lstrip()
        if stripped.startswith("["):
            header = _parse_header(stripped)
            if header is None:
                continue
            prefix = header
            covered = _common_prefix(header, target)
            if covered in (len(header), len(target)) and covered > best_len:
                best_line, best_len = lineno, covered
            elif 0 < covered == len(target) - 1 and near_line is None:
                near_line = lineno
            continue
        parsed = _parse_key(stripped, 0)
        if parsed is None:
            continue
        keys, pos = parsed
        if not stripped[pos:].lstrip().startswith("="):
            continue
        full = prefix + keys
        covered = _common_prefix(full, target)
        if covered not in (len(full), len(target)):
            continue
        if covered == len(full):
            covered += _inline_depth(stripped[pos:], target[covered:])
        if covered > best_len:
            best_line, best_len = lineno, covered
    return best_line if best_line is not None else near_line


def _key_at(text: str, line: int) -> tuple[tuple[str, ...], int] | None:
    """The full key (its table's header, then its own dotted key) of the value that
    line ``line`` is part of, and the line the key is on: the last key set at or before
    it in its table. None when the line is a table header or the table sets no key
    before it."""
    found: tuple[tuple[str, ...], int] | None = None
    prefix: tuple[str, ...] = ()
    for lineno, written in _logical_lines(text):
        if lineno > line:
            break
        stripped = written.lstrip()
        if stripped.startswith("["):
            prefix, found = _parse_header(stripped) or prefix, None
            continue
        parsed = _parse_key(stripped, 0)
        if parsed is not None and stripped[parsed[1]:].lstrip().startswith("="):
            found = prefix + parsed[0], lineno
    return found


def _strip_indexes(path: KeyPath) -> tuple[str, ...]:
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            break
        out.append(part)
    return tuple(out)


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _inline_depth(rest: str, remaining: Sequence[str]) -> int:
    """How many of ``remaining`` keys appear, nested in order, in an inline-table value."""
    depth, pos = 0, 0
    for key in remaining:
        pattern = re.compile(r"[{,]\s*" + re.escape(_written(key)) + r"\s*=")
        m = pattern.search(rest, pos)
        if m is None:
            break
        depth, pos = depth + 1, m.end()
    return depth


def _written(key: str) -> str:
    return key if _BARE.fullmatch(key) else _quote(key)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Numbered lines, skipping comments, blank lines and lines that start inside a
    multi-line string (whose content may look like keys or headers)."""
    out: list[tuple[int, str]] = []
    open_delim: str | None = None
    for lineno, line in enumerate(text.split("\n"), start=1):
        starts_inside = open_delim is not None
        open_delim = _scan_strings(line, open_delim)
        if not starts_inside and line.strip() and not line.lstrip().startswith("#"):
            out.append((lineno, line))
    return out


def _scan_strings(line: str, open_delim: str | None) -> str | None:
    """The multi-line string delimiter still open at the end of ``line``, or None."""
    i = 0
    while i < len(line):
        if open_delim is not None:
            end = _find_close(line, i, open_delim)
            if end < 0:
                return open_delim
            i, open_delim = end, None
            continue
        c = line[i]
        if c == "#":
            return None
        if line.startswith(('"""', "'''"), i):
            open_delim, i = line[i:i + 3], i + 3
        elif c in "\"'":
            end = _find_close(line, i + 1, c)
            i = len(line) if end < 0 else end
        else:
            i += 1
    return open_delim


def _find_close(line: str, start: int, delim: str) -> int:
    """Index just after ``delim`` closing a string from ``start``; -1 if not on this line.
    Backslash escapes count only in basic (double-quoted) strings."""
    i = start
    while i < len(line):
        if delim[0] == '"' and line[i] == "\\":
            i += 2
            continue
        if line.startswith(delim, i):
            end = i + len(delim)
            while len(delim) == 3 and line.startswith(delim[0], end) and end - i < 5:
                end += 1  # a multi-line string may end with up to two extra quotes
            return end
        i += 1
    return -1


def _parse_header(line: str) -> tuple[str, ...] | None:
    pos = 2 if line.startswith("[[") else 1
    parsed = _parse_key(line, pos)
    if parsed is None:
        return None
    keys, end = parsed
    return keys if line[end:].lstrip().startswith("]") else None


def _parse_key(s: str, pos: int) -> tuple[tuple[str, ...], int] | None:
    """Parse a (dotted) key starting at ``pos``; return its parts and the end position."""
    parts: list[str] = []
    while True:
        pos = _skip_space(s, pos)
        part = _parse_simple_key(s, pos)
        if part is None:
            return None
        parts.append(part[0])
        pos = _skip_space(s, part[1])
        if pos < len(s) and s[pos] == ".":
            pos += 1
            continue
        return tuple(parts), pos


def _parse_simple_key(s: str, pos: int) -> tuple[str, int] | None:
    if pos >= len(s):
        return None
    if s[pos] == "'":
        end = s.find("'", pos + 1)
        return None if end < 0 else (s[pos + 1:end], end + 1)
    if s[pos] == '"':
        return _parse_basic_string(s, pos)
    m = _BARE.match(s, pos)
    return (m.group(0), m.end()) if m else None


def _parse_basic_string(s: str, pos: int) -> tuple[str, int] | None:
    i = pos + 1
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == '"':
            try:
                value = ast.literal_eval(s[pos:i + 1])
            except (ValueError, SyntaxError):
                return None
            return (value, i + 1) if isinstance(value, str) else None
        i += 1
    return None


def _skip_space(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in " \t":
        pos += 1
    return pos
