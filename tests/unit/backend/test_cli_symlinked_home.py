"""Every command refuses a TENURE_HOME that is a symlink, as `up` did alone: `status`,
`logs` or `down` through one would read, or stop, the daemons of the home it points
to. UNSAFE_PATH, exit 1, nothing created. The real command line, no daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("args", [["status"], ["logs"], ["down"], ["up", "--no-wait"],
                                  ["events"]])
def test_a_symlinked_home_is_refused_by_every_command(tmp_path: Path, args: list[str]):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    proc = subprocess.run([sys.executable, "-m", "backend.cli.main", "--home", str(link),
                           "--json", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if k != "TENURE_HOME"})
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "UNSAFE_PATH" and f"{link} is a symlink" in err["msg"]
    assert f"(give the directory it points to: {real})" in err["msg"]
    assert list(real.iterdir()) == []


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backend.cli.main", "--home", str(home),
                           "--json", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if k != "TENURE_HOME"})


@pytest.mark.parametrize("args", [["status"], ["release", "list"], ["stop", "s/a"]])
def test_a_home_others_may_write_to_is_refused_by_every_command(tmp_path: Path,
                                                                args: list[str]):
    """Was refused by `up` alone: with the home made 0777 while tenure ran, every other
    command (an apply, a release install) went on as if nothing were wrong."""
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    home.chmod(0o777)
    proc = _run(home, *args)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "UNSAFE_PATH", err
    assert err["msg"] == (f"{home} has mode 0777: others may write to it; it must be 0700 "
                          f"(`chmod 700 {home}`)")


@pytest.mark.parametrize("args", [["status"], ["release", "list"]])
def test_a_home_that_is_a_file_is_unsafe_path_not_internal(tmp_path: Path,
                                                           args: list[str]):
    """Was `INTERNAL: tenure status failed: Not a directory: …/backend`."""
    home = tmp_path / "f"
    home.write_text("")
    proc = _run(home, *args)
    err = json.loads(proc.stdout)["error"]
    assert proc.returncode == 1 and err["code"] == "UNSAFE_PATH", err
    assert err["msg"] == f"{home} is not a directory: a home is one"
