"""Frames: a 4-byte big-endian length, then exactly one msgpack map of that many bytes.

The decoder is incremental so a stream socket can hand it whatever ``recv`` returned:
half a header, several frames, or one frame in many pieces. It rejects a bad header as
soon as the four length bytes are in, so an oversized declared length is never buffered
or allocated.
"""

from __future__ import annotations

import struct

import msgpack

from .errors import BadFrame, BadRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["DEFAULT_MAX_FRAME", "HEADER", "FrameDecoder", "encode_frame", "pack", "unpack"]

DEFAULT_MAX_FRAME = 4 * 1024 * 1024
HEADER = struct.Struct(">I")


def pack(obj: dict[str, Any]) -> bytes:
    """msgpack bytes of one map (str for text, bin for bytes)."""
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(body: bytes) -> dict[str, Any]:
    """Decode one frame body into a map.

    Raises BadFrame for anything that is not exactly one msgpack map with string keys.
    """
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
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

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame <= 0:
            raise ValueError("max_frame must be positive")
        self.max_frame = max_frame
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
        return unpack(body)
