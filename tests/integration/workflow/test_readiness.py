"""Every readiness kind with real processes — notify (from a child shell calling
`systemd-notify --ready`), tcp (an app that listens only after a delay), http, exec and
delay — and a readiness timeout that ends in restart, backoff and the start limit.

The config is applied with plan/apply while the test polls `status` every ~20 ms, so the
first moment each app is reported ready can be compared with the moment the app itself
recorded (a timestamp file written just before it becomes ready).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

from backend.testing import free_port, sleeping


def observations(cluster: Any) -> list[dict[str, Any]]:
    with cluster.owner() as c:
        return list(c.call("observations.read", {"after": 0, "limit": 10000})["events"])


def launches(cluster: Any, stack: str, app: str) -> list[dict[str, Any]]:
    return [e for e in observations(cluster) if e["kind"] == "launched"
            and (e["stack"], e["app"]) == (stack, app)]


BASE = """
[stacks.base.apps.idle]
command = ["sleep", "1000"]
"""


NEVER_READY = """
[stacks.zz.apps.never-ready]
command = ["sleep", "1000"]
ready = { kind = "exec", command = ["false"], timeout = 0.5, interval = 0.1 }
backoff = { initial = 0.1, max = 0.4 }
start_limit = { burst = 3, interval = 60 }
"""


def readiness_config(d: Path, tcp_port: int, http_port: int) -> str:
    stamp = "import time; open('{f}', 'w').write(repr(time.time()))"
    tcp_app = ("import socket, time; time.sleep(1.0); s = socket.socket(); "
               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
               f"s.bind(('127.0.0.1', {tcp_port})); s.listen(); "
               + stamp.format(f=d / "tcp.ts") + "; time.sleep(1000)")
    http_app = ("import time, http.server as h; time.sleep(0.7); "
                + stamp.format(f=d / "http.ts") + "; "
                f"h.ThreadingHTTPServer(('127.0.0.1', {http_port}), "
                "h.SimpleHTTPRequestHandler).serve_forever()")
    return BASE + f"""
[stacks.rd.apps.notify]
command = ["sh", "-c", "sleep 0.5; date +%s.%N > {d}/notify.ts; systemd-notify --ready; \
exec sleep 1000"]
ready = {{ kind = "notify", timeout = 10 }}

[stacks.rd.apps.tcp]
command = ["python3", "-c", "{tcp_app}"]
ready = {{ kind = "tcp", port = {tcp_port}, timeout = 10, interval = 0.05 }}

[stacks.rd.apps.http]
command = ["python3", "-c", "{http_app}"]
cwd = "/"
ready = {{ kind = "http", url = "http://127.0.0.1:{http_port}/", timeout = 10, \
interval = 0.05 }}

[stacks.rd.apps.exec]
command = ["sh", "-c", "sleep 0.6; date +%s.%N > {d}/exec.ts; touch {d}/exec.flag; \
exec sleep 1000"]
ready = {{ kind = "exec", command = ["test", "-e", "{d}/exec.flag"], timeout = 10, \
interval = 0.05 }}

[stacks.rd.apps.delay]
command = ["sleep", "1000"]
ready = {{ kind = "delay", delay = 0.8 }}

