"""Regression: a restart whose backend died between the stop and the start left the app
stopped for good, though recover.md promises it comes back: the start was held in the
dead generation's memory. It is now recorded in backend.db before the stop is sent, and
the generation that recovers stops it again (joining the owner's stop, which outlived
the generation that asked for it) and starts it once it is down.

Real daemons; SIGKILL of the backend in the middle of a real restart, then the forced
recovery the invalidated certificate asks for."""

from __future__ import annotations

import sys
from pathlib import Path

from backend.store import BackendStore
from backend.testing import in_thread

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import wait_gone

STOP_S = 3
CONFIG = ('[stacks.s.apps.slow]\ncommand = ["sh", "-c", '
          "\"trap '' TERM; while :; do sleep 0.2; done\"]\n"
          f'restart = "never"\nstop = {{ timeout = {STOP_S} }}\n')


def _wanted(cluster) -> list[str]:
    store = BackendStore(str(cluster.layout.backend_db))
    try:
        return store.wanted_starts()
    finally:
        store.close()


def test_a_restart_cut_by_a_backend_crash_still_starts_the_app(cluster):
    cluster.up(CONFIG)
    before = cluster.wait_ready(1)["s/slow/0"]["pid"]
    restart = in_thread(lambda: cluster.cli("restart", "s/slow"))
    cluster.wait(lambda: cluster.apps()["s/slow/0"]["state"] == "stopping", 20, "stopping")
    assert _wanted(cluster) == ["s/slow/0"]     # durable before the stop was sent
    dead = cluster.kill_backend()
    wait_gone(dead)
    restart[0].join(60)
    # the stop was in flight: the certificate no longer vouches, recovery is forced
    cluster.wait(lambda: cluster.cli("backend", "status").out.get("blocked") is not None,
                 60, "recovery blocked")
    plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
    forced = cluster.cli("backend", "recover", "--digest", plan["digest"])
    assert forced.code == 0, (forced.out, forced.stderr)
    cluster.wait(lambda: cluster.apps()["s/slow/0"]["pid"] not in (None, before), 30,
                 "started again")
    app = cluster.wait_ready(1)["s/slow/0"]
    assert app["restarts"] == 1, app
    # stopped as a stop, not a crash: restart = "never" would have left it exited
    states = cluster.cli_text("events", "--kind", "state")
    assert "ready → stopping" in states and "stopping → stopped" in states
    assert "stopped → starting" in states and "exited" not in states
    assert _wanted(cluster) == []
    log = cluster.backend_log()
    assert "s/slow/0: a restart or start asked of the previous generation" in log
