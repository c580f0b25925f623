"""A `tenure up` that fails while it seals the first release leaves no runtime/seal-*
behind. It did under `prlimit --nofile=12`: the seal and the install went through, but
removing the 14 MB sealing directory failed (shutil.rmtree holds a descriptor per level
of the tree, 10 of them here), as would the seal's own removal of its temporary tree.
The first-release step runs in a process of its own under that limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# argv: home, then "limit" (the seal as it is), "last-step-fails" (the seal's last step
# fails with EMFILE, once the whole tree is copied and compiled, a package 16 levels deep
# among it) or "install-fails" (the install of the sealed release fails with EMFILE).
# Prints what the step raised.
CHILD = r"""
import errno, os, resource, sys
from pathlib import Path
import guardian.seal, guardian.trust
from backend.cli.firstrun import place_first_release
from protocol.layout import Layout

if sys.argv[2] == "last-step-fails":
    def _write_runtime(root, runtime, key):
        deep = Path(root, "lib", *"abcdefghijklmnop")
        deep.mkdir(parents=True)
        (deep / "m.py").write_text("")
        raise OSError(errno.EMFILE, "Too many open files")
    guardian.seal._write_runtime = _write_runtime
if sys.argv[2] == "install-fails":
    def install_trusted(paths, src, into=None):
        raise OSError(errno.EMFILE, "Too many open files")
    guardian.trust.install_trusted = install_trusted
resource.setrlimit(resource.RLIMIT_NOFILE, (12, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    place_first_release(Layout(sys.argv[1]), None)
    print("placed")
except OSError as e:
    print(f"{type(e).__name__}: {e}")
"""


@pytest.mark.parametrize("how", ["limit", "last-step-fails", "install-fails"])
def test_a_failed_first_seal_leaves_no_sealing_directory(short_home: Path, how: str):
    home = short_home / "h"
    home.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-c", CHILD, str(home), how],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    if how != "limit":
        assert said.startswith("OSError: [Errno 24]"), said
    assert "seal-" not in said, said
    assert [p.name for p in (home / "runtime").glob("*seal*")] == [], said


# argv: home, then "hang" (the seal stops before its last step and says so) or "place".
PLACER = r"""
import sys, time
import guardian.seal
from backend.cli.firstrun import place_first_release
from protocol.layout import Layout

if sys.argv[2] == "hang":
    def _write_runtime(root, runtime, key):
        print("sealing", flush=True)
        time.sleep(600)
    guardian.seal._write_runtime = _write_runtime
place_first_release(Layout(sys.argv[1]), None)
print("placed")
"""


def _sealing(home: Path) -> subprocess.Popen[str]:
    """A first-release step stopped in its seal: its sealing directory exists."""
    proc = subprocess.Popen([sys.executable, "-c", PLACER, str(home), "hang"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "sealing\n"
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


def _age(home: Path) -> list[str]:
    """The sealing directories, each made to look unchanged for two minutes."""
    names = sorted(p.name for p in (home / "runtime").glob("seal-*"))
    for name in names:
        os.utime(home / "runtime" / name, (time.time() - 120,) * 2)
    return names


def test_the_sealing_directory_of_a_killed_up_is_removed_by_the_next(short_home: Path):
    """Was left for good: 14 MB a killed `tenure up`, never removed."""
    home = short_home / "h"
    home.mkdir(mode=0o700)
    _end(_sealing(home))
    assert len(_age(home)) == 1
    done = subprocess.run([sys.executable, "-c", PLACER, str(home), "place"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout == "placed\n", done.stderr
    assert list((home / "runtime").glob("seal-*")) == []


def test_a_sealing_directory_in_use_is_left_alone(short_home: Path):
    """However old it looks, a directory whose command still runs (it holds it locked)
    is not removed under it."""
    home = short_home / "h"
    home.mkdir(mode=0o700)
    live = _sealing(home)
    try:
        names = _age(home)
        done = subprocess.run([sys.executable, "-c", PLACER, str(home), "place"],
                              capture_output=True, text=True, timeout=120)
        assert done.stdout == "placed\n", done.stderr
        assert sorted(p.name for p in (home / "runtime").glob("seal-*")) == names
    finally:
        _end(live)
