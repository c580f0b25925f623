"""Human-readable CLI output from recorded answers (no daemons)."""

from __future__ import annotations

from typing import Any

from backend.cli import render, render_changes, render_inspect


def _status(*apps: dict[str, Any]) -> dict[str, Any]:
    return {"backend": {"activation": "a1", "epoch": 2, "pid": 10, "draining": False,
                        "config": "/c.toml"}, "intents": {},
            "apps": [{"key": f"{a['stack']}/{a['app']}/0", "state": "ready", "pid": 1,
                      "uptime": 5.0, "restarts": 0, "ready": True, "cpu_percent": 0.0,
                      "rss": 1 << 20, **a} for a in apps]}


def test_status_lists_apps_that_lost_log_lines_below_the_table():
    out = render.status(_status({"stack": "s", "app": "noisy", "log_dropped": 1834},
                                {"stack": "s", "app": "quiet", "log_dropped": 0},
                                {"stack": "t", "app": "old", "log_dropped": None}))
    assert out.splitlines()[-1] == ("log lines dropped (the journal's queue was full, or it "
                                    "could not write): s/noisy 1834")
    assert "cannot write" not in out


def test_status_says_while_the_journal_cannot_write():
    import time
    since = time.mktime((2026, 12, 3, 6, 41, 2, 0, 0, -1))
    st = {**_status({"stack": "s", "app": "noisy", "log_dropped": 40}),
          "log_write_error": {"error": "OperationalError: database or disk is full",
                              "since": since, "batches": 4, "lines": 40}}
    lines = render.status(st).splitlines()
    assert lines[-2] == ("the owner's journal cannot write since 06:41:02 "
                         "(OperationalError: database or disk is full): log lines are "
                         "dropped"), lines
    assert lines[-1].endswith("s/noisy 40")


def test_status_says_a_queued_config_waits_or_was_rejected():
    plain = render.status(_status({"stack": "s", "app": "a"}))
    assert "queued" not in plain
    for state, words in (("waiting", "not applied yet"), ("rejected", "was rejected")):
        out = render.status({**_status({"stack": "s", "app": "a"}), "queued_config": state})
        assert out.splitlines()[-1].startswith("config queued by `tenure up`")
        assert words in out.splitlines()[-1]


def test_the_header_says_a_config_read_from_a_pipe_has_no_file():
    def head(source: str | None) -> str:
        st = _status({"stack": "s", "app": "a"})
        return render.status({**st, "backend": {**st["backend"], "config": source}}
                             ).splitlines()[0]
    assert head("/c.toml").endswith("; config /c.toml")
    assert head(None).endswith("; config -")
    for pipe in ("/dev/fd/63", "/proc/self/fd/5", "/dev/stdin"):
        assert head(pipe).endswith(f"; config {pipe} (read from a pipe: no file)"), pipe


def test_status_without_drops_has_no_such_line():
    out = render.status(_status({"stack": "s", "app": "quiet", "log_dropped": 0}))
    assert "dropped" not in out


def test_detail_says_why_and_inspect_prints_the_records_text():
    why = "spawn failed: /x/y: No such file or directory"
    out = render.status(_status(
        {"stack": "s", "app": "broken", "state": "failed", "detail": "failed", "reason": why},
        {"stack": "s", "app": "waiting", "state": "stopping", "detail": "restarting",
         "reason": None}))
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert rows["s/broken/0"].endswith(why)
    assert rows["s/waiting/0"].endswith("restarting")   # no reason: the internal state
    inst = {"key": "s/broken/0", "state": "failed", "detail": "failed", "reason": why,
            "pid": None, "generation": 2,
            "last_error": {"text": why, "code": "LAUNCH_FAILED", "errno": "ENOENT",
                           "source": "owner", "generation": 2},
            "last_exit": None,
            "last_probe": {"text": "readiness: tcp 127.0.0.1:1: connection refused",
                           "generation": 1}}
    shown = render_inspect.inspect({"instances": [inst]})
    lines = [line.strip() for line in shown.splitlines()]
    assert f"detail:            {why}" in lines, shown
    assert f"last error:        {why} (generation 2)" in lines, shown
    assert "last exit:         -" in lines, shown
    assert "last failed probe: readiness: tcp 127.0.0.1:1: connection refused " \
        "(generation 1)" in lines, shown
    assert "{" not in shown and "None" not in shown, shown


