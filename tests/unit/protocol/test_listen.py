"""Listening addresses: canonical spellings, precise refusals, and a fuzzed parser."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.listen import parse_listen


@pytest.mark.parametrize(("text", "family", "canonical"), [
    ("127.0.0.1:8080", socket.AF_INET, "127.0.0.1:8080"),
    ("0.0.0.0:80", socket.AF_INET, "0.0.0.0:80"),
    ("[::1]:8080", socket.AF_INET6, "[::1]:8080"),
    ("[0:0:0:0:0:0:0:1]:8080", socket.AF_INET6, "[::1]:8080"),
    ("[::]:443", socket.AF_INET6, "[::]:443"),
    ("unix:/run/api.sock", socket.AF_UNIX, "unix:/run/api.sock"),
])
def test_addresses_parse_to_their_canonical_spelling(text: str, family: int,
                                                     canonical: str) -> None:
    addr = parse_listen(text)
    assert addr.family == family and str(addr) == canonical
    assert parse_listen(str(addr)) == addr


@pytest.mark.parametrize(("text", "words"), [
    ("localhost:80", "not an IPv4 address"),
    ("127.0.0.1", "host:port"),
    ("127.0.0.1:0", "between 1 and 65535"),
    ("127.0.0.1:65536", "between 1 and 65535"),
    ("127.0.0.1:http", "must be a number"),
    ("::1:80", "not an IPv4 address"),
    ("[::1]80", "[addr]:port"),
    ("[fe80::1%eth0]:80", "scoped IPv6"),
    ("[nope]:80", "not an IPv6 address"),
    ("unix:run/a.sock", "absolute"),
    ("unix:/run/../a.sock", "normalised"),
    ("unix:/run//a.sock", "normalised"),
    ("unix:/" + "a" * 120, "longer than 100 bytes"),
    ("", "non-empty"),
])
def test_bad_addresses_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_listen(text)
    assert words in str(info.value), str(info.value)


@given(st.one_of(st.text(max_size=60), st.integers(), st.none(), st.binary(max_size=10)))
def test_the_parser_raises_nothing_but_value_error(value: object) -> None:
    try:
        addr = parse_listen(value)
    except ValueError:
        return
    assert parse_listen(str(addr)) == addr
