"""A damaged copy of the running release is mended by installing that release again,
while its backend runs. Was: `release install` answered CONFLICT ("exists and is not
this release"), the copy could not be removed while it ran, and every `backend
upgrade` was refused (its rollback target does not verify): a dead end until `tenure
down`."""

from __future__ import annotations

import os


def test_installing_the_running_release_again_repairs_its_damaged_copy(cluster) -> None:
    cluster.up('[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n')
    cluster.wait_ready(1)
    current = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    before = (cluster.pids(), cluster.backend_pid())
    damaged = cluster.home / "runtime" / "releases" / current / "lib" / "backend" / \
        "explain.py"
    os.chmod(damaged.parent, 0o755)
    os.chmod(damaged, 0o644)
    damaged.write_bytes(damaged.read_bytes() + b"\n# edited\n")
    bad = cluster.cli("release", "verify", current)
    assert bad.code == 1 and bad.out["error"]["code"] == "STATE_CORRUPT", bad
    assert cluster.release is not None
    text = cluster.cli_text("release", "install", str(cluster.release))
    assert text.startswith(f"installed {current}\n  repaired: the installed copy did not "
                           "verify ("), text
    assert "lib/backend/explain.py" in text and text.endswith(
        "); it was replaced by this verified one\n"), text
    assert cluster.cli("release", "verify", current, check=True).out["ok"] is True
    assert (cluster.pids(), cluster.backend_pid()) == before
    assert cluster.cli_text("status").count("ready") == 1
    assert not [n for n in os.listdir(cluster.home / "runtime" / "releases") if ".tmp-" in n]
