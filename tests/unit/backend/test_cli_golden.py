"""Golden human output of every command, from recorded answers (no daemons, UTC, a
fixed clock, no colour). Rewrite the files after an intended change with
``TENURE_UPDATE_GOLDEN=1 pytest tests/unit/backend/test_cli_golden.py`` and review the
diff like code."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.cli import (
    guardiancmd,
    jobs,
    ownerwindow_cli,
    present,
    releases,
    render,
    render_changes,
    render_inspect,
    render_metrics,
    top,
)
from owner import reconcile_cli

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "cli"

# `tenure owner reconcile --prepare` of a home whose owner.db was set aside beside one
# that records: a recorded launch whose leader exited, and two unrecorded ones
RECONCILE_PLAN: dict[str, Any] = {
    "previous": {"instance": "7ef988dbd32e49709c59ff970e0890f9", "pid": 19510,
                 "state": "running"},
    "launches": [
        {"launch_key": "demo/batch/0/1", "app": "demo/batch/0", "state": "exited",
         "cgroup": None, "processes": [{"pid": 19587, "why": "tracked descendant"}]},
        {"launch_key": "demo/web/0/1", "app": "demo/web/0", "state": "unrecorded",
         "cgroup": "/sys/fs/cgroup/tenure/app-demo-web-0-1",
         "processes": [{"pid": 19589, "why": "leader"},
                       {"pid": 19600, "why": "this home in its environment"}]},
        {"launch_key": "?", "app": "?", "state": "unrecorded", "cgroup": None,
         "processes": [{"pid": 19700, "why": "this home in its environment"}]},
        {"launch_key": "demo/web/1/1", "app": "demo/web/1", "state": "running",
         "cgroup": None, "processes": []}],
    "sockets": ["/srv/tenure/execution/owner.sock"],
    "digest": "d65b9b434a1dc59f942648fb76ad0342e5d9d2f9dff38c871699db560445ab1c"}
NOW = 1_796_133_900.0          # 2026-12-01 14:05:00 UTC


@pytest.fixture(autouse=True)
def fixed_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(time, "time", lambda: NOW)
    present.use_colour(io.StringIO())
    yield
    monkeypatch.undo()
    time.tzset()


def _app(key: str, **kw: Any) -> dict[str, Any]:
    stack, app, index = key.split("/")
    row = {"key": key, "stack": stack, "app": app, "instance": int(index), "state": "ready",
           "detail": "ready", "pid": 4100 + int(index), "uptime": 3725.0, "restarts": 0,
           "ready": True, "generation": 1, "last_outcome": None, "log_dropped": 0,
           "cpu_percent": 0.4, "rss": 22_437_888}
    return {**row, **kw}


BACKEND = {"activation": "20261201T140000-1fe64c37", "epoch": 3, "pid": 4001,
           "draining": False, "config": "/srv/tenure/shop.toml", "release": "ef53" * 16}
LINK = {"state": "connected", "since": NOW - 300, "reason": None, "age": 0.4,
        "current": True}
STATUS = {"backend": BACKEND, "owner_link": LINK, "intents": {"batch": {"intent": "stopped"}},
          "apps": [_app("shop/web/0", status_text="serving: 2 workers, 118 requests/s, "
                        "p99 41 ms, cache 93% warm, 3 upstreams"),
                   _app("shop/web/1", uptime=4.2, restarts=2, status_text="warming cache"),
                   _app("shop/worker/0", state="failed", detail="failed",
                        reason="spawn failed: /srv/w: No such file or directory", pid=None,
                        uptime=None, ready=False, cpu_percent=None, rss=None,
                        log_dropped=12),
                   _app("shop/worker/1", state="backoff", detail="backoff",
                        reason="killed by SIGSEGV (core dumped)", pid=None, uptime=None,
                        restarts=3, ready=False, cpu_percent=None, rss=None,
                        next_start_in=4.2)],
          "jobs": {"running": 1, "admitted": 2, "recovery_required": 1}}
STALE = {**STATUS, "owner_link": {**LINK, "state": "lost", "reason": "connection reset",
                                  "age": 12.3, "current": False},
         "apps": [_app("shop/web/0", state="unknown", last_state="ready", last_seen_age=12.3,
                       ready=None, cpu_percent=None, rss=None)], "jobs": {}}
INSPECT = {"instances": [{**_app("shop/web/0"), "launch_key": "shop/web/0/1",
                          "status_text": "serving: 2 workers, 118 requests/s, p99 41 ms, "
                                         "cache 93% warm, 3 upstreams",
                          "command": ["gunicorn", "app:wsgi", "--workers", "2"],
                          "restart": "always", "ready_kind": "tcp", "log_retention": 512 << 20,
                          "cwd": "/srv/shop", "readiness": "tcp 127.0.0.1:8080",
                          "health": {"check": "GET http://127.0.0.1:8080/health",
                                     "interval": 10.0, "timeout": 5.0, "failures": 3,
                                     "grace": 0.0},
                          "stop": {"signal": "TERM", "timeout": 10.0, "kill_after": 5.0},
                          "identity": {"user": "shop", "group": "shop",
                                       "supplementary_groups": ["www-data"], "umask": 0o27,
                                       "resolved": {"uid": 998, "gid": 998, "groups": [998],
                                                    "home": "/srv/shop"}},
                          "limits": {"nofile": 4096},
                          "sockets": [
                              {"name": "http", "listen": "127.0.0.1:8080", "inode": 41221,
                               "backlog": 4096, "queued": 0, "queue_limit": 4096,
                               "used_by": ["shop/web/0/1"]},
                              {"name": "admin", "listen": "unix:/run/shop/admin.sock",
                               "inode": 41223, "backlog": 16, "queued": None,
                               "queue_limit": None, "used_by": ["shop/web/0/1"]}],
                          "stored_fds": [{"name": "cache", "kind": "memfd", "inode": 5120}],
                          "fd_store_max": 4}]}
GUARDIAN = {"owner": {"instance": "f0b83755-d0e7-4f9c-9b42-89be47ca62bd"}, "epoch": 3,
            "owner_link": LINK, "selector": {"current": "ef53" * 16, "previous": "a1b2" * 16},
            "backend": {"pid": 4001, "activation": BACKEND["activation"], "alive": True},
            "last_activation": {"id": BACKEND["activation"], "kind": "upgrade",
                                "phase": "complete", "outcome": "success"},
            "certificate": {"valid": True, "age": 3.2, "launches": 3},
            "guardian": {"pid": 3995, "instance": "5e0c1f7a-9a41-4c55-b0d2-3f1f5cf1e2aa",
                         "start_ticks": 512},
            "guardian_release": {"running": "9d1b" * 16, "release": "9d1b" * 16,
                                 "state": "selected", "previous": None, "error": None,
                                 "reverted": {"release": "c0de" * 16, "at": NOW - 60,
                                              "reason": "it did not become ready"}},
            "owner_release": {"running": "9d1b" * 16, "error": None},
            "cli": {"version": "0.1.0", "backend_version": "0.2.0", "older": True}}
GUARDIAN_PLAN = {"release": "c0de" * 16, "from": "9d1b" * 16, "changed": True,
                 "restarting": False, "guardian": GUARDIAN["guardian"],
                 "backend": GUARDIAN["backend"],
                 "preflight": {"elapsed": 0.171, "python": "3.11.2", "import_s": 0.09}}
WINDOW = {"owner": {"instance": "f0b83755-d0e7-4f9c-9b42-89be47ca62bd", "pid": 3990,
                     "start_ticks": 400},
          "from": None, "release": "c0de" * 16, "mode": "systemd", "instances": 3,
          "stop": [["shop/web/0", "shop/web/1"], ["shop/db/0"]],
          "start": [["shop/db/0"], ["shop/web/0", "shop/web/1"]],
          "stopped_stacks": ["batch"], "digest": "5eed" * 16}
OWNER = {"owner": {"instance": "f0b83755-d0e7-4f9c-9b42-89be47ca62bd", "pid": 3990},
         "home": "/var/lib/tenure", "epoch": 3,
         "grant": {"epoch": 3, "activation": BACKEND["activation"]}, "draining": False,
         "live": 3, "uncertain": [], "exit_mode": "pidfd", "isolation": "cgroup",
         "cgroup_controllers": ["cpu", "memory", "pids"], "uid": 0, "switch_users": True,
         "cursor": 57, "acked": 57, "log_last_id": 10423, "log_overflow_total": 12,
         "log_dropped": {"shop/worker": 12},
         "notify": {"received": 4, "delivered": 3, "ignored": 1, "malformed": 0},
         "capabilities": {"stackControl": 2, "logJournal": 1, "fencing": 1},
         "release": {"running": "9d1b" * 16, "error": None}}
JOB = {"id": 42, "stack": "shop", "template": "migrate", "state": "succeeded",
       "outcome": None, "exit_code": 0, "signal": None, "key": "release-2026-12-01",
       "argv": ["python3", "manage.py", "migrate", "--noinput"],
       "identity": {"user": "shop", "umask": None}, "attempt": 1,
       "launch_key": "job:shop:42:1", "pid": 5120, "submitted_at": NOW - 65,
       "started_at": NOW - 64, "ended_at": NOW - 4, "duration": 60.0, "duration_s": 60.0,
       "history": [{"at": NOW - 65, "event": "admit", "from": None, "to": "admitted"},
                   {"at": NOW - 64, "event": "start", "from": "admitted", "to": "running"},
                   {"at": NOW - 4, "event": "exit", "from": "running", "to": "succeeded"}]}

# a start the owner did not answer, settled later from the owner's evidence (not resolved
# by the operator): the resolve answer and the record say so, with the real pid and exit
PROVEN = {**JOB, "id": 43, "key": None, "state": "failed", "outcome": "exit-code",
          "exit_code": 3, "pid": 5188, "launch_key": "job:shop:43:1",
          "started_at": NOW - 50, "ended_at": NOW - 40, "duration": 10.0,
          "evidence": {"reason": "the owner did not answer 5 launch requests",
                       "launch_key": "job:shop:43:1"},
          "resolution": {"started": True, "note": "", "by": "the backend (epoch 3)",
                         "at": NOW - 30, "launch_key": "job:shop:43:1", "attempt": 1,
                         "proof": {"shows": "its exit was observed", "live": None}},
          "history": [{"at": NOW - 65, "event": "admitted", "from": None, "to": "admitted"},
                      {"at": NOW - 64, "event": "Start", "from": "admitted",
                       "to": "starting"},
                      {"at": NOW - 60, "event": "Uncertain", "from": "starting",
                       "to": "recovery_required"},
                      {"at": NOW - 30, "event": "Proven", "from": "recovery_required",
                       "to": "running"},
                      {"at": NOW - 30, "event": "Exited", "from": "running",
                       "to": "failed"}]}

SILENT_BACKEND = {"pid": 4001, "activation": BACKEND["activation"], "alive": True,
                  "answering": False, "unanswered_since": NOW - 12,
                  "unanswered_why": "handshake with /srv/tenure/backend/api.sock failed: "
                                    "no answer within 2 s"}

CASES: dict[str, Callable[[], str]] = {
    "status": lambda: render.status(STATUS),
    # 24 instances: a line counts them by state
    "status_counted": lambda: render.status({**STATUS, "apps": [
        _app(f"shop/web/{i}") for i in range(20)] + [
        _app(f"shop/worker/{i}", state="backoff", detail="backoff", reason="exited 3",
             pid=None, uptime=None, ready=False, cpu_percent=None, rss=None,
             next_start_in=2.0) for i in range(3)] + [
        _app("shop/cron/0", state="failed", detail="failed", reason="exited 1; start "
             "limit hit (5 starts within 60s)", pid=None, uptime=None, ready=False,
             cpu_percent=None, rss=None)]}),
    "status_stale": lambda: render.status(STALE),
    "status_guardian_hung": lambda: render.status({
        **STATUS, "guardian_running": False, "guardian_hung": {
            "pid": 3995, "msg": "the guardian (pid 3995) holds /h/runtime/guardian.lock but "
            "does not answer (nothing listens on /h/runtime/guardian.sock): pid 3995 runs "
            "(state S, sleeping)"}}),
    "status_owner_stopped": lambda: render.status({**STALE, "owner_link": {
        **STALE["owner_link"], "state": "reconnecting", "reason": "the connection broke",
        "process": "pid 4000 is stopped (SIGSTOP or a debugger); kill -CONT 4000 "
                   "continues it"}}),
    "status_empty": lambda: render.status({**STATUS, "apps": [], "intents": {}, "jobs": {}}),
    # right after a start: an uptime an older backend answered as -0.0 prints as 0.0s
    "status_just_started": lambda: render.status({**STATUS, "intents": {}, "jobs": {},
        "apps": [_app("shop/web/0", uptime=-0.0), _app("shop/web/1", uptime=0.0)]}),
    "status_no_backend": lambda: render.no_backend(
        {"updated_at": NOW - 8, "last_activation": {"id": BACKEND["activation"],
                                                    "kind": "upgrade", "phase": "retired",
                                                    "error": "BACKEND_START_TIMEOUT"}},
        {"at": "2026-12-01T14:04:00", "ok": True}),
    "status_no_backend_start_failed": lambda: render.no_backend(
        {"updated_at": NOW - 8, "last_activation": {"id": BACKEND["activation"],
                                                    "kind": "start", "phase": "complete"}},
        {"at": "2026-12-01T14:04:52", "ok": False,
         "error": "2026-12-01 14:04:52,848 guardian ERROR STATE_CORRUPT: "
                  "/srv/tenure/runtime/guardian-release.json is not valid JSON"}),
    # right after `tenure up --no-wait`: not "tenure is not running", and not the last
    # start's failure, which was of an earlier run
    "status_no_backend_starting": lambda: render.no_backend(
        None, {"at": "2026-12-01T14:04:52", "ok": False, "error": "an earlier failure"},
        {"owner": {"state": "clean", "at": NOW - 60}}, None, False, (None, None), 4310),
    "status_queued_rejected": lambda: render.status({**STATUS, "queued_config": "rejected"}),
    "status_config_from_pipe": lambda: render.status(
        {**STATUS, "backend": {**BACKEND, "config": "/dev/fd/63"}}),
    "status_log_retention_unsupported": lambda: render.status(
        {**STATUS, "log_retention_unsupported": True}),
    "status_degraded": lambda: render.status({
        **STATUS, "guardian_running": False,
        "log_write_error": {"error": "OperationalError: database or disk is full",
                            "since": NOW - 40, "batches": 12, "lines": 12},
        "certificate_write_error": {"error": "database or disk is full", "since": NOW - 30}}),
    # the owner is lost: its last word on its journal is not shown as if current
    "status_owner_lost_journal_failing": lambda: render.status({
        **STALE, "log_write_error": {"error": "OperationalError: database or disk is full",
                                     "since": NOW - 40, "batches": 12, "lines": 12}}),
    "status_no_backend_silent": lambda: render.no_backend(
        {"updated_at": NOW - 1, "backend": SILENT_BACKEND,
         "last_activation": {"id": BACKEND["activation"], "kind": "start",
                             "phase": "complete"}}, None),
    "status_not_running": lambda: render.no_backend(
        {"updated_at": NOW - 600}, None,
        {"owner": {"state": "clean", "at": NOW - 600, "applications": "3 stopped"}}),
    "status_not_running_owner_killed": lambda: render.no_backend(
        {"updated_at": NOW - 600}, None, {"owner": {"state": "running", "at": NOW - 900}}),
    "status_not_running_shutdown_failed": lambda: render.no_backend(
        {"updated_at": NOW - 600}, None,
        {"owner": {"state": "failed", "at": NOW - 600, "failed_stage": "state"}}),
    "status_owner_shutting_down": lambda: render.no_backend(
        {"updated_at": NOW - 2}, None, None, None, False, (4242, None)),
    "status_down_under_way": lambda: render.no_backend(
        {"updated_at": NOW - 2}, None, None, None, False, (None, 4343)),
    "down_backend_outlived_guardian": lambda: render_changes.down(
        {"guardian": True, "backend": True, "owner": True, "applications_stopped": 3,
         "owner_receipt": {"state": "clean", "failed_stage": None, "detail": ""}}),
    "restart_withdrawn": lambda: render_changes.instances(
        {"settled": False, "instances": {"s/a/0": "stopping"}, "not_restarted": ["s/a/1"],
         "stopped_at": "s/a/0", "withdrawn": True}),
    "inspect": lambda: render_inspect.inspect(INSPECT),
    "inspect_owner_unknown": lambda: render_inspect.inspect({"instances": [
        {**INSPECT["instances"][0], "sockets": None, "stored_fds": None}]}),
    # a unix socket's mode and owner as the owner gave them (a TCP socket has none)
    "inspect_socket_modes": lambda: render_inspect.inspect({"instances": [
        {**INSPECT["instances"][0], "sockets": [
            {**INSPECT["instances"][0]["sockets"][0], "mode": None, "user": None,
             "group": None},
            {**INSPECT["instances"][0]["sockets"][1], "mode": 0o660, "user": None,
             "group": "www-data"}]}]}),
    "restart": lambda: render_changes.instances({"settled": True, "instances": {
        "shop/web/0": "ready", "shop/web/1": "ready"}}),
    "stop_unsettled": lambda: render_changes.instances({"settled": False, "instances": {
        "shop/web/0": "stopping", "shop/web/1": "stopped"}, "reasons": {
        "shop/web/0": "SIGTERM sent 8s ago; SIGKILL in 22s"}}),
    "start_failed": lambda: render_changes.instances({"settled": True, "instances": {
        "shop/web/0": "ready", "shop/worker/0": "failed"}}),
    "up": lambda: render_changes.up({"started": {"owner": True, "guardian": True},
                             "release_sealed": "ef53" * 16,
                             "apply": {"plan": {"changes": [{}, {}, {}]},
                                       "operation": {"outcome": "success"}}}),
    # was "applied 1 change: failed", with neither the operation nor what failed
    "up_apply_failed": lambda: render_changes.up({
        "started": {"owner": True, "guardian": True}, "release_sealed": None,
        "apply": {"plan": {"changes": [{}]},
                  "operation": {"id": "op-9c1d07aa31f2", "kind": "apply", "stage": "failed",
                                "step": 0, "outcome": "failed",
                                "error": "step 0: failed to start: shop/bad/0 (spawn failed: "
                                         "/nonexistent: No such file or directory)"}}}),
    "up_no_wait_admitted": lambda: render_changes.up({
        "started": {"owner": False, "guardian": False}, "release_sealed": None,
        "apply": {"plan": {"changes": [{}, {}]},
                  "operation": {"id": "op-3217f3ed0b8b", "outcome": None}}}),
    "up_no_wait_queued": lambda: render_changes.up_queued({
        "starting": ["owner", "guardian"],
        "queued": {"kind": "queued-config", "format": 1, "source": "/srv/tenure/shop.toml",
                   "request_id": "up-5f0c2a9e81d4b7c3", "queued_at": NOW}}),
    "down": lambda: render_changes.down({"guardian": True, "owner": True, "applications_stopped": 3,
                                 "owner_receipt": {"state": "clean", "failed_stage": None,
                                                   "detail": ""}}),
    "down_owner_stopped": lambda: render_changes.down({
        "guardian": True, "owner": False,
        "owner_problem": "it does not answer; pid 4000 is stopped (SIGSTOP or a debugger); "
                         "SIGTERM waits until it is continued (kill -CONT 4000)"}),
    "down_guardian_stopped": lambda: render_changes.down({
        "guardian": False,
        "guardian_problem": "it does not answer; pid 4001 is stopped (SIGSTOP or a "
                            "debugger); SIGTERM waits until it is continued (kill -CONT 4001)",
        "owner": False,
        "owner_problem": "not stopped: the guardian (pid 4001) still runs with its "
                         "backend; once it is gone, run `tenure down` again"}),
    "down_unclean": lambda: render_changes.down({"guardian": True, "owner": False,
                                         "applications_stopped": 3,
                                         "owner_receipt": {"state": "failed",
                                                           "failed_stage": "processes",
                                                           "detail": "processes remain"}}),
    "plan_stay_stopped": lambda: render_changes.plan({"id": "plan-5c1e", "fingerprint": "9e" * 32,
                                              "changes": [
        {"action": "restart", "app": "shop/web", "instances": 3,
         "reason": "definition changed: command", "stay_stopped": [1]},
        {"action": "restart", "app": "shop/api", "instances": 3,
         "reason": "definition changed: command", "stay_stopped": [0, 2]}],
        "jobs": [], "settings": []}),
    "plan_no_changes": lambda: render_changes.plan({"id": "plan-77aa", "fingerprint": "3e" * 32,
                                            "changes": [], "jobs": [], "settings": []}),
    "plan": lambda: render_changes.plan({"id": "plan-5c1d", "fingerprint": "9f" * 32, "changes": [
        {"action": "start", "app": "shop/cron", "instances": 1},
        {"action": "restart", "app": "shop/web", "instances": 2,
         "reason": "definition changed: command, env", "changed": ["command", "env"]},
        {"action": "scale", "app": "shop/worker", "from": 1, "to": 3},
        {"action": "update", "app": "shop/worker", "reason": "policy changed: restart",
         "changed": ["restart"]},
        {"action": "stop", "app": "shop/legacy", "instances": 2},
        {"action": "restart", "app": "shop/api", "instances": 3, "only": [2],
         "reason": "running an older definition"}],
        "jobs": [{"action": "add", "job": "shop/migrate"}],
        "settings": [{"setting": "metrics.listen", "from": "127.0.0.1:9464",
                      "to": "127.0.0.1:9465"}],
        "stopped_stacks": ["shop"]}),
    "plan_socket_update": lambda: render_changes.plan({"id": "plan-61e0", "fingerprint": "4c" * 32,
                                               "changes": [
        {"action": "update", "app": "shop/web", "reason": "policy and socket settings changed",
         "sockets": ["admin", "http"]},
        {"action": "restart", "app": "shop/api", "instances": 1,
         "reason": "socket settings changed"}], "jobs": [], "settings": []}),
    "operation": lambda: render_changes.operation({"id": "op-a89be6c7d13e", "kind": "apply",
                                           "stage": "complete", "step": 4,
                                           "outcome": "success", "error": None}),
    "op_list": lambda: render_changes.operations([
        {"id": "op-a89be6c7d13e", "kind": "apply", "stacks": ["shop"], "stage": "complete",
         "step": 4, "outcome": "success"},
        {"id": "op-0c3e5aa1b2d4", "kind": "apply", "stacks": ["shop", "batch"],
         "stage": "start", "step": 1, "outcome": None}]),
    "stack_dry_run": lambda: render_changes.stack({"stack": "batch", "digest": "d1" * 32,
                                           "will_stop": [{"launch_key": "batch/etl/0/4",
                                                          "pid": 5003}]}),
    "stack_superseded": lambda: render_changes.stack({
        "stack": "batch", "intent": "stopped", "settled": False,
        "instances": {"batch/etl/0": "stopping", "batch/load/0": "starting"},
        "superseded": {"by": "stack start", "intent": "running", "revision": 4}}),
    "backend_status": lambda: render.backend("status", GUARDIAN),
    # was `epoch 0` after a new state.db, while the owner held epoch 20
    "backend_status_new_state_db": lambda: render.backend(
        "status", {**GUARDIAN, "epoch": 0, "owner_epoch": 20}),
    "backend_status_silent": lambda: render.backend(
        "status", {**GUARDIAN, "backend": SILENT_BACKEND}),
    # stopped or hung after a change: it certifies nothing until it answers
    "backend_status_silent_uncertified": lambda: render.backend("status", {
        **GUARDIAN, "backend": SILENT_BACKEND, "certificate": {
            "valid": False, "age": 14.0, "launches": 3, "invalidated": "stop",
            "changed_at": NOW - 11}}),
    # the backend says its storage refuses the certificate (asked by `backend status`)
    "backend_status_uncertifiable": lambda: render.backend("status", {
        **GUARDIAN, "recovery": render.uncertifiable(
            {"error": "database or disk is full", "since": NOW - 40})}),
    "backend_status_owner_stopped": lambda: render.backend("status", {
        **GUARDIAN, "owner_release": None, "owner_link": {
            **LINK, "age": 38.2, "current": False,
            "process": "pid 4000 is stopped (SIGSTOP or a debugger); kill -CONT 4000 "
                       "continues it"}}),
    "backend_abort": lambda: render.backend("abort", {"abort_requested": True}),
    "release_list": lambda: releases.list_text({"releases": [
        {"release": "a1b2" * 16, "status": "ok", "current": True, "previous": False},
        {"release": "a1b2" * 16 + ".tmp-3c9e01f2", "status": "incomplete",
         "current": False, "previous": False},
        {"release": "c0de" * 16, "status": "corrupt", "current": False, "previous": True,
         "reason": "STATE_CORRUPT: RUNTIME.json does not hash to the directory name"}]}),
    "release_install": lambda: releases.install_text({"release": "33" * 32}),
    "backend_prune": lambda: render.pruned(
        {"operations": 3, "plans": 3, "launches": 843, "log_apps": 2, "log_lines": 48_213},
        {"operations": 1000, "plans": 200, "launches": 10000, "activations": 1000,
         "removed_app_logs_days": 7}, {}),
    "backend_prune_owner_silent": lambda: render.pruned(
        {"operations": 0, "plans": 1},
        {"operations": 1000, "plans": 200, "launches": 10000, "activations": 1000,
         "removed_app_logs_days": 1},
        {"launches": "OWNER_UNAVAILABLE: the owner has not answered for 12 s",
         "log_apps": "OWNER_UNAVAILABLE: the owner has not answered for 12 s"}),
    "release_prune": lambda: releases.removal_text({
        "removed": [{"release": "0f1e" * 16, "status": "ok", "bytes": 16_912_384},
                    {"release": "5a5a" * 16, "status": "corrupt", "bytes": 16_900_001},
                    {"release": "0f1e" * 16 + ".tmp-3c9e01f2", "status": "incomplete",
                     "bytes": 4_202_496}],
        "bytes": 38_014_881, "dry_run": False, "kept": [
            {"release": "a1b2" * 16, "why": ["it is the selected release",
                                             "the guardian runs it",
                                             "one of the 3 newest installed"]},
            {"release": "c0de" * 16, "why": [
                "it is the previous release (a rollback starts it)"]}]}),
    "release_prune_nothing": lambda: releases.removal_text({
        "removed": [], "bytes": 0, "dry_run": False, "kept": [
            {"release": "a1b2" * 16, "why": ["it is the selected release",
                                             "one of the 3 newest installed"]}]}),
    "release_remove_dry_run": lambda: releases.removal_text({
        "removed": [{"release": "0f1e" * 16, "status": "ok", "bytes": 16_912_384}],
        "bytes": 16_912_384, "dry_run": True, "kept": []}),
    "release_install_repaired": lambda: releases.install_text({
        "release": "33" * 32, "repaired": "content of lib/backend/explain.py does not "
                                          "match RUNTIME.json"}),
    "release_verify_signed": lambda: releases.verify_text({
        "release": "a1b2" * 16, "ok": True, "files": 1064, "signed": True}),
    "release_verify_unsigned": lambda: releases.verify_text({
        "release": "a1b2" * 16, "ok": True, "files": 1064, "signed": False}),
    "release_select_started": lambda: releases.select_text({
        "selected": "a1b2" * 16, "checked": {"preflight": {"elapsed": 0.41}},
        "started": {"id": "20261201T140000-1fe64c37", "kind": "recover",
                    "phase": "complete", "outcome": "success"}, "blocked": None}),
    "release_select_blocked": lambda: releases.select_text({
        "selected": "a1b2" * 16, "checked": {"preflight": {"elapsed": 0.41}},
        "started": None, "blocked": {"code": "RECOVERY_BLOCKED", "reason": "the owner's "
                                     "live inventory differs from the certificate"}}),
    "backend_upgrade": lambda: render.backend("upgrade", {
        "activation": {"id": "20261201T140500-77aa01bc", "kind": "upgrade",
                       "phase": "complete", "outcome": "success"},
        "receipts": [{"phase": p} for p in ("checked", "admitted", "draining",
                                             "checkpointed", "fenced", "started",
                                             "verified", "retired", "complete")]}),
    "guardian_status": lambda: guardiancmd.status_text(GUARDIAN),
    "guardian_upgrade_check": lambda: guardiancmd.plan_text(GUARDIAN_PLAN),
    "guardian_upgrade": lambda: guardiancmd.done_text({
        **GUARDIAN_PLAN, "restarting": True, "backend_after": GUARDIAN["backend"],
        "guardian": {**GUARDIAN["guardian"], "instance": "77c2d0b1-1e9d-4b0f-8d8e-51d0e2a7c3f4"}}),
    "owner_status": lambda: render.owner(OWNER),
    "owner_upgrade_plan": lambda: ownerwindow_cli.plan_text(WINDOW, "./release"),
    "owner_upgrade_done": lambda: ownerwindow_cli.done_text({
        "plan": WINDOW, "step": "done", "progress": {
            "owner": {"instance": "77c2d0b1-1e9d-4b0f-8d8e-51d0e2a7c3f4", "pid": 4410},
            "owner_release": {"running": "c0de" * 16, "error": None}}}),
    "job_show": lambda: jobs.render_show(JOB),
    # a list cut at its answer's size says where it stops
    "job_list_cut": lambda: jobs.render_list({"jobs": [JOB, PROVEN], "more": True}),
    "job_show_proven": lambda: jobs.render_show(PROVEN),
    "job_show_left_behind": lambda: jobs.render_show({**JOB, "history": [
        *JOB["history"][:2], {**JOB["history"][2], "detail": {"descendants": 2}}]}),
    "job_resolve_proven": lambda: jobs.render_resolved(
        {**PROVEN, "resolution": {**PROVEN["resolution"], "by": "uid 0",
                                  "note": "the migration ran"}}),
    "metrics": lambda: render_metrics.metrics(METRICS),
    "metrics_owner_lost": lambda: render_metrics.metrics({
        **METRICS, "owner_connected": False,
        "apps": [_measured("shop/web/0", cpu_seconds=None, memory_bytes=None,
                           memory_peak_bytes=None, pids=None, start_time_seconds=None)]}),
    "owner_reconcile_plan": lambda: reconcile_cli._plan_text(RECONCILE_PLAN),
    "owner_reconcile_drain": lambda: reconcile_cli._drain_text({
        "stopped": 4, "gone_already": 1, "killed": [48219], "joined": [48230],
        "cgroup_kill_failed": [{"launch_key": "demo/web/0/1", "errno": "EACCES",
                                "cgroup": "/sys/fs/cgroup/tenure/app-demo-web-0-1",
                                "strerror": "Permission denied"}]}, ["demo/web/0/1"]),
    "top": lambda: top.render(top.pick(STATUS, "mem", 3)),
}


def _measured(key: str, **kw: Any) -> dict[str, Any]:
    stack, app, index = key.split("/")
    row = {"key": key, "stack": stack, "app": app, "instance": int(index), "state": "ready",
           "up": True, "ready": True, "restarts": 0, "pid": 4100 + int(index),
           "start_time_seconds": NOW - 3725.0, "cpu_seconds": 93.4,
           "memory_bytes": 22_437_888, "memory_peak_bytes": 31_457_280, "oom_kills": None,
           "pids": 3, "io_read_bytes": 4096, "io_write_bytes": 0}
    return {**row, **kw}


METRICS = {"epoch": 3, "owner_connected": True, "certificate_age_seconds": 2.5,
           "log_dropped": [{"stack": "shop", "app": "worker", "dropped": 12}],
           "listener": {"listen": "127.0.0.1:9464", "bound": True, "error": None},
           "apps": [_measured("shop/web/0"), _measured("shop/web/1", restarts=2, oom_kills=1),
                    _measured("shop/worker/0", state="backoff", up=False, ready=False,
                              restarts=3, pid=None, start_time_seconds=None,
                              cpu_seconds=None, memory_bytes=None,
                              memory_peak_bytes=None, pids=None)]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_human_output_matches_its_golden_file(name: str) -> None:
    got = CASES[name]() + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("TENURE_UPDATE_GOLDEN"):
        path.write_text(got)
    assert path.exists(), f"no golden file {path.name}: run with TENURE_UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{name}: human output changed (see the docstring)"
    assert "None" not in got and "True" not in got and "False" not in got, got
    assert "{'" not in got and "['" not in got, got      # no Python reprs


def test_every_golden_file_has_a_case() -> None:
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(CASES)


def test_colour_only_on_a_terminal_and_never_with_no_color() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    assert present.use_colour(Tty(), {}) is True
    assert "\x1b[32m" in render_changes.instances({"instances": {"a/b/0": "ready"}})
    assert present.use_colour(Tty(), {"NO_COLOR": "1"}) is False
    assert present.use_colour(io.StringIO(), {}) is False
    assert "\x1b" not in render_changes.instances({"instances": {"a/b/0": "ready"}})
