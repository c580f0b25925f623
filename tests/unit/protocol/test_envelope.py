"""Envelope: every message type round-trips; bad shapes are BAD_REQUEST, extras ignored."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.envelope import (
    ErrorBody,
    Event,
    Hello,
    Request,
    Response,
    Welcome,
    decode_message,
)
from protocol.errors import BadRequest, StaleEpoch
from protocol.framing import FrameDecoder, encode_frame
from protocol.identity import Identity

names = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/"),
                min_size=1, max_size=20)
ids = st.integers(0, 2**63 - 1)
plain = st.none() | st.integers(-10, 10) | st.text(max_size=5) | st.binary(max_size=5)
params = st.dictionaries(st.text(max_size=8), plain, max_size=4)
caps = st.dictionaries(names, st.integers(1, 9), max_size=4)
identities = st.builds(Identity, st.uuids().map(str), st.integers(1, 2**22),
                       st.integers(0, 2**40), st.uuids().map(str))

messages = st.one_of(
    st.builds(Hello, st.sampled_from(["admin", "viewer"]), caps, st.just(1), st.text(max_size=8)),
    st.builds(Welcome, identities, caps, st.sampled_from(["admin", "viewer"])),
    st.builds(Request, ids, names, params, st.none() | ids),
    st.builds(Response, ids, plain),
    st.builds(Response, st.none() | ids, st.none(),
              st.builds(ErrorBody, names, st.text(max_size=10), params)),
    st.builds(Event, names, ids, plain),
)


@given(messages)
def test_every_message_type_round_trips_through_a_frame(msg):
    (frame,) = FrameDecoder().feed(encode_frame(msg.to_wire()))
    assert decode_message(frame) == msg


@given(st.dictionaries(st.sampled_from(["t", "id", "m", "p", "epoch", "ok", "err", "proto",
                                        "role", "want", "stream", "cursor", "identity",
                                        "capabilities", "x"]),
                       plain | st.sampled_from(["req", "res", "evt", "hello", "welcome"])
                       | params, max_size=8))
def test_arbitrary_maps_decode_or_raise_bad_request(obj):
    try:
        decode_message(obj)
    except BadRequest:
        pass


def test_unknown_extra_keys_are_ignored():
    msg = decode_message({"t": "req", "id": 3, "m": "x", "p": {}, "future": [1, 2]})
    assert msg == Request(3, "x", {}, None)


@pytest.mark.parametrize("obj, field", [
    ({"t": "req", "m": "x"}, "id"),
    ({"t": "req", "id": "3", "m": "x"}, "id"),
    ({"t": "req", "id": True, "m": "x"}, "id"),
    ({"t": "req", "id": -1, "m": "x"}, "id"),
    ({"t": "req", "id": 1, "m": ""}, "m"),
    ({"t": "req", "id": 1, "m": "x", "p": [1]}, "p"),
    ({"t": "hello", "proto": 1, "role": "root"}, "role"),
    ({"t": "hello", "proto": 1, "role": "admin", "want": {"a": 0}}, "want"),
    ({"t": "evt", "stream": "s"}, "cursor"),
])
def test_missing_or_mistyped_fields_name_the_field(obj, field):
    with pytest.raises(BadRequest) as e:
        decode_message(obj)
    assert e.value.data.get("field") == field


def test_unknown_type_is_bad_request():
    with pytest.raises(BadRequest, match="unknown message type"):
        decode_message({"t": "nope"})


def test_error_body_rebuilds_the_registered_exception():
    body = ErrorBody("STALE_EPOCH", "old", {"current": 7})
    exc = body.to_exception()
    assert isinstance(exc, StaleEpoch) and exc.data == {"current": 7}
    odd = ErrorBody("FROM_THE_FUTURE", "x").to_exception()
    assert odd.code_str == "FROM_THE_FUTURE"
