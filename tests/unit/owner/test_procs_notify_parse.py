"""sd_notify message parsing: pure, no sockets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from owner.notify import parse_message


def test_known_keys_are_kept_and_unknown_ones_dropped() -> None:
    msg = b"READY=1\nSTATUS=serving 3 clients\nX_CUSTOM=1\nnot a line\n\nMAINPID=42"
    assert parse_message(msg) == {"READY": "1", "STATUS": "serving 3 clients",
                                  "MAINPID": "42"}


def test_values_may_contain_equals_signs_and_the_last_repeat_wins() -> None:
    assert parse_message(b"STATUS=a=b\nSTATUS=c=d") == {"STATUS": "c=d"}


def test_a_line_that_is_not_utf8_is_skipped_and_the_rest_kept() -> None:
    """A STATUS= in another encoding dropped the whole datagram, READY=1 with it: the
    app was never ready (systemd honours READY=1 there)."""
    assert parse_message(b"MAINPID=7\nSTATUS=\xff\xfe bad\nREADY=1") == \
        {"MAINPID": "7", "READY": "1"}


def test_a_datagram_with_no_line_that_is_utf8_is_malformed() -> None:
    assert parse_message(b"STATUS=\xff") is None
    assert parse_message(b"\xff\n\xfe\n") is None
    assert parse_message(b"") == {} and parse_message(b"\n\n") == {}


@given(st.binary(max_size=256))
def test_fuzz_parse_never_raises(data: bytes) -> None:
    fields = parse_message(data)
    assert fields is None or all(isinstance(v, str) for v in fields.values())
