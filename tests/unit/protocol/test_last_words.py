"""last_words quotes only what a daemon's run wrote (after the offset its log ended at
when it started), in whole lines."""

from __future__ import annotations

from pathlib import Path

from protocol.durable import last_words


def _log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "owner.log"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_an_earlier_runs_lines_are_not_quoted(tmp_path):
    earlier = "".join(f"2026-01-01 owner INFO earlier run line {i}\n" for i in range(100))
    path = _log(tmp_path, earlier + "Traceback (most recent call last):\nRuntimeError: x\n")
    assert last_words(path, since=len(earlier)) == \
        "Traceback (most recent call last):\nRuntimeError: x\n"


def test_a_long_run_is_quoted_from_a_whole_line(tmp_path):
    lines = [f"line {i:04d} of this run\n" for i in range(200)]
    path = _log(tmp_path, "".join(lines))
    said = last_words(path, size=100)
    assert said and len(said) <= 100 and said.startswith("line ")
    assert said.splitlines(keepends=True) == lines[-len(said.splitlines()):]


def test_a_run_that_said_nothing_quotes_nothing(tmp_path):
    path = _log(tmp_path, "an earlier run\n")
    assert last_words(path, since=path.stat().st_size) == ""
    assert last_words(tmp_path / "absent.log") == ""
