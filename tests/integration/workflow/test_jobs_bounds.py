"""A job ledger stays bounded, through the real owner, guardian and backend: a template
admits at most max_pending open records (JOB_QUEUE_FULL over the public API, nothing
recorded, a repeated key still answered), and retention deletes a pruned record's
output from the owner's journal with it (the pass interval shortened by a test knob)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from protocol.errors import JobQueueFull, NotFound


def config(home: Any) -> str:
    gate = f"{home}/gate"
    return ('[stacks.b.jobs.hold]\ncommand = ["sh", "-c", '
            f'"while [ ! -e {gate} ]; do sleep 0.05; done"]\nmax_pending = 2\n'
            '[stacks.b.jobs.say]\ncommand = ["sh", "-c", "echo said $TENURE_JOB_ID"]\n'
            'retention = { keep = 1 }\n')


def logs(cluster: Any, instance: int) -> list[bytes]:
    recs = cluster.call("logs", {"stack": "b", "app": "job:say", "instance": instance,
                                 "limit": 100})["records"]
    return [r["data"] for r in recs]


def test_max_pending_refuses_over_the_api_and_retention_forgets_the_output(cluster):
    cluster.env["TENURE_JOB_PRUNE_EVERY"] = "0.3"
    cluster.up(config(cluster.home))
    a = cluster.call("job.run", {"template": "b/hold", "key": "a"})["job"]
    b = cluster.call("job.run", {"template": "b/hold", "key": "b"})["job"]
    def ledger() -> list[tuple[int, str]]:
        return [(j["id"], j["key"]) for j in cluster.call("job.list", {"limit": 100})["jobs"]]
    before = ledger()
    with pytest.raises(JobQueueFull) as err:
        cluster.call("job.run", {"template": "b/hold", "key": "c"})
    assert err.value.data == {"template": "b/hold", "max_pending": 2, "open": 2}
    res = cluster.cli("job", "run", "b/hold")                  # the CLI says it too
    assert res.code == 1 and res.out["error"]["code"] == "JOB_QUEUE_FULL", res
    assert ledger() == before == [(b["id"], "b"), (a["id"], "a")]
    again = cluster.call("job.run", {"template": "b/hold", "key": "a"})
    assert (again["job"]["id"], again["deduplicated"]) == (a["id"], True)

    first = cluster.cli("job", "run", "b/say", "--wait", check=True).out["job"]
    cluster.wait(lambda: logs(cluster, first["id"]) == [f"said {first['id']}".encode()],
                 10, "the first say's output")
    second = cluster.cli("job", "run", "b/say", "--wait", check=True).out["job"]
    cluster.wait(lambda: not any(j["id"] == first["id"] for j in
                                 cluster.call("job.list", {"template": "b/say"})["jobs"]),
                 20, "the first say pruned (keep = 1)")
    assert logs(cluster, first["id"]) == []                  # its output went with it
    with pytest.raises(NotFound):
        cluster.call("job.show", {"id": first["id"]})
    time.sleep(1.0)                                          # a few more passes
    assert logs(cluster, second["id"]) == [f"said {second['id']}".encode()]
    assert cluster.call("job.show", {"id": b["id"]})["state"] == "admitted"  # open: kept

    (cluster.home / "gate").touch()
    for rec in (a, b):
        cluster.wait(lambda r=rec: cluster.call("job.show", {"id": r["id"]})["state"]
                     == "succeeded", 20, "hold ended")
    c = cluster.call("job.run", {"template": "b/hold", "key": "c"})
    assert c["deduplicated"] is False                         # room again
