"""`tenure up` of a home whose parent others may change is refused before anything
starts: a user with write access there moved the home away and made a new one, and the
owner, seeing its home replaced, stopped every application."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_up_under_a_parent_others_may_change_starts_nothing(short_home):
    parent = short_home / "open"
    parent.mkdir()
    os.chmod(parent, 0o777)
    home = parent / "h"
    config = short_home / "c.toml"
    config.write_text('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n')
    res = subprocess.run([sys.executable, "-m", "backend.cli.main", "--home", str(home),
                          "--json", "up", "--config", str(config)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    err = json.loads(res.stdout)["error"]
    assert err["code"] == "UNSAFE_PATH" and err["data"] == {"path": str(parent)}, err
    assert "writable by others, not sticky" in err["msg"]
    assert res.returncode != 0 and not home.exists()
