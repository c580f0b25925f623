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
