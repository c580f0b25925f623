"""An imported supervisord setup and Procfile run under tenure: `tenure import` writes a
tenure.toml that the real `tenure plan` accepts and `tenure apply` starts, in order."""

from __future__ import annotations

import time
from typing import Any

SUPERVISORD = """\
[supervisord]
environment=GREETING="hello from supervisord"

[program:db]
command=sleep 1000
priority=10
startsecs=0

[program:web]
command=/bin/sh -c "echo $GREETING; exec sleep 1000"
process_name=%(program_name)s_%(process_num)d
numprocs=2
priority=20
startsecs=1
stopsignal=INT
stopwaitsecs=5
"""

PROCFILE = "clock: sleep 1000\n"


def test_imported_files_plan_and_start(cluster: Any) -> None:
    cluster.up()
    conf = cluster.home / "supervisord.conf"
    conf.write_text(SUPERVISORD)
    procfile = cluster.home / "Procfile"
    procfile.write_text(PROCFILE)
    out = cluster.home / "tenure.toml"
    res = cluster.cli("import", str(conf), str(procfile), "--stack", "shop", "-o", str(out),
                      check=True)
    assert res.out["stacks"] == {"shop": ["clock", "db", "web"]}
    assert res.out["not_mapped"] == []
    plan = cluster.cli("plan", "--config", str(out), check=True).out
    assert sorted((c["action"], c["app"]) for c in plan["changes"]) == [
        ("start", "shop/clock"), ("start", "shop/db"), ("start", "shop/web")]
    cluster.cli("apply", plan["id"], "--wait", check=True)
    apps = cluster.wait_ready(4)
    assert sorted(apps) == ["shop/clock/0", "shop/db/0", "shop/web/0", "shop/web/1"]
    logs = cluster.cli("logs", "shop/web", check=True).out
    assert "hello from supervisord" in str(logs)
    # planning the same file again finds nothing to change
    assert cluster.cli("plan", "--config", str(out), check=True).out["changes"] == []


def test_an_imported_program_that_outlives_startsecs_is_restarted_as_often_as_it_crashes(
        cluster: Any) -> None:
    """supervisord counts against ``startretries`` only runs shorter than ``startsecs``;
    a program that crashes after each 1.3 s run is restarted for ever. Under the imported
    config it was `failed` (start limit hit) after its third run."""
    cluster.up()
    conf = cluster.home / "supervisord.conf"
    conf.write_text('[program:crashy]\ncommand=/bin/sh -c "sleep 1.3; exit 1"\n'
                    "startsecs=1\nstartretries=1\nautorestart=true\n")
    out = cluster.home / "tenure.toml"
    cluster.cli("import", str(conf), "--stack", "cr", "-o", str(out), check=True)
    cluster.cli("up", "--config", str(out), check=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        (inst,) = cluster.cli("status", check=True).out["apps"]
        assert inst["state"] != "failed", inst
        if inst["restarts"] >= 5:
            break
        time.sleep(0.2)
    assert inst["restarts"] >= 5, inst
