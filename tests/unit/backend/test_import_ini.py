"""The INI reader follows RawConfigParser as supervisord configures it (checked against
configparser itself on generated files) and remembers where each value came from."""

from __future__ import annotations

import configparser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.importers.ini import IniDocument, IniError


def _supervisord_parser() -> configparser.RawConfigParser:
    return configparser.RawConfigParser(inline_comment_prefixes=(";", "#"), strict=False)


def _as_dict(doc: IniDocument) -> dict[str, dict[str, str]]:
    out = {}
    for name in doc.sections:
        out[name] = {}
        for key in doc.keys(name):
            value = doc.get(name, key)
            assert value is not None
            out[name][key] = value.value
    return out


def _reference(text: str) -> dict[str, dict[str, str]] | None:
    parser = _supervisord_parser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return {s: dict(parser.items(s)) for s in parser.sections()}


_PIECES = st.sampled_from([
    "[program:a]", "[program:b]", "[DEFAULT]", "[group:g] ; c", "command = /bin/x --y",
    "Key: value", "x=1 ;comment", "x=1;not-a-comment", "url=http://h/#frag",
    "  continued", "\tmore", "", "   ", "; full comment", "# full comment",
    "  ; indented comment", "env=A=\"1\",B=2", "empty =", "bad line", " = novalue",
    "priority=5 # five", "[weird]]",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=14))
def test_reads_what_configparser_reads(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    expected = _reference(text)
    doc = IniDocument()
    try:
        doc.read(text, "f.conf")
    except IniError:
        assert expected is None, text
        return
    assert expected is not None, text
    assert _as_dict(doc) == expected, text


def test_values_remember_file_and_line_across_files() -> None:
    doc = IniDocument()
    doc.read("[program:web]\ncommand=/bin/web\n\n[program:db]\ncommand=/bin/db\n", "a.conf")
    doc.read("; later file\n[program:web]\ncommand=/bin/web2\nuser=www\n", "b.conf")
    web = doc.sections["program:web"]
    assert (web.file, web.line) == ("a.conf", 1)  # where the section first appeared
    assert doc.get("program:web", "command") == _value("/bin/web2", "b.conf", 3)
    assert doc.get("program:web", "user") == _value("www", "b.conf", 4)
    assert doc.get("program:db", "command") == _value("/bin/db", "a.conf", 5)


def test_continuation_lines_keep_the_first_line_number_and_join_with_newlines() -> None:
    doc = IniDocument()
    doc.read("[program:x]\ncommand=/bin/x --a ; note\n  --b\n\n  --c\nnext=1\n", "f")
    assert doc.get("program:x", "command") == _value("/bin/x --a\n--b\n\n--c", "f", 2)


def test_default_section_is_inherited_but_not_a_section() -> None:
    doc = IniDocument()
    doc.read("[DEFAULT]\nautorestart=true\n[program:x]\ncommand=c\n", "f")
    assert list(doc.sections) == ["program:x"]
    assert doc.keys("program:x") == ["command", "autorestart"]
    assert doc.get("program:x", "autorestart") == _value("true", "f", 2)


@pytest.mark.parametrize(("text", "line"), [
    ("command=x\n", 1),                 # before any section
    ("[program:x]\ncommand=x\nnonsense\n", 3),
    ("[program:x]\n=value\n", 2),
])
def test_unparsable_lines_are_reported_with_their_line(text: str, line: int) -> None:
    with pytest.raises(IniError) as e:
        IniDocument().read(text, "f")
    assert e.value.line == line


@pytest.mark.parametrize(("text", "line"), [
    ("[program:x\ncommand=sleep 1\n", 1),
    # configparser would read this one as a key '[program' = 'b' of [program:a]
    ("[program:a]\ncommand=/bin/a\n[program:b\ncommand=/bin/b\n", 3),
    ("[]\n", 1),
])
def test_a_malformed_section_header_is_reported_as_one(text: str, line: int) -> None:
    with pytest.raises(IniError) as e:
        IniDocument().read(text, "f")
    assert e.value.line == line
    assert e.value.problem.startswith("a malformed section header: ")


def test_a_leading_byte_order_mark_is_skipped() -> None:
    doc = IniDocument()
    doc.read("\ufeff[program:a]\ncommand=sleep 1\n", "f")
    assert list(doc.sections) == ["program:a"]
    assert doc.get("program:a", "command") == _value("sleep 1", "f", 2)


def _value(value: str, file: str, line: int) -> object:
    from backend.importers.ini import IniValue
    return IniValue(value, file, line)
