"""`tenure up --no-wait`: on a home whose daemons are down it queues the config and
returns without waiting; the backend generation the guardian starts applies it. With a
backend running it admits the apply and leaves it running."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from backend import queuefile

APP = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = {n}\n'


def _stopped_home(cluster: Any) -> None:
    cluster.up()                    # first run: the release is selected
    assert cluster.down().ok


def _queued_events(cluster: Any) -> list[dict[str, Any]]:
    return cluster.call("events.read", {"kinds": ["queued-config"]})["events"]


def test_no_wait_queues_the_config_and_the_backend_applies_it(cluster):
    _stopped_home(cluster)
    res = cluster.cli("up", "--no-wait", "--config",
                      str(cluster.write_config(APP.format(n=2))), check=True)
    assert res.out["starting"] == ["owner", "guardian"]
    rid = res.out["queued"]["request_id"]
    assert "text" not in res.out["queued"]
    apps = cluster.wait_ready(2)
    assert set(apps) == {"s/a/0", "s/a/1"}
    ops = cluster.call("op.list", {"open": False})["operations"]
    assert [op["request_id"] for op in ops] == [rid]
    cluster.wait(lambda: not os.listdir(cluster.layout.backend) or not any(
        n.startswith("queued-config") for n in os.listdir(cluster.layout.backend)),
        what="queue taken")
    cluster.wait(lambda: _queued_events(cluster), what="queued-config event")
    ev = _queued_events(cluster)[0]["data"]
    assert ev["outcome"] == "admitted" and ev["request_id"] == rid, ev
    assert cluster.status()["queued_config"] is None
    text = cluster.cli_text("events", "--kind", "queued-config")
    assert f"{rid} from {cluster.config_path}: admitted as {ops[0]['id']}" in text, text
    # the same file again, everything running: admitted at once, not waited for
    again = cluster.cli("up", "--no-wait", "--config", str(cluster.config_path), check=True)
    assert again.out["apply"]["operation"]["outcome"] == "no-change", again.out
    more = cluster.cli("up", "--no-wait", "--config",
                       str(cluster.write_config(APP.format(n=3))), check=True)
    op = more.out["apply"]["operation"]
    assert op["id"] is not None, op
    cluster.wait_ready(3)
    assert cluster.down().ok and cluster.leftovers() == []


def test_a_queue_the_backend_cannot_apply_is_set_aside_and_reported(cluster):
    _stopped_home(cluster)
    queued = cluster.layout.queued_config
    queuefile.queue(queued, "[stacks.s.apps.a]\ncommand = 3\n", "/broken.toml")
    cluster.up()                    # starts the daemons, then waits for the backend
    rejected = Path(queued.replace(".json", ".rejected.json"))
    cluster.wait(rejected.exists, what="rejected queue")
    assert not Path(queued).exists()
    cluster.wait(lambda: _queued_events(cluster), what="queued-config event")
    ev = _queued_events(cluster)[0]["data"]
    assert ev["outcome"] == "rejected" and ev["code"] == "CONFIG_INVALID", ev
    assert "/broken.toml:2: stacks.s.apps.a.command" in ev["msg"], ev   # why, not only the code
    said = cluster.cli_text("events", "--kind", "queued-config")
    assert "rejected (CONFIG_INVALID: /broken.toml:2: stacks.s.apps.a.command" in said, said
    st = cluster.status()
    assert st["apps"] == [] and st["queued_config"] == "rejected"   # the backend runs on
    assert "was rejected: `tenure events --kind queued-config`" in cluster.cli_text("status")
    assert cluster.call("op.list", {"open": False})["operations"] == []
    assert cluster.down().ok


def test_no_wait_on_a_fresh_home_selects_the_release_first(cluster):
    res = cluster.cli("up", "--no-wait", "--release", str(cluster.release), "--config",
                      str(cluster.write_config(APP.format(n=1))), check=True)
    assert res.out["release_sealed"] is not None, res.out
    assert res.out["apply"]["operation"]["id"] is not None
    cluster.wait_ready(1)
    assert cluster.down().ok


def test_no_wait_and_foreground_do_not_go_together(cluster):
    res = cluster.cli("up", "--no-wait", "--foreground")
    assert res.code == 2 and res.out["error"]["code"] == "BAD_REQUEST", res
    assert not Path(cluster.layout.owner_sock).exists()


def test_down_right_after_no_wait_stops_what_it_started(cluster):
    _stopped_home(cluster)
    cluster.cli("up", "--no-wait", "--config", str(cluster.write_config(APP.format(n=1))),
                check=True)
    down = cluster.down()            # at once: the background start may not be done
    assert down.ok and down.out["owner"] and down.out["guardian"], down.out
    assert cluster.leftovers() == []


def test_status_says_why_the_background_start_failed(cluster):
    from backend.cli.background import last_background_start
    _stopped_home(cluster)
    record = Path(cluster.layout.runtime) / "guardian-release.json"
    good = record.read_bytes()
    record.write_bytes(b'{"broken')            # the guardian refuses to start (exit 2)
    cluster.cli("up", "--no-wait", check=True)
    cluster.wait(lambda: (last_background_start(cluster.layout) or {}).get("ok") is False,
                 what="the background start's failure in logs/up.log")
    st = cluster.cli("status")
    assert st.code == 3 and st.out["background_start"]["ok"] is False, st.out
    assert "STATE_CORRUPT" in st.out["background_start"]["error"]
    text = cluster.cli_text("status", expect=3)
    assert "the background start of `tenure up --no-wait` at" in text, text
    record.write_bytes(good)
    assert cluster.down().ok and cluster.leftovers() == []   # the owner it did start


def test_a_config_that_does_not_parse_starts_nothing(cluster):
    """The release is verified beside the config's parse; a config that does not parse
    leaves the background start nothing to do: no daemon, no record, no process."""
    from backend.cli.background import last_background_start
    from backend.cli.upwait import wait_background_start
    _stopped_home(cluster)
    bad = cluster.write_config("[stacks.s.apps.a]\ncommand = 3\n")
    res = cluster.cli("up", "--no-wait", "--config", str(bad))
    assert res.code != 0 and res.out["error"]["code"] == "CONFIG_INVALID", res
    assert wait_background_start(cluster.layout, timeout=30)   # its child has gone
    # it was forked (it opens up.log, which may be after this command ended: looked at
    # once the child is gone)
    assert (cluster.layout.logs / "up.log").exists()
    assert last_background_start(cluster.layout) is None        # without a record
    assert not Path(cluster.layout.owner_sock).exists()
    assert not Path(cluster.layout.guardian_sock).exists()
    assert not Path(cluster.layout.queued_config).exists()
    assert cluster.leftovers() == []


WRITER = ('import sys, time\nline = "x" * 16383 + "\\n"\n'
          'for _ in range({n}):\n    sys.stdout.write(line)\nsys.stdout.flush()\n'
          'time.sleep(1000)\n')


def test_an_app_it_starts_keeps_its_log_budget_from_its_first_line(cluster):
    """The app's log_retention is told to the owner before the app is launched: it
    writes 96 MiB at once, past the owner's default budget (64 MiB), and keeps all of
    it. Told up to a second later, the default had pruned its oldest lines first."""
    import sys

    from protocol.client import Client
    _stopped_home(cluster)
    n = 96 * 64   # 16 KiB lines
    script = cluster.home / "writer.py"
    script.write_text(WRITER.format(n=n))
    config = (f'[stacks.s.apps.w]\ncommand = ["{sys.executable}", "{script}"]\n'
              'log_retention = "256MiB"\n')
    cluster.cli("up", "--no-wait", "--config", str(cluster.write_config(config)),
                check=True)

    def kept() -> int:
        count, after, more = 0, 0, True
        with Client(cluster.layout.owner_sock, pin=False) as c:
            while more:
                page = c.call("logs.read", {"app": "w", "after": after, "limit": 10_000})
                count += len(page["records"])
                after, more = page["next"], page["more"]
        return count

    def written() -> bool:
        with Client(cluster.layout.owner_sock, pin=False) as c:
            return int(c.call("status")["log_last_id"]) >= n
    cluster.wait(written, timeout=60, what="the writer's lines journalled")
    assert kept() == n
    assert cluster.down().ok and cluster.leftovers() == []
