"""`tenure up --config NEW` on a home whose daemons are down (after `tenure down`, a
reboot) starts NEW, never the config applied before it.

Was: the first backend generation started every instance of the old config, and the
apply of NEW then stopped the apps it removes and restarted the ones it changes: a
removed app ran for a moment, a changed one started twice (`--no-wait` as well)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def _app(name: str, tag: str, starts: Path, extra: str = "") -> str:
    return (f'[stacks.s.apps.{name}]\ncommand = ["sh", "-c", '
            f'"echo {name}-{tag} >> {starts}; exec sleep 1000"]\n{extra}')


def _started(starts: Path) -> list[str]:
    return sorted(starts.read_text().split()) if starts.exists() else []


@pytest.mark.parametrize("how", [[], ["--no-wait"]], ids=["wait", "no-wait"])
def test_up_with_a_new_config_after_down_starts_only_the_new_config(cluster: Any,
                                                                    how: list[str]) -> None:
    starts = cluster.home / "starts"
    old = (_app("keep", "v1", starts) + _app("gone", "v1", starts)
           + _app("chg", "v1", starts) + _app("more", "v1", starts))
    cluster.up(old)
    cluster.wait_ready(4)
    assert cluster.down().ok
    starts.unlink()
    new = (_app("keep", "v1", starts) + _app("chg", "v2", starts)
           + _app("more", "v1", starts, "instances = 2\n") + _app("add", "v2", starts))
    res = cluster.cli("up", *how, "--timeout", "60", "--config",
                      str(cluster.write_config(new, "new.toml")), check=True)
    cluster.wait_ready(5)
    cluster.wait(lambda: len(_started(starts)) >= 5, what="5 starts")
    assert _started(starts) == ["add-v2", "chg-v2", "keep-v1", "more-v1", "more-v1"], \
        (_started(starts), res.out)
    assert set(cluster.apps()) == {"s/keep/0", "s/chg/0", "s/more/0", "s/more/1", "s/add/0"}
    assert cluster.down().ok and cluster.leftovers() == []


def test_a_new_config_the_backend_refuses_starts_the_applied_one_as_it_was(cluster: Any
                                                                           ) -> None:
    starts = cluster.home / "starts"
    cluster.up(_app("keep", "v1", starts) + _app("chg", "v1", starts))
    cluster.wait_ready(2)
    assert cluster.down().ok
    starts.unlink()
    bad = cluster.write_config(_app("keep", "v1", starts)
                               + _app("chg", "v2", starts, 'user = "no-such-user-q"\n'),
                               "bad.toml")
    res = cluster.cli("up", "--timeout", "60", "--config", str(bad))
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "CONFIG_INVALID", res
    assert "unknown user 'no-such-user-q'" in err["msg"] and str(bad) in err["msg"], err
    cluster.wait_ready(2)   # the applied config, as `tenure up` alone starts it
    assert _started(starts) == ["chg-v1", "keep-v1"]
    st = cluster.status()
    assert st["queued_config"] is None, st   # the command said it: nothing left to say
    ops = cluster.call("op.list", {"open": False})["operations"]
    assert err["data"]["request_id"] not in [op["request_id"] for op in ops], (ops, err)
    assert cluster.down().ok and cluster.leftovers() == []


def test_an_instance_stopped_by_hand_stays_stopped_across_down_and_up(cluster: Any) -> None:
    starts = cluster.home / "starts"
    cluster.up(_app("keep", "v1", starts, "instances = 2\n") + _app("chg", "v1", starts))
    cluster.wait_ready(3)
    cluster.cli("stop", "s/keep/1", check=True)
    cluster.cli("stop", "s/chg/0", check=True)
    assert cluster.down().ok
    starts.unlink()
    res = cluster.cli("up", "--timeout", "60", "--config", str(cluster.write_config(
        _app("keep", "v1", starts, "instances = 2\n") + _app("chg", "v2", starts),
        "new.toml")), check=True)
    cluster.wait_ready(1)
    apps = cluster.apps()
    assert apps["s/keep/1"]["state"] == "stopped" and apps["s/chg/0"]["state"] == "stopped", \
        (apps, res.out)
    assert _started(starts) == ["keep-v1"], _started(starts)
    assert cluster.down().ok and cluster.leftovers() == []


def test_down_while_the_queued_config_applies_starts_nothing_on_the_old_definition(
        cluster: Any) -> None:
    """Was: `down` cancelled the queued config's operation, and its end started what it
    had not reached yet, on the old definition, while `down` ran."""
    starts = cluster.home / "starts"
    cluster.up(_app("slow", "v1", starts) + _app("chg", "v1", starts, 'after = ["slow"]\n'))
    cluster.wait_ready(2)
    assert cluster.down().ok
    starts.unlink()
    new = (_app("slow", "v2", starts, '[stacks.s.apps.slow.ready]\nkind = "delay"\n'
                'delay = 30\n')
           + _app("chg", "v2", starts, 'after = ["slow"]\n'))
    cluster.cli("up", "--no-wait", "--config", str(cluster.write_config(new, "new.toml")),
                check=True)
    cluster.wait(lambda: _started(starts) == ["slow-v2"], what="slow started")
    cluster.wait(lambda: cluster.call("op.list", {"open": True})["operations"],
                 what="the queued config's operation")
    assert cluster.down().ok and cluster.leftovers() == []
    assert _started(starts) == ["slow-v2"]   # chg waited for slow: never run


def test_an_up_that_starts_nothing_leaves_nothing_queued(cluster: Any) -> None:
    """Was: its config stayed queued, and a later plain `tenure up` applied it."""
    starts = cluster.home / "starts"
    cluster.up(_app("keep", "v1", starts))
    cluster.wait_ready(1)
    assert cluster.down().ok
    log = cluster.home / "logs" / "owner.log"
    log.chmod(0o644)   # refused: nothing is started
    res = cluster.cli("up", "--timeout", "60", "--config",
                      str(cluster.write_config(_app("new", "v2", starts), "new.toml")))
    assert res.code == 1 and res.out["error"]["code"] == "UNSAFE_PATH", res
    assert not any(n.startswith("queued-config") for n in os.listdir(cluster.layout.backend))
    log.chmod(0o600)
    starts.unlink()
    cluster.cli("up", "--timeout", "60", check=True)
    cluster.wait_ready(1)
    assert set(cluster.apps()) == {"s/keep/0"} and _started(starts) == ["keep-v1"]
    assert cluster.down().ok and cluster.leftovers() == []
