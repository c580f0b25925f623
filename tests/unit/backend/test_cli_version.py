"""`tenure backend status` says when this command line is older than the release the
backend runs (backend.cli.releases.cli_against), reading only that release's
RUNTIME.json."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from backend.cli.releases import _version_key, cli_against
from guardian.manifest import RUNTIME_NAME, Interpreter, Runtime
from protocol.layout import Layout

RID = "e" * 64


@pytest.mark.parametrize("v, key", [("0.1.0", (0, 1, 0)), ("1.2", (1, 2)),
                                    ("0.2.0rc1", (0, 2, 0)), ("2.0.dev3", (2, 0)),
                                    ("x", ())])
def test_version_keys(v: str, key: tuple[int, ...]) -> None:
    assert _version_key(v) == key


def _release(home: Path, tenure_version: str) -> Layout:
    d = home / "runtime" / "releases" / RID
    d.mkdir(parents=True)
    runtime = Runtime(tenure_version, None, Interpreter("/usr/bin/python3", "3.11.2",
                                                        "0" * 64),
                      {"lib/tenure.py": "1" * 64}, {})
    (d / RUNTIME_NAME).write_bytes(runtime.encode())
    (d / RUNTIME_NAME).chmod(0o444)
    return Layout(home)


def test_an_older_command_line_is_told(tmp_path: Path) -> None:
    got = cli_against(_release(tmp_path, "99.0.0"), RID)
    assert got == {"version": version("tenure"), "backend_version": "99.0.0", "older": True}


def test_the_same_or_newer_release_or_none_is_not_older(tmp_path: Path) -> None:
    layout = _release(tmp_path, version("tenure"))
    assert cli_against(layout, RID)["older"] is False
    assert cli_against(layout, None) == {"version": version("tenure"),
                                         "backend_version": None, "older": False}
    assert cli_against(layout, "f" * 64)["backend_version"] is None   # not installed