def test_what_an_app_or_its_config_wrote_never_drives_the_terminal(monkeypatch):
    """`inspect` printed a command line with ESC[2J and an OSC title raw: it cleared the
    screen and renamed the window. Status cells are written out too; tenure's own
    colours stay."""
    from backend.cli import present
    monkeypatch.setattr(present, "_colour", True)
    evil = "\x1b[2J\x1b]0;pwned\x07"
    inst = {"key": "s/a/0", "state": "ready", "detail": "ready", "reason": None,
            "generation": 1, "command": ["sh", "-c", evil], "env": {"X": evil}}
    shown = render_inspect.inspect({"instances": [inst]})
    assert "\x1b[2J" not in shown and "\x07" not in shown, repr(shown)
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in shown, shown
    assert "\x1b[32mready\x1b[0m" in shown, repr(shown)     # the state's colour
    out = render.status(_status({"stack": "s", "app": "a", "state": "failed",
                                 "detail": "failed", "reason": f"exec probe: {evil}"}))
    assert "\x1b[2J" not in out and "\\x1b[2J" in out, repr(out)


def test_a_living_backend_that_does_not_answer_is_said_so():
    import time
    now = time.time()
    quiet = {"pid": 42, "alive": True, "answering": False, "unanswered_since": now - 12,
             "unanswered_why": "handshake with /h/backend/api.sock failed: no answer "
                               "within 2 s"}
    assert render.not_answering(quiet) == (
        "NOT ANSWERING for 12s (handshake with /h/backend/api.sock failed: no answer "
        "within 2 s)")
    for fine in ({**quiet, "answering": True}, {**quiet, "answering": None},
                 {**quiet, "alive": False}, None):
        assert render.not_answering(fine) is None
    why = render.why({"backend": quiet, "updated_at": now})
    assert why.startswith("; backend pid 42 is alive but NOT ANSWERING for 12s (")
    assert "it may be hung (docs/recover.md)" in why
    assert "NOT ANSWERING" not in render.why({"backend": {**quiet, "answering": True},
                                              "updated_at": now})


def test_down_says_which_daemon_still_runs_and_why():
    out = render_changes.down({"guardian": True, "owner": False,
                       "owner_problem": "it does not answer; pid 7 is stopped"})
    assert out.splitlines() == [
        "guardian: stopped",
        "owner: STILL RUNNING: it does not answer; pid 7 is stopped; its applications "
        "still run"]
    assert render_changes.down({"guardian": False}) == \
        "guardian: STILL RUNNING: not stopped in time"


def test_status_warns_only_when_the_guardian_is_known_not_to_run():
    assert "guardian" not in render.status(_status({"stack": "s", "app": "a"}))
    up = {**_status({"stack": "s", "app": "a"}), "guardian_running": True}
    assert "guardian" not in render.status(up)
    down = render.status({**up, "guardian_running": False}).splitlines()
    assert down[1] == ("guardian: NOT RUNNING: a backend crash would not be recovered; "
                       "`tenure up` starts it (applications keep running)")


def test_status_says_an_owner_window_is_unfinished() -> None:
    """Was silent: after a window was interrupted between its two owners, status showed
    the owner lost and every app unknown, and nothing of the window or what ends it."""
    line = render.unfinished_window({"step": "drained"})
    assert line == ("\nowner maintenance window UNFINISHED (stopped after step drained): "
                    "`tenure owner upgrade --continue` finishes it")
    assert render.unfinished_window(None) == ""


