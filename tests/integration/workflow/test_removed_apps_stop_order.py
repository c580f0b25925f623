"""An apply that removes apps stops them in the reverse of their start order: an app
before the apps it starts after (`after`), as systemd stops units. Each app writes its
name when SIGTERM reaches it, so the file says the order in which they were asked to
stop. Was: in the order of their names (db, then web and worker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _app(name: str, log: Path, extra: str = "") -> str:
    """An app that appends its name to ``log`` on SIGTERM, then ends (with its sleep)."""
    script = f"trap 'echo {name} >> {log}; kill $!; exit 0' TERM; sleep 1000 & wait"
    return f'[stacks.shop.apps.{name}]\ncommand = ["sh", "-c", "{script}"]\n{extra}\n'


KEEP = '[stacks.keep.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_removed_apps_get_sigterm_in_the_reverse_of_their_start_order(cluster: Any
                                                                      ) -> None:
    log = cluster.home / "term.log"
    shop = (_app("db", log) + _app("web", log, 'after = ["db"]')
            + _app("worker", log, 'after = ["web"]'))
    cluster.up(KEEP + shop)
    cluster.wait_ready(4)
    path = cluster.write_config(KEEP, "keep.toml")
    plan = cluster.cli("plan", "--config", str(path), check=True).out
    assert [(c["action"], c["app"]) for c in plan["changes"]] == [
        ("stop", "shop/worker"), ("stop", "shop/web"), ("stop", "shop/db")], plan
    op = cluster.cli("apply", plan["id"], "--wait", check=True).out
    assert op["outcome"] == "success", op
    assert log.read_text().split() == ["worker", "web", "db"]
