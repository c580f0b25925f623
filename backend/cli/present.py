"""How values look in the human output of every command: one formatter, one table,
one rule for colour. ``--json`` never goes through here.

- ``None`` → ``-``, booleans → ``yes``/``no``, lists joined with ``, ``, mappings as
  ``key=value`` pairs;
- durations ``1.5s``, ``45s``, ``3m12s``, ``2h05m``, ``3d04h``; sizes ``512 B``, ``21.4 MiB``;
  timestamps in local time ``2026-12-01 14:05:09``;
- tables aligned on the visible width, so colour never shifts a column;
- colour only on a terminal and never when ``NO_COLOR`` is set (https://no-color.org).
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any, TextIO

__all__ = ["ago", "colour_for", "dur", "fields", "identity", "neutralise", "paint", "percent",
           "size", "table", "use_colour", "value", "when"]

# C0 controls but TAB, DEL, and C1 controls (a decoded 0x9b is CSI on many terminals).
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}


def neutralise(text: str) -> str:
    """``text`` with every terminal control character written out as ``\\xNN``: what an
    app or a config wrote (output, a command line, an environment) never drives the
    terminal."""
    return text.translate(_CONTROLS)


_ANSI = {"green": "32", "red": "31", "yellow": "33", "dim": "2", "bold": "1"}
_STATE_COLOUR = {"ready": "green", "running": "green", "succeeded": "green",
                 "clean": "green", "valid": "green", "success": "green",
                 "no-change": "green",
                 "failed": "red", "fatal": "red", "unknown": "red", "timed_out": "red",
                 "recovery_required": "red", "blocked": "red", "uncertain": "red",
                 "starting": "yellow", "stopping": "yellow", "restarting": "yellow",
                 "backoff": "yellow", "admitted": "yellow", "pending": "yellow",
                 "stopped": "dim", "exited": "dim", "withdrawn": "dim"}
_colour = False


def use_colour(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Turn colour on for output to ``stream`` when it is a terminal and ``NO_COLOR`` is
    unset (or empty). Returns the decision."""
    global _colour
    env = os.environ if environ is None else environ
    _colour = bool(stream.isatty()) and not env.get("NO_COLOR")
    return _colour


def paint(text: str, colour: str | None) -> str:
    if not _colour or colour is None or colour not in _ANSI:
        return text
    return f"\x1b[{_ANSI[colour]}m{text}\x1b[0m"


def colour_for(state: str) -> str | None:
    """The colour of a state word (the first word decides: ``unknown (last seen …)``)."""
    return _STATE_COLOUR.get(state.split(" ", 1)[0])


def value(v: Any) -> str:
    """Any answer value as a human reads it."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".")
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) for x in v) if v else "-"
    if isinstance(v, dict):
        return ", ".join(f"{k}={value(x)}" for k, x in v.items()) if v else "-"
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return str(v)


def dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds if seconds > 0 else 0.0:.1f}s"   # never "-0.0s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def span(seconds: float | None) -> str:
    """A configured duration as the operator wrote it: ``5s``, ``0.25s``, ``1m30s``.
    Unlike ``dur`` (a measured time), a whole number never gains a ``.0``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{value(float(seconds))}s"
    return dur(seconds)


def percent(p: float | None) -> str:
    return "-" if p is None else f"{p:.1f}%"


def size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    scaled = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            break
    return f"{scaled:.1f} {unit}"


def when(ts: float | None) -> str:
    """A wall-clock timestamp in local time."""
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    return f"{dur((time.time() if now is None else now) - ts)} ago"


def table(rows: list[list[str]], header: list[str],
          colours: list[list[str | None]] | None = None) -> str:
    """Columns aligned on their widest cell; ``colours`` (same shape as ``rows``)
    paints cells after padding. Trailing spaces are trimmed."""
    rows = [[neutralise(c) for c in row] for row in rows]   # painted below, not in them
    widths = [max(cells(c) for c in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(pad(h, w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for i, row in enumerate(rows):
        tint = colours[i] if colours is not None else [None] * len(row)
        out = [paint(pad(c, w), t) if t else pad(c, w)
               for c, w, t in zip(row, widths, tint, strict=True)]
        lines.append("  ".join(out).rstrip())
    return "\n".join(lines)


def cells(text: str) -> int:
    """The terminal cells ``text`` takes: a wide character (CJK) two, a combining mark
    none (a job key may hold any printable character; ``len`` misaligned the columns
    after it)."""
    if text.isascii():
        return len(text)
    import unicodedata  # only for such text: the status path imports little
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def pad(text: str, width: int) -> str:
    """``text`` padded with spaces to ``width`` terminal cells."""
    return text + " " * max(0, width - cells(text))


def fields(pairs: list[tuple[str, Any]], indent: str = "") -> str:
    """``key: value`` lines with the values aligned; values already strings are kept,
    anything else goes through :func:`value`."""
    if not pairs:
        return ""
    width = max(len(k) for k, _ in pairs) + 1
    return "\n".join(f"{indent}{(k + ':').ljust(width)} "
                     f"{v if isinstance(v, str) else value(v)}".rstrip() for k, v in pairs)


def identity(ident: dict[str, Any] | None) -> str:
    """``alice:staff (+audio, video) umask 0027``, or ``the owner's user``."""
    ident = ident or {}
    out = str(ident["user"]) if ident.get("user") else "the owner's user"
    out += f":{ident['group']}" if ident.get("group") else ""
    if ident.get("supplementary_groups"):
        out += f" (+{', '.join(ident['supplementary_groups'])})"
    if ident.get("umask") is not None:
        umask = ident["umask"]
        out += f" umask {umask:04o}" if isinstance(umask, int) else f" umask {umask}"
    if "resolved" in ident:
        res = ident["resolved"]
        out += (f" (uid {res['uid']}, gid {res['gid']}, home {res.get('home') or '-'})"
                if res else " (the name no longer exists)")
    return out
