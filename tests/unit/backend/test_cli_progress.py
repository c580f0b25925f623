"""Live progress on a terminal only; release arguments by id, prefix or sealed directory."""

from __future__ import annotations

import io
import time
import types
from pathlib import Path
from typing import Any

import pytest

from backend.cli import progress
from backend.cli.releases import resolve_release
from protocol.errors import BadRequest, NotFound


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_one_line_on_a_terminal_and_clears_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "EVERY", 0.02)
    out, phases = Tty(), iter(["checked", "draining", "complete"])
    with progress.live(types.SimpleNamespace(json=False), "upgrade",
                       lambda: next(phases, None), out):
        time.sleep(0.3)
    text = out.getvalue()
    assert "upgrade: checked" in text and "upgrade: complete" in text
    assert text.endswith("\r\x1b[K") and "\n" not in text


def test_a_failing_probe_keeps_the_last_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "EVERY", 0.02)
    answers: list[Any] = ["apps ready 1/3"]

    def probe() -> str:
        if answers:
            return str(answers.pop())
        raise ConnectionError("handoff")
    out = Tty()
    with progress.live(types.SimpleNamespace(json=False), "up", probe, out):
        time.sleep(0.2)
    assert out.getvalue().count("up: apps ready 1/3") >= 2


@pytest.mark.parametrize(("stream", "as_json"), [(io.StringIO(), False), (Tty(), True)])
def test_no_progress_off_a_terminal_or_with_json(stream: io.StringIO, as_json: bool) -> None:
    with progress.live(types.SimpleNamespace(json=as_json), "down", lambda: "x", stream):
        time.sleep(0.3)
    assert stream.getvalue() == ""


class Guardian:
    """Answers release.list with ``ids`` (names, or entries with a status) and the
    ``missing`` selected releases."""

    def __init__(self, ids: list[Any], missing: tuple[str, ...] = ()) -> None:
        self.ids, self.missing, self.calls = ids, missing, []  # type: ignore[var-annotated]

    def call(self, method: str, params: Any = None, timeout: float = 0) -> Any:
        self.calls.append((method, params))
        if method == "release.install":
            return {"release": "f" * 64}
        return {"releases": [r if isinstance(r, dict) else {"release": r, "status": "ok"}
                             for r in self.ids]
                + [{"release": r, "status": "missing"} for r in self.missing]}


A, B = "ab12" * 16, "ab13" * 16


def test_release_by_id_prefix_or_directory(tmp_path: Path) -> None:
    g = Guardian([A, B])
    assert resolve_release(g, A) == A and g.calls == []
    assert resolve_release(g, "ab12ab12") == A
    with pytest.raises(BadRequest, match="8 or more"):
        resolve_release(g, "ab12ab1")                     # too short to be a prefix
    twins = Guardian([A, A[:60] + "cdef"])
    with pytest.raises(BadRequest, match=r"2 installed releases .*: give more characters"):
        resolve_release(twins, A[:12])
    with pytest.raises(NotFound):
        resolve_release(g, "cdcdcdcd")
    with pytest.raises(BadRequest, match="not a release id"):
        resolve_release(g, "release-1")
    for not_hex in ("/" + "r" * 63, "g" * 64, A + "0"):   # 64 characters is not enough
        with pytest.raises(BadRequest, match="not a release id"):
            resolve_release(g, not_hex)
    sealed = tmp_path / "rel"
    sealed.mkdir()
    assert resolve_release(g, str(sealed), install=True) == "f" * 64
    assert g.calls[-1] == ("release.install", {"path": str(sealed)})
    with pytest.raises(BadRequest):       # without install a directory is not an id
        resolve_release(g, str(sealed))
    with pytest.raises(NotFound, match="is not a directory"):   # a path, not an id
        resolve_release(g, str(tmp_path / "missing"), install=True)


def test_a_prefix_names_a_release_never_an_interrupted_install() -> None:
    corrupt = "5b0d" * 16
    g = Guardian([{"release": A, "status": "ok"},
                  {"release": A + ".tmp-abc", "status": "incomplete"},
                  {"release": A[:12] + "-old", "status": "corrupt",
                   "reason": f"STATE_CORRUPT: {A[:12]}-old: not a release id"},
                  {"release": corrupt, "status": "corrupt",
                   "reason": "STATE_CORRUPT: RUNTIME.json does not hash to the directory "
                             "name"},
                  {"release": corrupt + ".tmp-0f1e2d", "status": "incomplete"}])
    assert resolve_release(g, A[:8]) == A
    assert resolve_release(g, corrupt[:8]) == corrupt    # corrupt, but a release: verify
    with pytest.raises(NotFound, match="0 installed releases"):   # says why
        resolve_release(Guardian([{"release": A + ".tmp-abc", "status": "incomplete"}]),
                        A[:8])
    calls = len(g.calls)
    assert resolve_release(g, corrupt) == corrupt and len(g.calls) == calls   # full id