"""


def test_each_readiness_kind_and_a_readiness_timeout(cluster, tmp_path):
    tmp_path.chmod(0o755)
    cluster.up(BASE)
    text = readiness_config(tmp_path, free_port(), free_port())
    path = cluster.write_config(text, "readiness.toml")
    plan = cluster.call("plan", {"config_text": text, "source": str(path)})
    assert sorted(c["app"] for c in plan["changes"]) == [
        "rd/delay", "rd/exec", "rd/http", "rd/notify", "rd/tcp"]
    op = cluster.call("apply", {"plan": plan["id"]})
    # when each app was first seen ready: the backend answered at some moment between
    # the sample's start and its end, so "not before" is judged on the end and "not
    # long after" on the start
    seen_by: dict[str, float] = {}
    seen_from: dict[str, float] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # the operation's end first, then the sample: the last sample is taken after
        # the end, so it sees every app that the operation waited for
        ended = cluster.call("op.show", {"id": op["id"]})["outcome"] is not None
        start = time.time()
        rows = cluster.apps()
        end = time.time()
        for key, row in rows.items():
            if row["ready"] and key not in seen_by:
                seen_from[key], seen_by[key] = start, end
        if ended:
            break
        time.sleep(0.02)
    assert cluster.call("op.show", {"id": op["id"]})["outcome"] == "success"
    apps = cluster.apps()
    for name in ("notify", "tcp", "http", "exec", "delay"):
        assert apps[f"rd/{name}/0"]["state"] == "ready", apps[f"rd/{name}/0"]
        assert apps[f"rd/{name}/0"]["restarts"] == 0
    launched = {name: launches(cluster, "rd", name)[0]["at"]
                for name in ("notify", "tcp", "http", "exec", "delay")}

    # never reported ready before the app did what its readiness kind waits for
    for name in ("notify", "tcp", "http", "exec"):
        became = float((tmp_path / f"{name}.ts").read_text())
        assert seen_by[f"rd/{name}/0"] >= became, (name, seen_by, became)
    assert seen_by["rd/tcp/0"] - launched["tcp"] >= 1.0
    assert seen_by["rd/notify/0"] - launched["notify"] >= 0.5
    assert seen_by["rd/delay/0"] - launched["delay"] >= 0.75
    # ... and not long after either
    for name in ("notify", "tcp", "http", "exec"):
        became = float((tmp_path / f"{name}.ts").read_text())
        assert seen_from[f"rd/{name}/0"] - became < 1.5, name

    # readiness timeout: stopped, backed off, relaunched, until the start limit
    path = cluster.write_config(text + NEVER_READY, "never.toml")
    plan = cluster.call("plan", {"config_text": text + NEVER_READY, "source": str(path)})
    assert [(c["action"], c["app"]) for c in plan["changes"]] == [("start", "zz/never-ready")]
    op = cluster.call("apply", {"plan": plan["id"]})
    cluster.wait(lambda: cluster.call("op.show", {"id": op["id"]})["outcome"] is not None,
                 30, "the never-ready apply ended")
    done = cluster.call("op.show", {"id": op["id"]})
    # an apply whose app can never become ready must not report success
    assert done["outcome"] == "failed" and "zz/never-ready" in done["error"], done
    assert cluster.apps()["zz/never-ready/0"]["state"] == "failed"
    row = cluster.apps()["zz/never-ready/0"]
    assert row["last_outcome"] == "start-limit-hit" and row["restarts"] == 2, row
    tries = launches(cluster, "zz", "never-ready")
    assert len(tries) == 3
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(tries)]
    assert all(g >= 0.5 for g in gaps), gaps  # each try was given its full 0.5 s timeout
    exits = [e for e in observations(cluster) if e["kind"] == "exit"
             and e["launch_key"].startswith("zz/never-ready/0/")]
    assert len(exits) == 3 and all(e.get("signal") == 15 for e in exits), exits
    assert not any(r["ready"] for k, r in cluster.apps().items() if k.startswith("zz/"))


NOT_UTF8 = ("import os, socket, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
            "a = os.environ['NOTIFY_SOCKET']; a = chr(0) + a[1:] if a[0] == '@' else a; "
            "s.sendto(b'STATUS=\\\\xff\\\\xfe latin-1\\\\nREADY=1', a); time.sleep(1000)")


def test_a_status_that_is_not_utf8_does_not_cost_the_ready_beside_it(cluster):
    """The whole datagram was dropped as malformed: never ready, then the start limit."""
    cluster.up(f"""
[stacks.rd.apps.latin]
command = ["python3", "-c", "{NOT_UTF8}"]
ready = {{ kind = "notify", timeout = 10 }}
""")
    row = cluster.wait_ready(1)["rd/latin/0"]
    assert row["ready"] and row["restarts"] == 0, row


def test_a_ready_that_overtakes_the_launch_answer_is_not_lost(cluster):
    """READY=1 at once comes on the owner's observation stream, which can overtake the
    launch's answer: it was ignored, and most of 20 instances were stopped at their
    ready timeout and launched again."""
    cluster.up("""
[stacks.rd.apps.quick]
command = ["sh", "-c", "systemd-notify --ready; exec sleep 100000"]
ready = { kind = "notify", timeout = 4 }
instances = 20
""")
    rows = cluster.wait_ready(20, 30)
    assert {k: r["restarts"] for k, r in rows.items() if r["restarts"]} == {}


def test_exec_checks_run_in_the_apps_cwd(cluster, tmp_path):
    """Was: in the backend's working directory: `./check.sh` of an app with a `cwd`
    could not be started, and the app never became ready."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "check.sh").write_text("#!/bin/sh\nexit 0\n")
    (app / "check.sh").chmod(0o755)
    cluster.up(f"""
[stacks.rd.apps.here]
command = ["sleep", "100000"]
cwd = "{app}"
ready = {{ kind = "exec", command = ["./check.sh"], timeout = 10 }}
health = {{ kind = "exec", command = ["./check.sh"], interval = 0.2, failures = 1 }}
""")
    row = cluster.wait_ready(1)["rd/here/0"]
    assert row["restarts"] == 0, row


def test_a_health_check_that_starts_a_daemon_leaves_none_running(cluster):
    """`setsid sleep N &` in an exec health check left its probe's group and outlived
    it: one more each interval, for good, through `tenure down` too."""
    tag = "100041"
    cluster.up(f"""
[stacks.rd.apps.checked]
command = ["sleep", "infinity"]
health = {{ kind = "exec", command = ["sh", "-c", "setsid sleep {tag} & exit 0"], \
interval = 0.3 }}
""")
    cluster.wait_ready(1)
    time.sleep(2.0)   # about six checks
    try:
        assert len(sleeping(tag)) <= 1, sleeping(tag)   # one just started, at most
    finally:
        assert cluster.down().ok
        left = sleeping(tag)
        for pid in left:
            os.kill(pid, 9)
    assert left == [], left
