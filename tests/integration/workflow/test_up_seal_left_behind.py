"""A `tenure up` that fails while it seals the first release leaves no runtime/seal-*
behind. It did under `prlimit --nofile=12`: the seal and the install went through, but
removing the 14 MB sealing directory failed (shutil.rmtree holds a descriptor per level
of the tree, 10 of them here), as would the seal's own removal of its temporary tree.
The first-release step runs in a process of its own under that limit."""

from __future__ import annotations

import subprocess
import sys
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
from backend.cli.daemons import place_first_release
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
