"""A launch that cannot start says why: errno, step and one line of text in the error
data (``spawn``, capability spawnErrors 1), kept in the launch's durable row, and written
as a tenure line into the app's own log stream (a real owner, real exec failures)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from owner.notes import TENURE
from owner.testing import GuardianKey, OwnerProcess
from protocol.client import Client
from protocol.errors import BadRequest, LaunchFailed


@pytest.fixture
def owner(short_home: Path) -> Iterator[tuple[Client, int]]:
    o = OwnerProcess(short_home).start()
    c = o.client()
    try:
        yield c, GuardianKey().bootstrap(c, o.instance)
    finally:
        c.close()
        assert o.stop() == 0


def launch(c: Client, epoch: int, key: str, argv: list[str], **extra: Any) -> LaunchFailed:
    params = {"launch_key": key, "stack": "s", "app": key, "instance": 0, "generation": 1,
              "argv": argv, "env": {"PATH": "/usr/bin:/bin"}, **extra}
    with pytest.raises(LaunchFailed) as e:
        c.call("launch", params, epoch=epoch)
    return e.value


def notes(c: Client, app: str) -> list[tuple[bytes, int, str]]:
    deadline = time.monotonic() + 10
    while True:
        recs = c.call("logs.read", {"after": 0, "limit": 10, "app": app})["records"]
        if recs or time.monotonic() > deadline:
            return [(r["data"], r["flags"], r["stream"]) for r in recs]
        time.sleep(0.02)


def test_spawn_failures_name_step_errno_and_text(owner: tuple[Client, int],
                                                 short_home: Path) -> None:
    c, epoch = owner
    plain = short_home / "plain.txt"
    plain.write_text("hello\n")
    plain.chmod(0o644)
    bare = short_home / "bare.sh"
    bare.write_text("echo no shebang\n")
    bare.chmod(0o755)
    user = f"tnx{uuid.uuid4().hex[:8]}"
    cases: dict[str, tuple[list[str], dict[str, Any], tuple[Any, ...], str]] = {
        "missing": (["/nonexistent/prog"], {}, ("exec", "ENOENT", 2),
                    "spawn failed: /nonexistent/prog: No such file or directory"),
        "unpathed": (["no-such-program-xyz"], {}, ("exec", "ENOENT", 2),
                     "spawn failed: no-such-program-xyz: No such file or directory "
                     "(not found in PATH)"),
        "noexec": ([str(plain)], {}, ("exec", "EACCES", 13),
                   f"spawn failed: {plain}: Permission denied (not executable)"),
        "dir": ([str(short_home)], {}, ("exec", "EACCES", 13),
                f"spawn failed: {short_home}: Permission denied (a directory)"),
        "format": ([str(bare)], {}, ("exec", "ENOEXEC", 8),
                   f"spawn failed: {bare}: Exec format error (no #! line, or not a "
                   "program for this machine)"),
        "cwd": (["true"], {"cwd": "/nonexistent-dir"}, ("cwd", "ENOENT", 2),
                "cwd /nonexistent-dir: No such file or directory"),
    }
    if os.geteuid() == 0:
        cases["user"] = (["true"], {"identity": {"user": user}}, ("user", None, None),
                         f"user {user}: no such user")
        cases["setupcwd"] = (["true"], {"identity": {"user": "root"}, "cwd": str(plain)},
                             ("cwd", "ENOTDIR", 20),
                             f"cwd {plain}: Not a directory (as user root)")
    else:
        print(f"not root: the user and identity cases are not run ({sorted(cases)} are)")
    for key, (argv, extra, (step, name, num), text) in cases.items():
        err = launch(c, epoch, key, argv, **extra)
        spawn = err.data["spawn"]
        if key == "cwd":   # was "…: No such file or directory (/nonexistent-dir)"
            assert err.msg == ("cannot start 'true': working directory /nonexistent-dir: "
                               "No such file or directory"), err.msg
        assert (spawn["step"], spawn["errno_name"], spawn["errno"], spawn["text"]) == \
            (step, name, num, text), key
        # the durable row answers a repeated key with the same explanation
        again = launch(c, epoch, key, argv, **extra)
        assert again.data["spawn"] == spawn
        assert notes(c, key) == [(b"tenure: " + text.encode(), TENURE, "stderr")], key
    assert c.call("status")["capabilities"]["spawnErrors"] == 1


def test_logs_note_writes_a_tenure_line_and_checks_its_shape(
        owner: tuple[Client, int]) -> None:
    c, epoch = owner
    assert c.call("status")["capabilities"]["logNotes"] == 1
    src = {"stack": "s", "app": "given-up", "instance": 2, "generation": 7}
    assert c.call("logs.note", {**src, "text": "start limit hit\nafter 5 starts"},
                  epoch=epoch) == {"written": True}
    assert notes(c, "given-up") == [(b"tenure: start limit hit after 5 starts", TENURE,
                                     "stderr")]
    for bad in ("", "x" * 1001, "a\0b"):
        with pytest.raises(BadRequest):
            c.call("logs.note", {**src, "text": bad}, epoch=epoch)
