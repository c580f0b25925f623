"""What the benchmark peers need before anything runs: node and npm (pm2).

bench/peers/install.py refuses to start without them; ``./dev peers`` (run by
``./dev bench`` and CI) installs them from apt, or says what to install. The shell
tests run dev with a PATH of stubs: nothing is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.peers import install

DEV = Path(__file__).resolve().parents[3] / "dev"


def without(monkeypatch: pytest.MonkeyPatch, *tools: str) -> None:
    monkeypatch.setattr(install.shutil, "which",
                        lambda name: None if name in tools else f"/usr/bin/{name}")


def test_nothing_is_missing_when_node_and_npm_are_on_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch)
    assert install.missing_tools() is None


def test_ensure_exits_saying_what_to_install_before_installing_anything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "npm")
    installed: list[str] = []
    monkeypatch.setattr(install, "install_py", lambda force: installed.append("py"))
    monkeypatch.setattr(install, "install_npm", lambda force: installed.append("npm"))
    with pytest.raises(SystemExit, match=r"npm not on PATH.*apt-get install nodejs npm"):
        install.ensure()
    assert installed == []


def test_only_pm2_needs_node(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "node", "npm")
    installed: list[str] = []
    monkeypatch.setitem(install.PEER_PREFIXES, "supervisord",
                        lambda force: installed.append("py"))
    install.ensure_peer("supervisord")
    with pytest.raises(FileNotFoundError, match="node and npm not on PATH"):
        install.ensure_peer("pm2")
    assert installed == ["py"]


def stubs(tmp_path: Path, uid: int, apt: bool) -> Path:
    """A PATH with dirname, an ``id`` saying ``uid``, and an apt-get that logs its args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dirname = shutil.which("dirname")
    assert dirname is not None
    (bin_dir / "dirname").symlink_to(dirname)
    scripts = {"id": f"echo {uid}"}
    if apt:
        scripts["apt-get"] = f'echo "$*" >> {tmp_path}/apt.log'
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def dev_peers(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", str(DEV), "peers"], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=30)


def test_dev_peers_without_root_says_what_to_install(tmp_path: Path) -> None:
    out = dev_peers(stubs(tmp_path, uid=1000, apt=True))
    assert out.returncode == 1
    assert "please install as root: apt-get install nodejs npm" in out.stderr
    assert not (tmp_path / "apt.log").exists()


def test_dev_peers_without_apt_says_what_to_install(tmp_path: Path) -> None:
    out = dev_peers(stubs(tmp_path, uid=0, apt=False))
    assert out.returncode == 1
    assert "needs Node.js and npm (for pm2): please install them" in out.stderr


def test_dev_peers_as_root_installs_node_and_npm_from_apt(tmp_path: Path) -> None:
    out = dev_peers(stubs(tmp_path, uid=0, apt=True))
    # then setup stops: there is no python3 on this PATH
    assert out.returncode != 0 and "tenure needs Python" in out.stderr
    log = (tmp_path / "apt.log").read_text().splitlines()
    assert log == ["update -qq", "install -y -qq nodejs npm"]
