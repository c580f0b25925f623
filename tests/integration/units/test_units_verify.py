"""`systemd-analyze verify` accepts every rendered unit without a warning; the real
Systemctl seam runs its binary with a timeout and reports failures as ServiceError."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import BadRequest, ServiceError
from units import (
    Installation,
    Scope,
    Systemctl,
    exec_word,
    render_systemd,
    services,
)

ANALYZE = shutil.which("systemd-analyze")
# The venv interpreter: ExecStart must name an existing binary for verify to pass.
PYTHON = Path(os.path.abspath(sys.executable))


@pytest.fixture
def analyze() -> str:
    if ANALYZE is None:
        print("skipping: systemd-analyze is not installed")
        pytest.skip("systemd-analyze is not installed")
    return ANALYZE


@pytest.fixture
def runtime_dir(short_home: Path) -> Iterator[Path]:
    """`verify --user` needs an XDG_RUNTIME_DIR even offline."""
    rt = short_home / "rt"
    rt.mkdir(mode=0o700)
    yield rt


def _verify(analyze: str, scope: str, unit_dir: Path, runtime: Path) -> tuple[int, str]:
    env = {**os.environ, "SYSTEMD_LOG_LEVEL": "info", "XDG_RUNTIME_DIR": str(runtime),
           "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
    argv = [analyze, *(["--user"] if scope == "user" else []), "verify",
            *sorted(str(p) for p in unit_dir.iterdir())]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60,
                          cwd=unit_dir, check=False)
    out = done.stdout + done.stderr
    print(f"$ {' '.join(argv)}\n(exit {done.returncode})\n{out}")
    return done.returncode, out


def _write(inst: Installation, unit_dir: Path) -> None:
    unit_dir.mkdir()
    for spec in services(inst):
        (unit_dir / spec.name).write_text(render_systemd(spec))


@pytest.mark.parametrize(("scope", "home"), [
    ("user", "/var/tmp/tenure home"),
    ("system", "/var/lib/tenure"),
    ("system", '/srv/odd home/100%/"q"/b\\s/it\'s'),
])
def test_systemd_analyze_verify_accepts_rendered_units(analyze: str, short_home: Path,
                                                       runtime_dir: Path, scope: str,
                                                       home: str) -> None:
    account = {"user": "root", "group": "root"} if scope == "system" else {}
    inst = Installation.for_scope(scope, home=Path(home), python=PYTHON,
                                  unit_dir=short_home / "u", plist_dir=short_home / "p",
                                  **account)
    unit_dir = short_home / "u"
    _write(inst, unit_dir)
    rc, out = _verify(analyze, scope, unit_dir, runtime_dir)
    assert rc == 0, out
    ours = [line for line in out.splitlines()
            if "tenure" in line or str(unit_dir) in line or "Unknown" in line]
    assert ours == [], out


def test_verify_would_notice_a_bad_setting(analyze: str, short_home: Path,
                                           runtime_dir: Path) -> None:
    """The check above is meaningful: verify does print a warning for a bad line."""
    inst = Installation.for_scope(Scope.SYSTEM, home=Path("/var/lib/tenure"), python=PYTHON,
                                  user="root", group="root", unit_dir=short_home / "u",
                                  plist_dir=short_home / "p")
    unit_dir = short_home / "u"
    _write(inst, unit_dir)
    path = unit_dir / "tenure-owner.service"
    path.write_text(path.read_text().replace("KillMode=process", "KillMode=bogus"))
    _rc, out = _verify(analyze, "system", unit_dir, runtime_dir)
    assert str(unit_dir) in out and "kill mode" in out


@pytest.mark.parametrize("name", ['q"x', "it's", "b\\s"])
def test_an_interpreter_path_systemd_refuses_is_refused_before_rendering(
        analyze: str, short_home: Path, runtime_dir: Path, name: str) -> None:
    """A quote or backslash in the executable's path: systemd does not load such a unit
    ("Executable name contains special characters"), so rendering refuses it with
    BadRequest (was: a unit file was written that systemd refused)."""
    bad = short_home / name / "python"
    bad.parent.mkdir()
    bad.symlink_to(PYTHON)
    inst = Installation.for_scope(Scope.SYSTEM, home=Path("/var/lib/tenure"), python=bad,
                                  user="root", group="root", unit_dir=short_home / "u",
                                  plist_dir=short_home / "p")
    for spec in services(inst):
        with pytest.raises(BadRequest, match="executable"):
            render_systemd(spec)
    # what systemd says of the line as an ordinary (escaped) word would have it
    unit_dir = short_home / "u"
    unit_dir.mkdir()
    (unit_dir / "x.service").write_text(f"[Service]\nExecStart={exec_word(str(bad))}\n")
    rc, out = _verify(analyze, "system", unit_dir, runtime_dir)
    assert rc != 0 and "special characters" in out, out


def test_an_interpreter_path_with_space_and_percent_loads(analyze: str, short_home: Path,
                                                          runtime_dir: Path) -> None:
    odd = short_home / "my env 100%" / "python"
    odd.parent.mkdir()
    odd.symlink_to(PYTHON)
    inst = Installation.for_scope(Scope.SYSTEM, home=Path("/var/lib/tenure"), python=odd,
                                  user="root", group="root", unit_dir=short_home / "u",
                                  plist_dir=short_home / "p")
    _write(inst, short_home / "u")
    rc, out = _verify(analyze, "system", short_home / "u", runtime_dir)
    assert rc == 0, out


def _script(directory: Path, body: str) -> str:
    path = directory / "fake-systemctl"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o700)
    return str(path)


def test_systemctl_show_parses_properties_and_passes_user(short_home: Path) -> None:
    log = short_home / "argv"
    binary = _script(short_home, f'echo "$@" > {log}\nprintf "ActiveState=active\\nJob=\\n"')
    got = Systemctl(Scope.USER, binary=binary).show("tenure.service", ("ActiveState", "Job"))
    assert got == {"ActiveState": "active", "Job": ""}
    assert log.read_text().split() == ["--user", "show", "--property=ActiveState",
                                       "--property=Job", "--", "tenure.service"]


def test_systemctl_failure_carries_stderr(short_home: Path) -> None:
    binary = _script(short_home, 'echo "Unit tenure.service not found." >&2\nexit 5')
    with pytest.raises(ServiceError) as err:
        Systemctl(Scope.SYSTEM, binary=binary).run("enable", "tenure.service")
    assert err.value.data["returncode"] == 5
    assert "not found" in err.value.data["stderr"]
    assert "--user" not in err.value.data["argv"]


def test_systemctl_missing_binary_and_timeout(short_home: Path) -> None:
    with pytest.raises(ServiceError):
        Systemctl(Scope.USER, binary=str(short_home / "absent")).run("daemon-reload")
    slow = _script(short_home, "exec sleep 5")
    with pytest.raises(ServiceError):
        Systemctl(Scope.USER, binary=slow, timeout=0.2).run("daemon-reload")
