"""A handoff whose drain does not end says what held it, through the real path: a stop
of an app that ignores SIGTERM keeps an owner call in flight past the guardian's
deadline. Was: `the incumbent did not drain in time`, with `steps: []` and
`in_flight: 1` in the receipt; the `tenure stop` waiting meanwhile was told the backend
was handing over to another generation, though the handoff was aborted."""

from __future__ import annotations

import time

from backend.testing import in_thread

CONFIG = ('[stacks.s.apps.stubborn]\ncommand = ["sh", "-c", "trap \'\' TERM; '
          'while :; do sleep 0.2; done"]\nstop = { timeout = 12 }\n')


def test_a_drain_held_by_an_owner_call_names_it(cluster):
    cluster.env["TENURE_GUARDIAN_DEADLINE"] = "3"
    cluster.up(CONFIG)
    app = cluster.wait_ready(1)["s/stubborn/0"]
    release = str(cluster.cli("backend", "status", check=True).out["selector"]["current"])
    stop = in_thread(lambda: cluster.cli("stop", "s/stubborn"))
    cluster.wait(lambda: cluster.apps()["s/stubborn/0"]["state"] == "stopping", 10,
                 "stopping")
    time.sleep(0.5)
    act = cluster.cli("backend", "upgrade", release).out["activation"]
    assert act["phase"] == "aborted" and act["code"] == "HANDOFF_FAILED", act
    assert act["error"].startswith("the incumbent did not drain in time (owner calls in "
                                   f"flight: stop s/stubborn/0/{app['generation']} (for "), act
    stop[0].join(30)
    said = stop[1]["ok"]
    assert said.code == 1 and said.out["error"]["code"] == "SHUTTING_DOWN", said
    assert "this one again if the handoff is aborted" in said.out["error"]["msg"], said
    cluster.wait(lambda: cluster.apps()["s/stubborn/0"]["state"] == "stopped", 20,
                 "stopped, by the backend that carried on")
