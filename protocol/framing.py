"""Frames: a 4-byte big-endian length, then exactly one msgpack map of that many bytes.

The decoder is incremental so a stream socket can hand it whatever ``recv`` returned:
half a header, several frames, or one frame in many pieces. It rejects a bad header as
soon as the four length bytes are in, so an oversized declared length is never buffered
or allocated.

A server decodes what clients send with :data:`REQUEST_MAX_ITEMS`: a frame of millions
of one-byte items (``\x80``, an empty map, becomes a 64-byte dict) would otherwise grow
some 70-fold in memory. Answers, decoded by clients from the daemon they checked, are
bounded by the frame size alone.
"""

from __future__ import annotations

import struct

import msgpack

from .errors import BadFrame, BadRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["DEFAULT_MAX_FRAME", "HEADER", "REQUEST_MAX_ITEMS", "FrameDecoder",
           "encode_frame", "pack", "unpack"]

DEFAULT_MAX_FRAME = 4 * 1024 * 1024
HEADER = struct.Struct(">I")
REQUEST_MAX_ITEMS = 262_144
"""Array elements and map entries of one request, all its arrays and maps together: the
largest requests carry some 100,000 (the owner's ``stack.stop_order``, names of every
app). Decoded, such a frame holds at most some 20 MiB besides its strings, and the
decoding stops at the first array or map past the count (msgpack's own limits refuse
one array or map larger than it before it is built)."""


class _TooMany(Exception):
    pass


def _counter(max_items: int) -> Any:
    """A msgpack hook counting the items of each array or map built (an exception
    raised in it stops the decoding)."""
    left = max_items

    def count(obj: Any) -> Any:
        nonlocal left
        left -= len(obj)
        if left < 0:
            raise _TooMany
        return obj
    return count


def pack(obj: dict[str, Any]) -> bytes:
    """msgpack bytes of one map (str for text, bin for bytes)."""
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(body: bytes, max_items: int | None = None) -> dict[str, Any]:
    """Decode one frame body into a map; with ``max_items``, one of at most that many
    array elements and map entries, all together.

    Raises BadFrame for anything that is not exactly one msgpack map with string keys,
    or holds more items.
    """
    try:
        if max_items is None:
            obj = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
        else:
            count = _counter(max_items)
            obj = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True,
                                  max_array_len=max_items, max_map_len=max_items,
                                  object_hook=count, list_hook=count)
    except (_TooMany, ValueError) as exc:
        if max_items is not None and (isinstance(exc, _TooMany) or "exceeds max" in str(exc)):
            raise BadFrame(f"frame holds more than {max_items} array elements and map "
                           "entries", {"max_items": max_items}) from None
        raise BadFrame(f"undecodable frame: {type(exc).__name__}") from None
    except Exception as exc:  # the C decoder raises several unrelated types on junk
        raise BadFrame(f"undecodable frame: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise BadFrame(f"frame is a {type(obj).__name__}, not a map")
    return obj


def encode_frame(obj: dict[str, Any], max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """Header + body for one map.

    Raises BadFrame when the encoded body is larger than ``max_frame`` and BadRequest
    when ``obj`` holds something msgpack cannot encode (an integer beyond 64 bits).
    """
    try:
        body = pack(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRequest(f"message cannot be encoded: {exc}") from None
    if len(body) > max_frame:
        raise BadFrame(f"frame of {len(body)} bytes exceeds the maximum of {max_frame}")
    return HEADER.pack(len(body)) + body


class FrameDecoder:
    """Incremental decoder. ``feed`` returns every complete frame decoded so far.

    After an error the decoder is poisoned: the stream position is lost, so the
    connection must be closed (every later ``feed`` raises BadFrame again).
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME,
                 max_items: int | None = None) -> None:
        """``max_items``: see :func:`unpack` (a server passes REQUEST_MAX_ITEMS)."""
        if max_frame <= 0:
            raise ValueError("max_frame must be positive")
        self.max_frame = max_frame
        self.max_items = max_items
        self._buf = bytearray()
        self._need: int | None = None  # body length once the header is read
        self._broken: BadFrame | None = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add bytes; return the maps completed by them (possibly none).

        Raises BadFrame on a zero or oversized length or an undecodable body. Frames that
        were complete before the bad one are returned first; the error is then raised by
        :meth:`check` or the next ``feed``.
        """
        self.check()
        self._buf += data
        frames: list[dict[str, Any]] = []
        try:
            while True:
                frame = self._next()
                if frame is None:
                    return frames
                frames.append(frame)
        except BadFrame as exc:
            self._broken = exc
            self._buf.clear()
            if not frames:
                raise
            return frames

    def check(self) -> None:
        """Raise the stream's BadFrame, if it has one (call before waiting for more)."""
        if self._broken is not None:
            raise self._broken

    def _next(self) -> dict[str, Any] | None:
        if self._need is None:
            if len(self._buf) < HEADER.size:
                return None
            (n,) = HEADER.unpack_from(self._buf)
            if n == 0:
                raise BadFrame("zero-length frame")
            if n > self.max_frame:
                raise BadFrame(f"declared frame of {n} bytes exceeds the maximum of "
                               f"{self.max_frame}", {"length": n, "max": self.max_frame})
            del self._buf[: HEADER.size]
            self._need = n
        if len(self._buf) < self._need:
            return None
        body = bytes(self._buf[: self._need])
        del self._buf[: self._need]
        self._need = None
        return unpack(body, self.max_items)
