"""Split a byte stream into log records: lines, over-long line chunks and flushed partials.

Pure and allocation-light: the hot path is one ``split`` per fed chunk and, through
:meth:`LineSplitter.split`, no object per record besides its data. Every byte
fed comes out again, in order and byte-exact (binary, invalid UTF-8 and NUL included),
except the ``\\n`` separators, which are removed.

Flags (stored with each journal record, never renumbered):

- ``CONTINUED`` (1): this chunk of a line longer than ``max_line`` is followed by more of
  the same line in the next record.
- ``PARTIAL`` (2): the record was flushed without a newline (quiet pipe or EOF).
"""

from __future__ import annotations

from typing import Final, cast

__all__ = ["CONTINUED", "MAX_LINE", "PARTIAL", "LineSplitter"]

CONTINUED: Final = 1
PARTIAL: Final = 2
MAX_LINE: Final = 16384


class LineSplitter:
    """Turns fed byte chunks into ``(record, flags)`` pairs.

    Invariant: the pending partial line is never longer than ``max_line``; every record
    returned is at most ``max_line`` bytes; feeding the same bytes in any split gives the
    same records.
    """

    __slots__ = ("_max", "_parts", "_plen")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        """Raises ``ValueError`` if ``max_line`` is not a positive int."""
        if isinstance(max_line, bool) or not isinstance(max_line, int) or max_line <= 0:
            raise ValueError("max_line must be a positive int")
        self._max = max_line
        self._parts: list[bytes | bytearray] = []
        self._plen = 0

    @property
    def pending_bytes(self) -> int:
        """Length of the partial line waiting for a newline (0 if none)."""
        return self._plen

    def feed(self, data: bytes | bytearray) -> list[tuple[bytes, int]]:
        """Add ``data``; return the records it completes, in order, as ``(bytes, flags)``
        pairs. Raises nothing."""
        if not data:
            return []
        records, flags = self._split(bytes(data))
        lines = cast("list[bytes]", records)  # bytes in, bytes out
        if flags is None:
            return [(line, 0) for line in lines]
        return list(zip(lines, flags, strict=True))

    def split(self, data: bytes | bytearray) -> tuple[list[bytes | bytearray], list[int] | None]:
        """Add ``data``; return the records it completes as two parallel lists: their
        data and their flags, or ``None`` for the flags when all are 0 (no over-long line
        among them). The records are those :meth:`feed` returns, but no per-record
        object is made besides the data, and complete lines come as ``bytearray``: SQLite
        binds one without the adapter lookup it makes for every ``bytes`` (measured: the
        journal's writer inserts about 1.5x the rows per second). Raises nothing."""
        if not data:
            return [], None
        return self._split(bytearray(data))

    def _split(self, data: bytes | bytearray,
               ) -> tuple[list[bytes | bytearray], list[int] | None]:
        """Records of ``data`` (of the type of ``data`` when no partial line was pending)."""
        if data.find(b"\n") < 0:
            # Keep pieces in a list: re-joining on every newline-less chunk would be
            # quadratic for an app that writes a long line a few bytes at a time.
            self._parts.append(data)
            self._plen += len(data)
            return self._flagged(self._spill()) if self._plen > self._max else ([], None)
        if self._parts:
            self._parts.append(data)
            data = type(data)(b"".join(self._parts))
            self._parts = []
        lines: list[bytes | bytearray] = data.split(b"\n")  # type: ignore[assignment]
        tail = lines.pop()
        limit = self._max
        self._plen = len(tail)
        if len(data) <= limit or max(map(len, lines)) <= limit:
            if tail:
                self._parts.append(tail)
                if self._plen > limit:
                    spilled, flags = self._flagged(self._spill())
                    return lines + spilled, [0] * len(lines) + flags
            return lines, None
        out: list[tuple[bytes, int]] = []
        for line in lines:
            if len(line) <= limit:
                out.append((line, 0))  # type: ignore[arg-type]
            else:
                out.extend(self._chunks(line))  # type: ignore[arg-type]
        if tail:
            self._parts.append(tail)
            if self._plen > limit:
                out.extend(self._spill())
        return self._flagged(out)

    @staticmethod
    def _flagged(records: list[tuple[bytes, int]]) -> tuple[list[bytes | bytearray], list[int]]:
        return [d for d, _ in records], [f for _, f in records]

    def take_partial(self) -> tuple[bytes, int] | None:
        """Flush the pending partial line as one ``PARTIAL`` record, or ``None``.

        Raises nothing.
        """
        if not self._plen:
            return None
        data = b"".join(self._parts)
        self._parts = []
        self._plen = 0
        return (data, PARTIAL)

    def _spill(self) -> list[tuple[bytes, int]]:
        """Emit the chunks of an over-long pending line while more than ``max_line``
        bytes are pending; keep the rest."""
        data = b"".join(self._parts)
        out, start = [], 0
        while len(data) - start > self._max:
            end = chunk_end(data, start, self._max)
            out.append((data[start:end], CONTINUED))
            start = end
        rest = data[start:]
        self._parts = [rest]
        self._plen = len(rest)
        return out

    def _chunks(self, line: bytes) -> list[tuple[bytes, int]]:
        """Split one complete over-long line; the last chunk carries no flag."""
        out, start = [], 0
        while start < len(line):
            end = chunk_end(line, start, self._max)
            out.append((line[start:end], CONTINUED))
            start = end
        out[-1] = (out[-1][0], 0)
        return out


def chunk_end(data: bytes, start: int, limit: int) -> int:
    """Where the chunk of an over-long line that begins at ``start`` ends: ``limit`` bytes
    on, or before a UTF-8 character the cut would split (one whose lead byte is at most
    three bytes back), so that each record decodes on its own (a reader that decodes
    records one by one would show U+FFFD on both sides). Bytes that are not UTF-8 are
    cut at ``limit``. Depends only on the bytes up to the cut: the same line gives the
    same chunks however it was fed."""
    end = start + limit
    if end >= len(data):
        return len(data)
    back = end
    while back > start + 1 and end - back < 3 and data[back] & 0xC0 == 0x80:
        back -= 1
    return back if back < end and data[back] & 0xC0 == 0xC0 else end
