"""How ``tenure logs`` prints the journal's records.

The owner stores a line longer than 16 KiB as several records, each but the last flagged
``CONTINUED`` (owner/linesplit.py). Human output prints such a line once, whole: its
records are held per instance, launch and stream until the last one comes (other
instances' lines may come between them), up to ``JOIN_MAX`` bytes, beyond which the
line is printed in pieces of that size. ``--json`` prints the records as they are.

On a terminal, control characters in application output are shown as ``\\xNN`` instead
of being interpreted: an app must not be able to move the cursor, recolour, retitle or
rewrite what the operator sees. Piped, a line is written as the bytes the app wrote
(non-UTF-8 included). ``--json`` carries them losslessly: ``data`` is the record as
text, and when its bytes are not valid UTF-8, ``data_base64`` holds them exactly. A
record after some of its source's that log retention removed unread has
``retention_gap`` (backend.cli.loggaps).
"""

from __future__ import annotations

import sys

from .present import neutralise

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["CONTINUED_FLAG", "JOIN_MAX", "TENURE_FLAG", "Printer", "instance_label",
           "job_label", "neutralise"]

CONTINUED_FLAG = 1
"""Journal flag of a record followed by more of the same line (owner.linesplit.CONTINUED)."""
TENURE_FLAG = 4
"""Journal flag of a line tenure wrote into the app's stream (owner.notes.TENURE): shown
with the mark `` (tenure)``, which app output cannot produce (it always follows ``: ``)."""
TENURE_PREFIX = b"tenure: "
STREAM_MARK = {"stdout": "", "stderr": " (stderr)"}
JOIN_MAX = 1 << 20
"""Bytes of one cut line held before it is printed in pieces (a line without end must
not grow the reader without bound)."""



def instance_label(first: dict[str, Any], mark: str) -> tuple[str, str]:
    """``tenure logs``: each line after its instance, ``s/web/0 (stderr): ``."""
    return f"{first['stack']}/{first['app']}/{first['instance']}{mark}: ", ""


def job_label(first: dict[str, Any], mark: str) -> tuple[str, str]:
    """``tenure job logs`` (one job's output): the line alone, the mark after it."""
    return "", mark


class Printer:
    """Prints the records of one ``tenure logs`` (or ``job logs``) as they come, page by
    page (see the module docstring). ``grep`` (a compiled pattern, or None) selects
    lines: a cut line is matched whole in human output, each record with ``--json``.
    ``label`` gives a line's prefix and suffix from its first record and its stream's
    mark."""

    def __init__(self, as_json: bool, grep: Any, label: Any = instance_label) -> None:
        self._json, self._grep, self._label = as_json, grep, label
        self._tty = not as_json and sys.stdout.isatty()
        self._cut: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._gaps: dict[tuple[Any, ...], dict[str, int]] = {}

    def gaps(self, new: dict[tuple[Any, ...], dict[str, int]]) -> None:
        """With ``--json``, mark the next record printed of each source ``(stack, app,
        instance, stream)`` of ``new`` with its ``retention_gap`` (loggaps): records of
        it before that one were removed by log retention unread. Human output says it
        on stderr only."""
        if self._json:
            self._gaps.update(new)

    def page(self, recs: list[dict[str, Any]]) -> None:
        """Print ``recs`` (in id order); the records of a line not yet ended are held."""
        for r in recs:
            if self._json:
                self._record(r)
            else:
                self._take(r)
        sys.stdout.flush()

    def end(self) -> None:
        """Print the lines whose last record was not read (the read ends before it)."""
        for key in list(self._cut):
            self._line(self._cut.pop(key))
        sys.stdout.flush()

    def _take(self, r: dict[str, Any]) -> None:
        key = (r["stack"], r["app"], r["instance"], r.get("generation"), r["stream"])
        pieces = self._cut.pop(key, [])
        pieces.append(r)
        size = sum(len(p["data"]) for p in pieces)
        if r.get("flags", 0) & CONTINUED_FLAG and size < JOIN_MAX:
            self._cut[key] = pieces
            return
        self._line(pieces)

    def _line(self, pieces: list[dict[str, Any]]) -> None:
        """One printed line: the records of one line (or of its JOIN_MAX piece)."""
        first = pieces[0]
        data = b"".join(bytes(p["data"]) for p in pieces)
        mark = STREAM_MARK.get(first["stream"], "")
        if first.get("flags", 0) & TENURE_FLAG:
            mark, data = " (tenure)", data.removeprefix(TENURE_PREFIX)
        text = data.decode(errors="replace")
        if self._grep is not None and not self._grep.search(text):
            return
        prefix, suffix = self._label(first, mark)
        if self._tty:
            sys.stdout.write(f"{prefix}{neutralise(text)}{suffix}\n")
        else:
            _write_bytes(prefix.encode() + data + suffix.encode() + b"\n")

    def _record(self, r: dict[str, Any]) -> None:
        import json
        data = bytes(r["data"])
        text = data.decode(errors="replace")
        if self._grep is not None and not self._grep.search(text):
            return
        obj = {**r, "data": text}
        gap = self._gaps.pop((r["stack"], r["app"], r["instance"], r["stream"]), None)
        if gap is not None:
            obj["retention_gap"] = gap
        if text.encode() != data:   # not valid UTF-8: the bytes as they are, too
            import base64
            obj["data_base64"] = base64.b64encode(data).decode()
        sys.stdout.write(json.dumps(obj) + "\n")


def _write_bytes(line: bytes) -> None:
    """``line`` to stdout unchanged: through its byte stream (after what its text layer
    holds); a stream without one (a test's StringIO) gets the text with U+FFFD."""
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        out.write(line.decode(errors="replace"))
        return
    out.flush()
    buffer.write(line)