def test_status_tells_a_window_under_way_from_one_that_stopped(tmp_path) -> None:
    """While the window's command ran, status said it was UNFINISHED and that
    `--continue` finishes it, which would be refused (OPERATION_IN_PROGRESS)."""
    import fcntl
    import json
    import os

    from backend.cli.everyday import unfinished_window
    from protocol.layout import MAINTENANCE_KIND, Layout
    lay = Layout(tmp_path)
    lay.execution.mkdir(mode=0o700)
    record = lay.execution / "maintenance.json"
    record.write_text(json.dumps({"kind": MAINTENANCE_KIND, "format": 1, "step": "staged"}))
    record.chmod(0o600)
    assert unfinished_window(lay) == {"step": "staged"}
    fd = os.open(lay.execution / "maintenance.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        window = unfinished_window(lay)
        assert window == {"step": "staged", "running": os.getpid()}
        assert render.unfinished_window(window) == (
            f"\nowner maintenance window RUNNING (`tenure owner upgrade`, pid {os.getpid()}, "
            "step staged done): the apps it stopped start again as it ends")
    finally:
        os.close(fd)


def test_up_and_apply_name_the_open_operation_they_joined() -> None:
    """Was: `applied 0 changes: no-change` while another apply of the config still ran."""
    op = {"id": "op-1", "kind": "apply", "outcome": "failed", "stage": "failed", "step": 0,
          "error": "step 0: failed to start: s/bad/0", "joined": True}
    up = {"started": {"owner": False, "guardian": False},
          "apply": {"plan": {"changes": [], "jobs": [], "settings": []}, "operation": op}}
    assert render_changes.up(up).splitlines()[1:] == [
        "operation op-1 already applies this config (nothing new admitted); waited for "
        "its end:",
        "operation op-1 (apply): failed, stage failed, step 0; error: step 0: failed to "
        "start: s/bad/0"]
    running = render_changes.operation({**op, "outcome": None, "stage": "running", "error": None})
    assert "`tenure op show op-1 --wait` waits for its end" in running


def test_a_certificate_invalidated_says_by_what_and_a_recovery_with_nothing_running_why() -> None:
    """After a backend killed during a stack stop: `backend status` said `invalidated
    (apply in progress)` with nothing in progress, and `recover --dry-run` said the
    certificate covered the world, then `certificate: invalid` (no app ran: that is why
    no force was needed)."""
    from backend.cli import render_backend
    assert render_backend._certificate({"valid": False, "invalidated": "stack intent"}) == \
        "invalidated by a stack stop or start (not certified since)"
    plan = {"certificate": {"valid": False}, "owner": {"identity": {}, "epoch": 2},
            "differences": {}, "covered": True, "reason": "no applications run",
            "nothing_runs": True,
            "release": None, "adopt": [], "digest": "d"}
    first = render_backend.recover_plan(plan).splitlines()[0]
    assert first.startswith("no application runs") and "covers the world" not in first


def test_down_says_whether_a_backend_ran_without_a_guardian_or_outlived_it() -> None:
    """A down during an upgrade said the backend ran without a guardian: the guardian
    had just been stopped by that same down."""
    from backend.cli import render_changes
    alone = render_changes.down({"backend": True, "owner": True})
    after = render_changes.down({"guardian": True, "backend": True, "owner": True})
    assert "backend: stopped (it ran without a guardian)" in alone
    assert "backend: stopped (it outlived the guardian, stopped above" in after


def test_status_says_the_blocked_recoverys_own_next_step() -> None:
    """`tenure status` ended every blocked recovery with `tenure backend recover`, the one
    command that blocks again when the release is damaged or the world uncovered."""
    from backend.cli import render
    diag = {"blocked": {"reason": "content of lib/x.py does not match RUNTIME.json",
                        "next": "`tenure release select` another installed one"}}
    assert render.blocked(diag) == ("recovery blocked: content of lib/x.py does not match "
                                    "RUNTIME.json (`tenure release select` another "
                                    "installed one)")
    assert render.blocked({"blocked": {"reason": "r"}}) == \
        "recovery blocked: r (`tenure backend recover`)"   # an older guardian's record


def test_no_release_selected_says_how_to_get_one() -> None:
    """A first `tenure up` interrupted after it started the owner and the guardian but
    before it selected a release: status said only 'backend: not available; guardian
    diagnostics 1s old', and nothing said what to run."""
    import time
    diag = {"selector": {"current": None, "previous": None, "revision": 0},
            "backend": None, "last_activation": None, "updated_at": time.time()}
    why = render.why(diag)
    assert why.startswith("; no release is selected, so no backend is started (a first "
                          "`tenure up` that was interrupted?): `tenure up` installs and "
                          "selects one;"), why
    selected = {**diag, "selector": {"current": "ab" * 32, "previous": None,
                                     "revision": 1}}
    assert "no release is selected" not in render.why(selected)
