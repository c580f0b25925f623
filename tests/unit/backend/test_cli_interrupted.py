"""Ctrl-C of a command that asked tenure to do something: exit 130, and a word that only
the waiting ended (with --json, an object too). It printed nothing, and a script reading
--json got no JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.cli import backendcmd, commands, main


def _interrupt(*_: Any) -> int:
    raise KeyboardInterrupt


@pytest.mark.parametrize("as_json", [False, True])
def test_a_restart_cut_short_says_the_roll_goes_on(monkeypatch: Any, capsys: Any,
                                                   tmp_path: Path, as_json: bool) -> None:
    monkeypatch.setattr(commands, "cmd_restart", _interrupt)
    argv = ["--home", str(tmp_path), *(["--json"] if as_json else []), "restart", "s/a"]
    assert main.main(argv) == 130
    out, err = capsys.readouterr()
    assert "tenure: interrupted: `tenure restart` stopped waiting; the backend carries " \
        "the roll on" in err
    if as_json:
        said = json.loads(out)
        assert said["ok"] is False and said["interrupted"] is True
    else:
        assert out == ""


def test_a_follow_cut_short_ends_silently(monkeypatch: Any, capsys: Any,
                                         tmp_path: Path) -> None:
    monkeypatch.setattr(commands, "cmd_logs", _interrupt)
    assert main.main(["--home", str(tmp_path), "logs", "-f"]) == 130
    assert capsys.readouterr() == ("", "")


def test_a_command_with_an_action_is_named_whole(monkeypatch: Any, capsys: Any,
                                                tmp_path: Path) -> None:
    """It said "`tenure backend` stopped waiting" for `tenure backend upgrade`."""
    monkeypatch.setattr(backendcmd, "cmd_backend", _interrupt)
    assert main.main(["--home", str(tmp_path), "backend", "upgrade", "ab" * 32]) == 130
    assert "`tenure backend upgrade` stopped waiting; the guardian carries it on" in \
        capsys.readouterr().err


@pytest.mark.parametrize(("argv", "cmd", "said"), [
    (["owner", "status"], "commands.cmd_owner", None),        # spoke of an owner window
    (["backend", "status"], "backendcmd.cmd_backend", None),
    (["job", "logs", "3", "-f"], "commands.cmd_job", None),   # said the job goes on
    (["job", "stop", "3"], "commands.cmd_job", "`tenure job stop` stopped waiting; the job's "
                                               "stop goes on (`tenure job list`)"),
    (["job", "run", "s/j"], "commands.cmd_job", "`tenure job run` stopped waiting; a job it "
                                                "submitted goes on (`tenure job list` shows "
                                                "whether one was)"),
    (["backend", "recover", "--dry-run"], "backendcmd.cmd_backend", None),   # changes nothing
    (["owner", "reconcile", "--prepare"], "commands.cmd_owner", None),
])
def test_each_action_is_said_as_what_it_is(monkeypatch: Any, capsys: Any, tmp_path: Path,
                                           argv: list[str], cmd: str,
                                           said: str | None) -> None:
    """A reading action ends silently, as a reading command does; a stop says its stop
    goes on."""
    monkeypatch.setattr(f"backend.cli.{cmd}", _interrupt)
    assert main.main(["--home", str(tmp_path), *argv]) == 130
    err = capsys.readouterr().err
    assert (said in err) if said else err == "", err


def test_a_json_word_to_a_reader_that_is_gone_still_ends_130(monkeypatch: Any, capsys: Any,
                                                             tmp_path: Path) -> None:
    """Ctrl-C with --json and stdout's reader gone (`| true`): the JSON word raised
    BrokenPipeError out of the handler, a traceback and exit 1."""
    def gone(*_: Any, **__: Any) -> None:
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(commands, "cmd_restart", _interrupt)
    real = print

    def printing(*a: Any, **kw: Any) -> None:
        if kw.get("file") is None:
            gone()
        real(*a, **kw)
    monkeypatch.setattr("builtins.print", printing)
    assert main.main(["--home", str(tmp_path), "--json", "restart", "s/a"]) == 130
    assert "tenure: interrupted: `tenure restart`" in capsys.readouterr().err


@pytest.mark.parametrize(("sig", "code"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_change_ended_by_a_signal_says_what_goes_on(monkeypatch: Any, capsys: Any,
                                                      tmp_path: Path, sig: str,
                                                      code: int) -> None:
    """`timeout 60 tenure restart …` or an ssh session dropped: the command ended
    silently (143, 129); it now says, as for Ctrl-C, that only its wait ended."""
    import os
    import signal
    import time
    signum = getattr(signal, sig)

    def ended(*_: Any) -> int:
        os.kill(os.getpid(), signum)
        time.sleep(5)                       # the handler interrupts this
        raise AssertionError("not interrupted")
    monkeypatch.setattr(commands, "cmd_restart", ended)
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        assert main.main(["--home", str(tmp_path), "restart", "s/a"]) == code
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    assert f"tenure: ended by {sig}: `tenure restart` stopped waiting; the backend " \
        "carries the roll on" in capsys.readouterr().err
