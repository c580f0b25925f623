"""A stack stop asks ``db`` to stop only once ``web`` (``after = ["db"]``) is down, with
real processes: ``web``'s TERM trap takes 4 s to end it, and each app writes the time it
got its TERM. A stack stop, or a `tenure stop` of the stack, cut by a backend SIGKILL
while ``web`` still stops is finished, in order, by the generation recovered next.
`tenure down` goes in the same order: the owner stops the apps itself, in the order the
backend told it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from backend.model import StopSpec
from protocol.durable import read_rows

TRAP = ("trap 'date +%s.%N > {out}/{name}.term; sleep {linger}; date +%s.%N > "
        "{out}/{name}.end; exit 0' TERM; while :; do sleep 0.1; done")


def config(out: Path) -> str:
    def app(name: str, linger: float, after: str = "") -> str:
        script = TRAP.format(out=out, name=name, linger=linger)
        return (f"[stacks.s.apps.{name}]\ncommand = {json.dumps(['sh', '-c', script])}\n"
                + (f'after = ["{after}"]\n' if after else ""))
    return app("db", 0) + app("web", 4, after="db") + \
        '[stacks.t.apps.keep]\ncommand = ["sleep", "1000"]\n'


def at(out: Path, name: str) -> float:
    return float((out / name).read_text())


def reviewed(cluster: Any) -> str:
    return str(cluster.cli("stack", "stop", "s", "--dry-run", check=True).out["digest"])


def test_a_stack_stop_stops_an_app_after_the_apps_that_start_after_it(
        cluster: Any, tmp_path: Path) -> None:
    cluster.up(config(tmp_path))
    cluster.wait_ready(3)
    stopped = cluster.cli("stack", "stop", "s", "--digest", reviewed(cluster), timeout=60)
    assert stopped.ok and stopped.out["settled"], stopped
    assert at(tmp_path, "db.term") >= at(tmp_path, "web.end"), "db asked before web ended"
    assert cluster.apps()["t/keep/0"]["ready"]


def test_a_stack_stop_cut_by_a_backend_kill_is_finished_in_order(
        cluster: Any, tmp_path: Path) -> None:
    cluster.up(config(tmp_path))
    cluster.wait_ready(3)
    stop = cluster.follow("--json", "stack", "stop", "s", "--digest", reviewed(cluster))
    cut_by_a_backend_kill(cluster, tmp_path, stop)
    finished_by_the_next_generation(cluster, tmp_path)
    assert "stopping them, in the reverse of their start order" in cluster.backend_log()


def cut_by_a_backend_kill(cluster: Any, tmp_path: Path, stop: Any,
                          before: Callable[[], None] | None = None) -> None:
    """Kill the backend once web was asked to stop (``before`` that), so before db
    was; the command ``stop`` is cut."""
    try:
        cluster.wait(lambda: (tmp_path / "web.term").exists(), 20, "web asked to stop")
        if before is not None:
            before()
        dead = cluster.kill_backend()   # before web ended, so before db was asked
        cluster.wait(lambda: not psutil.pid_exists(dead)
                     or psutil.Process(dead).status() == psutil.STATUS_ZOMBIE, 30,
                     "the backend gone")
        stop.communicate(timeout=30)   # cut: its backend is gone
    finally:
        if stop.poll() is None:
            stop.kill()
            stop.communicate()
    assert not (tmp_path / "db.term").exists()


def finished_by_the_next_generation(cluster: Any, tmp_path: Path) -> None:
    """A stop was in flight: the certificate no longer vouches, so the recovery is
    forced; the next generation then asks db once web ended."""
    cluster.wait(lambda: cluster.cli("backend", "status").out.get("blocked") is not None,
                 60, "recovery blocked")
    plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
    forced = cluster.cli("backend", "recover", "--digest", plan["digest"])
    assert forced.code == 0, (forced.out, forced.stderr)
    cluster.wait(lambda: (tmp_path / "db.end").exists(), 60, "db stopped by the next "
                 "generation")
    assert at(tmp_path, "db.term") >= at(tmp_path, "web.end"), "db asked before web ended"
    cluster.wait(lambda: all(cluster.apps()[k]["state"] == "stopped"
                             for k in ("s/db/0", "s/web/0")), 30, "s stopped")


def saved_state(cluster: Any, key: str) -> str | None:
    """The state backend.db holds for instance ``key`` (saved every 0.5 s)."""
    rows = read_rows(str(cluster.layout.backend_db),
                     f"SELECT wire FROM instances WHERE key = '{key}'") or []
    return json.loads(rows[0][0]).get("state") if rows else None


def test_a_plain_stop_cut_by_a_backend_kill_is_finished_in_order(
        cluster: Any, tmp_path: Path) -> None:
    """Was: the levels `tenure stop s` had not asked lived only in its backend's
    memory, and db kept running for good under the next generation."""
    cluster.up(config(tmp_path))
    cluster.wait_ready(3)
    stop = cluster.follow("--json", "stop", "s", "--timeout", "60")
    # saved as stopping: the next generation then knows web is still being stopped, and
    # asks db once it is down (killed sooner, it adopts web as running)
    cut_by_a_backend_kill(cluster, tmp_path, stop, lambda: cluster.wait(
        lambda: saved_state(cluster, "s/web/0") == "stopping", 10, "web saved stopping"))
    finished_by_the_next_generation(cluster, tmp_path)
    assert cluster.apps()["t/keep/0"]["ready"]
    assert "`tenure stop s` was cut before it asked every app" in cluster.backend_log()


def test_down_stops_an_app_after_the_apps_that_start_after_it(
        cluster: Any, tmp_path: Path) -> None:
    cluster.up(config(tmp_path))
    cluster.wait_ready(3)

    def budget() -> float:
        with cluster.owner() as c:
            return float(c.call("status")["stop_budget"])
    # told within a second of the start: two levels of s, the default policy each
    policy = StopSpec().timeout + StopSpec().kill_after
    cluster.wait(lambda: budget() == 2 * policy, 10, "the stop order told to the owner")
    down = cluster.down()
    assert down.ok, down
    assert at(tmp_path, "db.term") >= at(tmp_path, "web.end"), "db asked before web ended"
