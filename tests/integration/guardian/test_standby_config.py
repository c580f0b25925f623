"""A hot upgrade's standby parses the applied config while the incumbent is drained and
fenced, and the new generation starts from that parse instead of parsing inside the
handoff pause (backend.config.parse_saved decides; tests/unit/backend/
test_standby_config.py has the rules). The config it serves is the one applied."""

from __future__ import annotations

APPS = 20
CONFIG = "".join(f'[stacks.s.apps.a{i}]\ncommand = ["sleep", "100000"]\n' for i in range(APPS))


def test_the_candidate_serves_the_config_its_standby_parsed(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(APPS)
    before = cluster.call("generation.status")["config_revision"]
    rid = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    act = cluster.cli("backend", "upgrade", rid, check=True).out["activation"]
    assert act["outcome"] == "success", act
    text = cluster.backend_log(act["id"])
    assert f"standby: config {before[:12]} parsed ahead" in text, text
    assert f"config {before[:12]}: as parsed while standing by" in text, text
    assert cluster.call("generation.status")["config_revision"] == before
    assert len(cluster.wait_ready(APPS)) == APPS
