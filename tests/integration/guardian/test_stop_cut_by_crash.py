"""A backend killed right after a `tenure stop` it answered: the generation that
recovers leaves the stopped instances stopped, and never runs an instance twice.

Was: the new generation replayed the owner's exit of each stopped launch (the owner
stopped it on request) as a stop of the owner's own, and relaunched it; its adoption
then found that launch, made after it read the owner's inventory, not in the inventory
and launched the instance again. Two processes ran for one instance, one of them unknown
to `tenure status`, `tenure stop` no longer reached it, and the recovery certificate
never vouched again (the owner's inventory never matched). The stop is now saved in
backend.db before it is sent, and adoption only relaunches launches it knew before the
replay.

Real daemons; SIGKILL of the backend right after the stop's answer; the guardian
recovers by itself (no app runs, so nothing needs vouching for)."""

from __future__ import annotations

import collections
import json
import os
import signal

CONFIG = ('[stacks.x.apps.a]\ncommand = ["sleep", "infinity"]\n'
          '[stacks.x.apps.b]\ncommand = ["sleep", "infinity"]\nrestart = "always"\n')


def _live_per_instance(cluster) -> dict[str, int]:
    with cluster.owner() as c:
        rows = c.call("inventory")["launches"]
    return collections.Counter(r["launch_key"].rsplit("/", 1)[0] for r in rows)


def test_a_stop_cut_by_a_backend_crash_stays_a_stop(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    cluster.wait(lambda: cluster.cli("backend", "status").out["recovery"]["state"] ==
                 "ready", 20, "a certificate")
    backend = cluster.backend_pid()
    cluster.cli("stop", "x", check=True)
    os.kill(backend, signal.SIGKILL)
    cluster.wait(lambda: cluster.backend_pid() != backend, 60, "a recovered backend")
    cluster.wait(lambda: cluster.cli("backend", "status").out["recovery"]["state"] ==
                 "ready", 30, "a certificate again")
    assert _live_per_instance(cluster) == {}, _live_per_instance(cluster)
    assert {k: a["state"] for k, a in cluster.apps().items()} == {
        "x/a/0": "stopped", "x/b/0": "stopped"}
    # each stop's exit is told once (was: by the replay, and again as lost)
    out = cluster.cli("events", "--kind", "exit", "-n", "50", check=True).out
    exits = [json.loads(x) for x in out.splitlines() if x.strip()] \
        if isinstance(out, str) else [out]
    told = collections.Counter((e["target"], e["data"]["pid"]) for e in exits)
    assert sorted(told.values()) == [1, 1], told

