"""Frames: round trips, incremental decoding, and hostile input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import BadFrame
from protocol.framing import FrameDecoder, encode_frame, pack

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=50) | st.binary(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=5),
    max_leaves=20,
)
maps = st.dictionaries(st.text(max_size=10), values, max_size=8)


@given(st.lists(maps, min_size=1, max_size=6), st.data())
def test_any_split_of_a_stream_decodes_to_the_same_maps(frames, data):
    stream = b"".join(encode_frame(f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    dec = FrameDecoder()
    out = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out.extend(dec.feed(stream[prev:cut]))
        prev = cut
    assert out == frames
    assert dec.buffered == 0


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(16, 4096))
def test_arbitrary_bytes_give_frames_or_bad_frame(junk, max_frame):
    dec = FrameDecoder(max_frame)
    try:
        frames = dec.feed(junk)
    except BadFrame:
        with pytest.raises(BadFrame):
            dec.feed(b"")  # poisoned: the stream position is lost
        return
    assert all(isinstance(f, dict) for f in frames)
    if dec._broken is not None:  # frames before a bad one come first, then the error
        with pytest.raises(BadFrame):
            dec.check()
    assert dec.buffered <= max(len(junk), 4)


def test_oversized_declared_length_is_refused_at_the_header():
    dec = FrameDecoder(max_frame=1024)
    with pytest.raises(BadFrame) as e:
        dec.feed(struct.pack(">I", 2**32 - 1) + b"x" * 10)
    assert e.value.data == {"length": 2**32 - 1, "max": 1024}
    assert dec.buffered == 0


def test_good_frames_before_a_bad_one_are_delivered_then_the_error():
    dec = FrameDecoder(max_frame=64)
    assert dec.feed(encode_frame({"a": 1}) + struct.pack(">I", 65)) == [{"a": 1}]
    with pytest.raises(BadFrame):
        dec.check()


def test_zero_length_frame_is_bad():
    with pytest.raises(BadFrame, match="zero-length"):
        FrameDecoder().feed(b"\0\0\0\0")


@pytest.mark.parametrize("body", [pack({"a": 1})[:-1] + b"\xc1", b"\x93\x01\x02\x03",
                                  b"\xa3abc", b"\x81\x01\x02"])
def test_non_map_or_junk_body_is_bad(body):
    with pytest.raises(BadFrame):
        FrameDecoder().feed(struct.pack(">I", len(body)) + body)


def test_encode_refuses_frames_over_the_maximum():
    with pytest.raises(BadFrame):
        encode_frame({"x": b"a" * 2000}, max_frame=1000)


def test_several_frames_in_one_read_and_one_frame_in_bytes():
    a, b = encode_frame({"a": 1}), encode_frame({"b": b"\x00\xff"})
    dec = FrameDecoder()
    assert dec.feed(a + b[:3]) == [{"a": 1}]
    out = []
    for i in range(3, len(b)):
        out += dec.feed(b[i:i + 1])
    assert out == [{"b": b"\x00\xff"}]


def test_a_server_counts_the_items_of_every_array_and_map_together() -> None:
    """Arrays each under msgpack's own per-array limit add up: 32 arrays of 65,536 empty
    maps are as large decoded as one of 2M."""
    from protocol.framing import REQUEST_MAX_ITEMS, FrameDecoder
    per = 65_536
    nested = b"\xdc\x00\x20" + (b"\xdd" + struct.pack(">I", per) + b"\x80" * per) * 32
    body = b"\x82\xa1t\xa3req\xa1p\x81\xa1x" + nested
    frame = struct.pack(">I", len(body)) + body
    with pytest.raises(BadFrame) as refused:
        FrameDecoder(max_items=REQUEST_MAX_ITEMS).feed(frame)
    assert refused.value.data == {"max_items": REQUEST_MAX_ITEMS}
    assert len(FrameDecoder().feed(frame)[0]["p"]["x"]) == 32   # answers: frame size only


def test_a_page_of_logs_decodes_on_the_client_and_a_big_request_on_the_server() -> None:
    from protocol.framing import REQUEST_MAX_ITEMS, FrameDecoder
    page = {"t": "res", "id": 1, "ok": {"records": [
        {"id": i, "ts": 1.5, "stack": "s", "app": "a", "instance": 0, "generation": 1,
         "stream": "stdout", "data": b"x" * 20, "flags": 0} for i in range(10_000)]}}
    assert FrameDecoder().feed(encode_frame(page)) == [page]
    names = {"t": "req", "id": 1, "m": "stack.stop_order",
             "p": {"stacks": [[f"app{i}" for i in range(100_000)]]}}
    assert FrameDecoder(max_items=REQUEST_MAX_ITEMS).feed(encode_frame(names)) == [names]
