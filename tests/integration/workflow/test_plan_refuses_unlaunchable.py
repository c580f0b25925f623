"""A plan refuses what the owner would refuse at launch: each of these planned fine,
and the apply then left the app failed (or half rolled out) with the owner's refusal
in its detail. Now `tenure plan` says CONFIG_INVALID with the key, and nothing runs."""

from __future__ import annotations

import os

import pytest

from backend.model import MAX_STOP_WAIT_S
from owner.specs import MAX_WAIT_S

BASE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_the_stop_wait_bound_is_the_owners() -> None:
    assert MAX_STOP_WAIT_S == MAX_WAIT_S


def _nr_open() -> int:
    with open("/proc/sys/fs/nr_open") as f:
        return int(f.read())


@pytest.mark.parametrize(("extra", "key", "problem"), [
    ("stop = { timeout = 700000 }", "stacks.s.apps.a.stop.timeout", "at most 604800 s"),
    ("stop = { kill_after = 604801 }", "stacks.s.apps.a.stop.kill_after",
     "at most 604800 s"),
    (f"limits = {{ nofile = {_nr_open() + 1} }}", "stacks.s.apps.a.limits.nofile",
     f"at most {_nr_open()} on this host"),
    ('limits = { nofile = "infinity" }', "stacks.s.apps.a.limits.nofile",
     f"at most {_nr_open()} on this host"),
    ('sockets.web = { listen = "unix:LINK/a.sock" }', "stacks.s.apps.a.sockets.web",
     "is reached through a symlink"),
])
def test_a_plan_refuses_what_the_owner_would_refuse_at_launch(cluster, extra, key,
                                                              problem) -> None:
    cluster.up()
    link = cluster.home / "ln"
    os.symlink(cluster.home, link)
    path = cluster.write_config(BASE + extra.replace("LINK", str(link)) + "\n", "bad.toml")
    res = cluster.cli("plan", "--config", str(path))
    assert res.code == 1 and res.out["error"]["code"] == "CONFIG_INVALID", res
    assert key in res.out["error"]["msg"] and problem in res.out["error"]["msg"], res
    assert cluster.apps() == {}
