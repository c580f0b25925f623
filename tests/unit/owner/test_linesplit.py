"""LineSplitter: byte-exact records, 16 KiB chunking, partial flushes, any feed split."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from owner.linesplit import CONTINUED, MAX_LINE, PARTIAL, LineSplitter


def split_all(chunks: list[bytes], max_line: int = MAX_LINE) -> list[tuple[bytes, int]]:
    sp = LineSplitter(max_line)
    out: list[tuple[bytes, int]] = []
    for chunk in chunks:
        out += sp.feed(chunk)
    tail = sp.take_partial()
    if tail is not None:
        out.append(tail)
    return out


def reassemble(records: list[tuple[bytes, int]]) -> bytes:
    """Invert the splitter: a newline follows every record that ends a complete line."""
    return b"".join(d if flags & (CONTINUED | PARTIAL) else d + b"\n" for d, flags in records)


def test_complete_lines_lose_only_the_newline() -> None:
    sp = LineSplitter()
    assert sp.feed(b"a\n\nbc\r\n") == [(b"a", 0), (b"", 0), (b"bc\r", 0)]
    assert sp.pending_bytes == 0
    assert sp.take_partial() is None


def test_partial_line_waits_then_completes_or_flushes() -> None:
    sp = LineSplitter()
    assert sp.feed(b"hel") == []
    assert sp.feed(b"lo") == []
    assert sp.pending_bytes == 5
    assert sp.feed(b" world\nnext") == [(b"hello world", 0)]
    assert sp.take_partial() == (b"next", PARTIAL)
    assert sp.take_partial() is None
    assert sp.feed(b"\n") == [(b"", 0)]


def test_binary_bytes_kept_exactly() -> None:
    blob = bytes(range(256)).replace(b"\n", b"") + b"\xff\xfe\x00\xc3\x28"
    assert LineSplitter().feed(blob + b"\n") == [(blob, 0)]


def test_line_of_exactly_max_is_one_record() -> None:
    line = b"x" * MAX_LINE
    assert LineSplitter().feed(line + b"\n") == [(line, 0)]
    sp = LineSplitter()
    assert sp.feed(line) == []
    assert sp.feed(b"\n") == [(line, 0)]


def test_long_line_split_into_continued_chunks() -> None:
    line = bytes(11 + i % 240 for i in range(3 * MAX_LINE + 5))  # no 0x0a
    records = LineSplitter().feed(line + b"\n")
    assert [len(d) for d, _ in records] == [MAX_LINE, MAX_LINE, MAX_LINE, 5]
    assert [f for _, f in records] == [CONTINUED, CONTINUED, CONTINUED, 0]
    assert b"".join(d for d, _ in records) == line


def test_long_pending_line_spills_before_its_newline() -> None:
    sp = LineSplitter(max_line=4)
    assert sp.feed(b"abcdefghij") == [(b"abcd", CONTINUED), (b"efgh", CONTINUED)]
    assert sp.pending_bytes == 2
    assert sp.take_partial() == (b"ij", PARTIAL)


def test_bytearray_and_empty_input() -> None:
    sp = LineSplitter()
    assert sp.feed(b"") == []
    assert sp.feed(bytearray(b"a\nb")) == [(b"a", 0)]
    assert sp.take_partial() == (b"b", PARTIAL)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "16"])
def test_bad_max_line_rejected(bad: object) -> None:
    with pytest.raises(ValueError):
        LineSplitter(bad)  # type: ignore[arg-type]


# Newline-heavy bytes so that short, empty and over-long lines all occur.
stream_bytes = st.lists(
    st.one_of(st.just(b"\n"), st.binary(min_size=1, max_size=40)), max_size=40
).map(b"".join)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=300)
@given(data=stream_bytes, cuts=st.lists(st.integers(min_value=0), max_size=12),
       max_line=st.sampled_from([1, 3, 7, 64, MAX_LINE]))
def test_any_split_gives_the_same_records(data: bytes, cuts: list[int], max_line: int) -> None:
    whole = split_all([data], max_line)
    assert split_all(cut(data, cuts), max_line) == whole
    assert all(len(d) <= max_line for d, _ in whole)
    assert reassemble(whole) == data


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=3 * MAX_LINE), max_size=4),
       cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_big_lines_chunked_at_16k_in_any_split(sizes: list[int], cuts: list[int]) -> None:
    data = b"".join(bytes([65 + i]) * n + b"\n" for i, n in enumerate(sizes))
    records = split_all(cut(data, cuts))
    assert records == split_all([data])
    assert all(len(d) <= MAX_LINE for d, _ in records)
    assert reassemble(records) == data
    assert all(f == CONTINUED for d, f in records if f) and all(
        len(d) == MAX_LINE for d, f in records if f == CONTINUED)


def split_all_lists(chunks: list[bytes], max_line: int = MAX_LINE) -> list[tuple[bytes, int]]:
    """Like split_all, through LineSplitter.split (parallel data and flags lists)."""
    sp = LineSplitter(max_line)
    out: list[tuple[bytes, int]] = []
    for chunk in chunks:
        data, flags = sp.split(chunk)
        if flags is None:
            out += [(bytes(d), 0) for d in data]
        else:
            assert len(flags) == len(data) and any(flags)
            out += [(bytes(d), f) for d, f in zip(data, flags, strict=True)]
    tail = sp.take_partial()
    if tail is not None:
        out.append(tail)
    return out


@settings(max_examples=300)
@given(data=stream_bytes, cuts=st.lists(st.integers(min_value=0), max_size=12),
       max_line=st.sampled_from([1, 3, 7, 64, MAX_LINE]))
def test_split_gives_the_records_feed_gives(data: bytes, cuts: list[int],
                                            max_line: int) -> None:
    assert split_all_lists(cut(data, cuts), max_line) == split_all([data], max_line)


def test_split_gives_complete_lines_as_bytearrays_and_flags_only_when_set() -> None:
    sp = LineSplitter(max_line=4)
    data, flags = sp.split(b"ab\ncd")
    assert data == [b"ab"] and flags is None
    assert all(type(d) is bytearray for d in data)
    assert sp.split(b"efgh\nij\n") == ([b"cdef", b"gh", b"ij"], [CONTINUED, 0, 0])
    assert sp.split(b"") == ([], None)
    assert sp.split(b"klmnopq") == ([b"klmn"], [CONTINUED])
    assert sp.take_partial() == (b"opq", PARTIAL)


@settings(max_examples=100, deadline=None)
@given(text=st.text(min_size=1, max_size=300), cuts=st.lists(st.integers(min_value=0),
                                                              max_size=8),
       max_line=st.sampled_from([4, 5, 7, 64]))
def test_utf8_lines_are_cut_between_characters(text: str, cuts: list[int],
                                              max_line: int) -> None:
    """Was: a line over max_line was cut at max_line bytes, inside a character when
    one straddled the cut: each record then decoded with U+FFFD on both sides."""
    data = text.replace("\n", " ").encode() + b"\n"
    records = split_all(cut(data, cuts), max_line)
    assert records == split_all([data], max_line)
    assert reassemble(records) == data
    assert all(0 < len(d) <= max_line for d, _ in records if d or len(data) > 1)
    for d, _ in records:
        d.decode("utf-8")   # every record is whole characters


def test_a_16k_line_of_3_byte_characters_keeps_each_record_whole() -> None:
    line = "€" * 20000     # 60,000 bytes: 16,384 is not a multiple of 3
    records = split_all([line.encode() + b"\n"])
    assert [len(d) for d, _ in records] == [16383, 16383, 16383, 10851]
    assert "".join(d.decode() for d, _ in records) == line