@pytest.mark.parametrize("argv", [
    ["owner", "upgrade", "--json", "/srv/rel"], ["--json", "owner", "upgrade", "/srv/rel"],
    ["owner", "upgrade", "/srv/rel", "--json"], ["backend", "upgrade", "--json", "/srv/rel"],
    ["guardian", "upgrade", "--check", "/srv/rel"]])
def test_an_optional_positional_after_an_option_still_counts(argv: list[str]) -> None:
    from backend.cli.cmdline import parser
    args = parser().parse_args(argv)
    assert args.release == "/srv/rel"
    assert args.json or "--check" in argv


@pytest.mark.parametrize("argv", [
    ["up", "--config", "t.toml"], ["--home", "/h", "restart", "s/a/0"],
    ["--home=/h", "--json", "logs", "-n", "5", "s/a"], ["backend", "upgrade", "abcd1234"],
    ["job", "run", "s/j", "--arg", "x", "--wait"], ["owner", "upgrade", "--dry-run"],
    ["-h"], ["--json"], ["nosuch"], ["status", "--home", "/h"], ["up", "-h"],
    ["up", "--bogus"], ["__complete", "targets"], ["--home", "/h", "job", "nosuch"]])
def test_the_parser_built_for_one_command_parses_it_as_the_whole_one(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Only the command's own parser is made; what it prints and how it ends are the
    whole parser's, to the byte (an unknown command's refusal lists every command, in
    the same order)."""
    from backend.cli.cmdline import parser

    def parsed(parser: object) -> object:
        try:
            return vars(parser.parse_args(argv))  # type: ignore[attr-defined]
        except SystemExit as exc:   # -h, a missing or unknown command: the same ending
            return ("exit", exc.code, capsys.readouterr())

    assert parsed(parser(argv)) == parsed(parser())


def test_an_unknown_command_lists_the_commands_but_not_the_hidden_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    from backend.cli.cmdline import parser
    with pytest.raises(SystemExit) as ended:
        parser(["bogus"]).parse_args(["bogus"])
    said = capsys.readouterr().err
    assert ended.value.code == 2
    assert "invalid choice: 'bogus' (choose from 'up', 'down', 'status'," in said
    assert "'completion')" in said and "__complete" not in said
    assert vars(parser(["__complete"]).parse_args(["__complete", "targets"]))[
        "what"] == "targets"


def test_a_known_command_makes_no_parser_of_the_others() -> None:
    import argparse

    from backend.cli.cmdline import parser
    sub = next(a for a in parser(["--home", "/h", "logs", "-n", "5"])._actions
               if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["logs"]
    sub = next(a for a in parser(["nosuch"])._actions
               if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices)[:3] == ["up", "down", "status"] and "__complete" in sub.choices


def test_a_prefix_does_not_name_a_release_that_is_listed_as_missing() -> None:
    """`release list` shows a deleted selected release (``missing``): not installed, so
    a prefix neither resolves to it nor is made ambiguous by it."""
    g = Guardian([A], missing=(A[:60] + "cdef", B))
    assert resolve_release(g, A[:12]) == A
    with pytest.raises(NotFound, match="0 installed releases"):
        resolve_release(g, B[:12])


def test_the_progress_line_fits_one_row_of_the_terminal(monkeypatch) -> None:
    """On a 20-column terminal each redraw of a longer line left a stale row (a carriage
    return goes back only to the start of the line's last row)."""
    import os
    from types import SimpleNamespace

    from backend.cli import progress

    class _Tty:
        def fileno(self) -> int:
            return 99
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: SimpleNamespace(columns=20))
    assert progress._width(_Tty()) == 19   # type: ignore[arg-type]
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: SimpleNamespace(columns=500))
    assert progress._width(_Tty()) == 200   # type: ignore[arg-type]
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: SimpleNamespace(columns=0))
    assert progress._width(_Tty()) == 200   # type: ignore[arg-type]   # size never set

    def no_tty(fd: int) -> None:
        raise OSError(25, "Inappropriate ioctl for device")
    monkeypatch.setattr(os, "get_terminal_size", no_tty)
    assert progress._width(_Tty()) == 200   # type: ignore[arg-type]
