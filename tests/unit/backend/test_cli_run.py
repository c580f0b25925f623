"""The `tenure` entry point (backend.cli.main.run): it exits with main()'s status,
without the interpreter's teardown, and only after everything printed was flushed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from protocol.layout import Layout

CLI = [sys.executable, "-m", "backend.cli.main"]


def test_the_exit_status_and_all_output_survive_the_fast_exit(monkeypatch) -> None:
    from backend.cli.cmdline import parser
    monkeypatch.setenv("COLUMNS", "100")    # the same width in both processes
    done = subprocess.run([*CLI, "--help"], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done
    assert done.stdout == parser(None).format_help(), done.stdout   # every byte of it
    bad = subprocess.run([*CLI, "--home", "/nonexistent-tenure-home", "--json", "op",
                          "show"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and '"BAD_REQUEST"' in bad.stdout, bad


def test_a_reader_that_went_away_is_not_an_error() -> None:
    cli = subprocess.Popen([*CLI, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert cli.stdout is not None and cli.stderr is not None
    cli.stdout.close()                      # as `tenure ... | head -0` does
    err = cli.stderr.read().decode()
    assert cli.wait(timeout=60) in (0, 120) and "Traceback" not in err, err


def test_a_daemon_that_is_not_running_is_named_with_what_to_do(tmp_path, capsys) -> None:
    """Was only 'no socket at …/guardian.sock'; then, with nothing running at all, that
    the backend and the applications kept running."""
    import json
    import socket

    from backend.cli.main import main
    home = str(tmp_path)
    assert main(["--home", home, "backend", "status"]) == 3
    err = capsys.readouterr().err
    assert err == (f"tenure: CONNECT_FAILED: no socket at {home}/runtime/guardian.sock: "
                   "tenure is not running (neither the guardian nor the owner is); "
                   "`tenure up` starts it\n")
    assert main(["--home", home, "--json", "owner", "status"]) == 3
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "CONNECT_FAILED"
    assert error["msg"].endswith(": the owner is not running; `tenure up` starts it, and "
                                 "asks for `tenure owner reconcile` first if it died "
                                 "(docs/reconcile.md)")
    os.makedirs(tmp_path / "execution", mode=0o700)
    with socket.socket(socket.AF_UNIX) as owner:   # an owner that runs
        owner.bind(str(tmp_path / "execution" / "owner.sock"))
        owner.listen()
        assert main(["--home", home, "backend", "status"]) == 3
    err = capsys.readouterr().err
    assert err == (f"tenure: CONNECT_FAILED: no socket at {home}/runtime/guardian.sock: the "
                   "guardian is not running; `tenure up` starts it, and the backend and "
                   "the applications keep running meanwhile\n")


def test_os_errors_reach_the_operator_as_coded_errors() -> None:
    import errno

    from backend.cli.main import _os_error
    ro = _os_error(OSError(errno.EROFS, "Read-only file system", "/h/execution"), "up")
    assert (ro.code_str, ro.msg) == (
        "STORAGE_FAILED", "tenure up failed: the storage failed (OSError: Read-only file "
        "system: /h/execution); the call stopped there")
    denied = _os_error(PermissionError(errno.EACCES, "Permission denied", "/h/x"), "up")
    assert (denied.code_str, denied.msg) == (   # the path is not at fault: the user is
        "UNAUTHORIZED", f"tenure up: permission denied: /h/x: uid {os.geteuid()} may not "
        "use this home (run tenure as the user that runs its daemons, or, to look, as a "
        "member of its viewer_group)")
    other = _os_error(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/f/h"), "up")
    assert (other.code_str, other.msg) == ("INTERNAL",
                                           "tenure up failed: Not a directory: /f/h")


def test_listens_tells_a_listener_from_none_and_from_a_socket_it_may_not_reach(
        tmp_path, monkeypatch) -> None:
    import socket

    from backend.cli.everyday import listens
    path = str(tmp_path / "g.sock")
    assert listens(path) is False                       # nothing there
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
        assert listens(path) is False                   # bound, not listening: refused
        server.listen(1)
        assert listens(path) is True
    finally:
        server.close()

    def denied(self, address):   # a viewer and the service account's 0700 directory
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(socket.socket, "connect", denied)
    assert listens(path) is None


UP_PARSE = """
import sys
from backend.cli.cmdline import parser
argv = ["--home", "/nonexistent-tenure-home", "up", "--config", "t.toml", "--no-wait"]
args = parser(argv).parse_args(argv)
from protocol.startup import import_msgspec_as_released
import_msgspec_as_released()   # as cmd_up does before it parses the config
from backend.config import parse_config
config = parse_config('[stacks.s.apps.a]\\ncommand = ["sleep", "9"]\\n', "/t.toml")
assert config.apps()[0].key == "s/a", config
import backend.cli.lifecycle, backend.cli.upwait  # noqa: E401
from pathlib import Path
from protocol.layout import Layout
from backend.cli.daemons import queue_for_backend
home = Layout(Path(sys.argv[1]))   # the queued config written, as the command writes it
assert queue_for_backend(home, "", "t.toml")["source"] == "t.toml"
print(sorted({"shutil", "typing_extensions", "inspect", "dataclasses",
              "protocol.listen", "logging", "backend.spool"} & set(sys.modules)))
"""


def test_up_parses_and_queues_a_config_without_rare_modules(tmp_path: Path) -> None:
    """What `tenure up --no-wait` loads before it returns: not shutil (argparse's help
    width), typing_extensions (msgspec's, where installed), nor the socket address
    parser and dataclasses for a config without sockets; nor logging, which only the
    backend's side of the queued config (backend.spool) uses."""
    done = subprocess.run([sys.executable, "-c", UP_PARSE, str(tmp_path)],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
    assert os.path.exists(Layout(tmp_path).queued_config)


def test_help_is_as_wide_as_columns_says_or_80() -> None:
    code = ("import os\nfrom backend.cli.cmdline import _columns, parser\n"
            "print(_columns(), max(map(len, parser(None).format_help().splitlines())))")
    widths = {}
    for columns in ("60", "140", "wide", "0", None):
        env = {"PATH": "/usr/bin:/bin", **({"COLUMNS": columns} if columns else {})}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, env=env)   # stdout a pipe: no terminal's width
        assert done.returncode == 0, done.stderr
        widths[columns] = tuple(map(int, done.stdout.split()))
    assert widths["60"][0] == 60 and widths["60"][1] <= 58, widths
    assert widths["140"][0] == 140 and 80 < widths["140"][1] <= 138, widths
    assert widths["wide"] == widths["0"] == widths[None] and widths[None][0] == 80, widths


@pytest.mark.parametrize("argv", [
    ["up", "--timeout", "nan"], ["up", "--timeout", "0"], ["up", "--timeout", "-1"],
    ["start", "s/a", "--timeout", "nan"], ["stop", "s/a", "--timeout", "1e9"],
    ["restart", "s/a", "--timeout", "inf"], ["op", "show", "op-1", "--wait",
                                             "--timeout", "-5"],
    ["guardian", "upgrade", "r", "--timeout", "0"],
])
def test_a_timeout_out_of_range_is_refused_before_anything_is_asked(tmp_path, capsys,
                                                                    argv) -> None:
    """nan made start/stop raise a ValueError and inf an OverflowError (tracebacks);
    up took 0 or -1 as a wait and said no backend answered."""
    import json

    from backend.cli.main import main
    home = tmp_path / "h"
    assert main(["--home", str(home), "--json", *argv]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert (err["code"], err["data"]) == ("BAD_REQUEST", {"field": "timeout"}), err
    assert not home.exists()                     # nothing was done
    assert main(["--home", str(home), *argv]) == 2
    assert "--timeout" in capsys.readouterr().err


BEYOND_THE_WIRE = str(10**23)   # more than msgpack's 64 bits


@pytest.mark.parametrize("argv, field", [
    (["logs", "s/a", "-n", BEYOND_THE_WIRE], "n"), (["events", "-n", BEYOND_THE_WIRE], "n"),
    (["top", "--once", "-n", BEYOND_THE_WIRE], "n"),
    (["job", "list", "--limit", BEYOND_THE_WIRE], "limit"),
    (["logs", "s/a", "--since", BEYOND_THE_WIRE], "since"),
    (["events", "--since", str(2**62 + 1)], "since"),
])
def test_a_count_too_large_for_the_wire_names_its_option(tmp_path, capsys, argv,
                                                         field) -> None:
    """They read "message cannot be encoded: Integer value out of range", naming no
    option (or the API's params.after, not --since)."""
    import json

    from backend.cli.main import main
    home = tmp_path / "h"
    assert main(["--home", str(home), "--json", *argv]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert (err["code"], err["data"]) == ("BAD_REQUEST", {"field": field}), err
    flag = {"n": "-n", "limit": "--limit", "since": "--since"}[field]
    assert err["msg"].startswith(f"{flag} "), err
    assert not home.exists()                     # nothing was done


@pytest.mark.parametrize("command, code, said", [
    ('"sleep 100"', "CONFIG_INVALID", ":2: stacks.s.apps.a.command: must be an array of "
                                      "strings, not a string"),
    ('["sleep", "100"]', "BACKEND_UNAVAILABLE", "tenure is not running (neither the "
     "guardian nor the owner is). `tenure up` starts it. {config} parses; a plan compares "
     "it with what runs, which needs the backend")])
def test_plan_without_a_backend_still_says_what_is_wrong_in_the_config(
        tmp_path, capsys, command, code, said) -> None:
    """It said only BACKEND_UNAVAILABLE: a config was not checked until tenure ran."""
    import json

    from backend.cli.main import main
    config = tmp_path / "t.toml"
    config.write_text(f"[stacks.s.apps.a]\ncommand = {command}\n")
    assert main(["--home", str(tmp_path / "h"), "--json", "plan", "--config",
                 str(config)]) == (1 if code == "CONFIG_INVALID" else 3)
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == code and err["msg"].endswith(said.format(config=config)), err


def test_job_run_where_tenure_is_not_running_says_so_at_once(tmp_path) -> None:
    """A keyed run retries while the backend is between generations; with nothing
    running at all it waited silently for up to an hour."""
    done = subprocess.run([*CLI, "--home", str(tmp_path / "h"), "job", "run", "s/j",
                           "--key", "k"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done
    assert "BACKEND_UNAVAILABLE" in done.stderr and "tenure is not running" in done.stderr


def test_job_run_with_recovery_blocked_says_so_at_once(monkeypatch) -> None:
    """Was: a silent wait of up to an hour, though no backend comes back until the
    operator runs `tenure backend recover`."""
    from backend.cli import jobs
    from protocol.errors import BackendUnavailable
    blocked = BackendUnavailable("no backend generation answers; recovery blocked", {
        "stopped": None, "diagnostics": {"blocked": {"code": "RECOVERY_BLOCKED"}}})
    between = BackendUnavailable("no backend generation answers", {
        "stopped": None, "diagnostics": {"blocked": None}})
    calls = []

    def fail(exc: Exception) -> None:
        calls.append(exc)
        raise exc
    monkeypatch.setattr(jobs.time, "sleep", lambda s: None)
    args = types.SimpleNamespace(home="/nonexistent")
    with pytest.raises(BackendUnavailable):
        jobs._retrying(args, lambda: fail(blocked), jobs.time.monotonic() + 1, True)
    assert calls == [blocked]
    answers = iter([between, between])
    assert jobs._retrying(args, lambda: fail(next(answers)) if len(calls) < 3 else "ok",
                          jobs.time.monotonic() + 3600, False) == "ok"


def test_job_run_with_an_empty_key_is_refused_not_run_without_one(tmp_path) -> None:
    """Was: `--key ""` sent no key at all, so every retry ran the job again."""
    from backend.cli import jobs
    from protocol.errors import BadRequest
    sent: list[dict] = []

    def call(args, method, params):
        sent.append(params)
        raise BadRequest("params.key must be 1 to 500 characters")
    from types import SimpleNamespace
    args = SimpleNamespace(target="s/j", job_args=[], key="", timeout=None, wait=False)
    with pytest.raises(BadRequest):
        jobs._run(args, call, lambda *a: None)
    assert sent == [{"template": "s/j", "args": [], "key": ""}]


@pytest.mark.parametrize("extra", [["--dry-run"], ["--digest", "ab" * 32]])
def test_stack_start_refuses_the_options_of_a_stop(tmp_path, capsys, extra) -> None:
    """Was: `stack start S --dry-run` ignored --dry-run and started the stack."""
    import json

    from backend.cli.main import main
    home = tmp_path / "h"
    assert main(["--home", str(home), "--json", "stack", "start", "s", *extra]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "BAD_REQUEST" and "takes no --dry-run or --digest" in err["msg"]
    assert not home.exists()                     # nothing was asked of anyone


@pytest.mark.parametrize(("argv", "says"), [
    (["apply", "plan-1", "--timeout", "5"], "--timeout goes with --wait"),
    (["op", "show", "op-1", "--timeout", "5"], "--timeout goes with --wait"),
    (["op", "list", "extra"], "tenure op list takes no id (got 'extra')"),
    (["op", "list", "--wait"], "tenure op list takes no --wait"),
    (["op", "abandon", "op-1", "--wait"], "tenure op abandon takes no --wait"),
])
def test_options_that_would_be_ignored_are_refused(tmp_path, capsys, argv, says) -> None:
    """Was: accepted and ignored (a stray id, a --timeout without --wait)."""
    import json

    from backend.cli.main import main
    home = tmp_path / "h"
    assert main(["--home", str(home), "--json", *argv]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "BAD_REQUEST" and says in err["msg"], err
    assert not home.exists()                     # nothing was asked of anyone


def test_a_request_id_is_bounded() -> None:
    from backend.api import MAX_REQUEST_ID, S_APPLY
    from protocol.errors import BadRequest
    assert S_APPLY.validate({"plan": "p", "request_id": "deploy-42"})["request_id"]
    for bad in ("", "x" * (MAX_REQUEST_ID + 1), "a\nb"):
        with pytest.raises(BadRequest, match="request_id"):
            S_APPLY.validate({"plan": "p", "request_id": bad})


@pytest.mark.parametrize("argv", [
    ["status", "-w", "--every", "nan"], ["status", "-w", "--every", "inf"],
    ["top", "--every", "1e300"], ["top", "--once", "--every", "nan"],
    ["top", "--every=-inf"], ["status", "-w", "--every", "0"],
])
def test_an_every_that_is_not_a_duration_is_a_usage_error_not_a_traceback(
        tmp_path, capsys, monkeypatch, argv) -> None:
    """nan and inf reached time.sleep: a ValueError or OverflowError traceback."""
    import json
    import time

    from backend.cli.main import main

    def slept(seconds: float) -> None:
        raise AssertionError(f"slept {seconds}: the option was taken")
    monkeypatch.setattr(time, "sleep", slept)
    home = tmp_path / "h"
    assert main(["--home", str(home), "--json", *argv]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert (err["code"], err["data"]) == ("BAD_REQUEST", {"field": "every"}), err
    assert not home.exists()                     # nothing was done
    assert main(["--home", str(home), *argv]) == 2
    assert "--every" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "target", "why"), [
    (["logs", "s/ticker/x"], "s/ticker/x", "instance 'x' is not a number"),
    (["inspect", "s/ticker/x"], "s/ticker/x", "instance 'x' is not a number"),
    (["status", "ok", "s/a/1/2"], "s/a/1/2", "must be STACK, STACK/APP or STACK/APP/N"),
    (["events", "s//a"], "s//a", "must be STACK, STACK/APP or STACK/APP/N"),
    (["restart", "s/a/b c"], "s/a/b c", "must be 1 to 300 printable characters"),
])
def test_a_malformed_target_is_told_in_the_operators_terms(tmp_path, capsys, argv,
                                                            target, why) -> None:
    """It said "params.targets 's/ticker/x': …" (the wire's parameter name), after
    asking the backend."""
    from backend.cli.main import main
    home = tmp_path / "h"
    assert main(["--home", str(home), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tenure: BAD_REQUEST: target {target!r}: {why}"), err
    assert "params" not in err and not home.exists()


@pytest.mark.parametrize(("argv", "wrong"), [
    (["owner", "reconcile", "--drain", "d" * 64, "--dry-run"], "--dry-run"),
    (["owner", "status", "--prepare"], "--prepare"),
    (["owner", "upgrade", "--drain", "x"], "--drain"),
    (["owner", "reconcile", "--continue"], "--continue"),
    (["owner", "reconcile", "somerelease"], "RELEASE"),
])
def test_an_owner_option_of_another_action_is_refused_before_anything_runs(
        argv: list[str], wrong: str, tmp_path, capsys) -> None:
    """`owner reconcile --drain D --dry-run` took --dry-run (an upgrade option), ignored
    it, and stopped the processes it was meant only to show."""
    from backend.cli.main import main
    assert main(["--home", str(tmp_path / "h"), "--json", *argv]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "BAD_REQUEST" and err["data"] == {"options": [wrong]}, err
    assert not (tmp_path / "h").exists()


def test_an_error_quoting_what_was_given_prints_no_terminal_control(capsys) -> None:
    """`tenure apply "$(printf 'plan-\\x1b[2J')"` printed the backend's 'no plan …' with
    the escape as it was: the terminal cleared."""
    import types

    from backend.cli.main import _fail
    from protocol.errors import NotFound
    args = types.SimpleNamespace(json=False, home="/nonexistent")
    assert _fail(args, NotFound("no plan plan-\x1b[2J\nsecond line"), 1) == 1
    assert capsys.readouterr().err == ("tenure: NOT_FOUND: no plan plan-\\x1b[2J\n"
                                       "second line\n")


def test_an_empty_home_is_refused_not_taken_for_the_working_directory() -> None:
    """`--home "$UNSET"` ran the command on the working directory's home."""
    for argv in (["--home", "", "status"], ["--home=", "down"], ["up", "--home", ""]):
        done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done
        assert "argument --home: empty: give the home's path" in done.stderr, done


def test_an_answer_stdout_cannot_take_says_the_command_was_carried_out(
        tmp_path, monkeypatch, capsys) -> None:
    """A command that did its work, then could not print its answer (stdout on a full
    disk): it said 'tenure stop failed: …; the call stopped there', and the advice for
    STORAGE_FAILED (make room, run it again) ran a job twice."""
    import errno
    import json

    from backend.cli import commands, main

    class Full:
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            return os.open(os.devnull, os.O_WRONLY)

        def isatty(self) -> bool:
            return False

    def stopped(args) -> int:
        from backend.cli.everyday import out
        out(args, {"instances": {"s/a/0": "stopped"}}, "s/a/0  stopped")
        return 0
    monkeypatch.setattr(commands, "cmd_stop", stopped)
    monkeypatch.setattr(main, "_stdout_gone", lambda: None)
    for as_json in (False, True):
        monkeypatch.setattr("sys.stdout", Full())
        code = main.main(["--home", str(tmp_path), *(["--json"] if as_json else []),
                          "stop", "s/a"])
        assert code == 1
        err = capsys.readouterr().err
        said = json.loads(err.removeprefix("tenure: ")) if err.startswith("{") else err
        text = json.dumps(said)
        assert "tenure stop: its output could not be written (No space left on device); " \
            "the command itself was carried out, so running it again would do it again" \
            in text, text
        assert "the call stopped there" not in text


def test_what_the_outputs_encoding_cannot_write_is_written_out(monkeypatch) -> None:
    """Under a locale that is not UTF-8, `tenure events` ('→'), `plan` and a stale
    `status` ('—') answered INTERNAL (UnicodeEncodeError) instead of their output."""
    import io
    import sys

    from backend.cli import main
    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", ascii_out)
    main._any_encoding()
    print("starting → ready — héllo")
    ascii_out.flush()
    assert raw.getvalue() == b"starting \\u2192 ready \\u2014 h\\xe9llo\n"


def test_a_certificate_the_backend_cannot_write_is_said_over_a_ready_one(monkeypatch) -> None:
    """backend status read `recovery: ready` from the last certificate on disk while the
    backend could not write a new one (a full disk) and an app had exited since: a
    crash then blocked. The backend's word now wins over 'ready' as over 'pending'."""
    import time
    from contextlib import contextmanager
    from types import SimpleNamespace

    from backend.cli import backendcmd

    class _Api:
        def call(self, method: str, params: object = None) -> dict:
            assert method == "generation.status"
            return {"certificate_error": {"error": "database or disk is full",
                                          "since": time.time() - 65}}

    @contextmanager
    def api(args: object, timeout: float = 0) -> object:
        yield _Api()
    monkeypatch.setattr(backendcmd, "_api", api)
    r = {"backend": {"alive": True}}
    for seen in ("ready", "pending"):
        said = backendcmd._uncertifiable(SimpleNamespace(), r, {"state": seen, "reason": None})
        assert said["state"] == "unavailable", said
        assert said["reason"].startswith("the backend cannot write its recovery "
                                         "certificate (for 1m05s: database or disk is "
                                         "full)"), said
    blocked = {"state": "unavailable", "reason": "recovery blocked"}
    assert backendcmd._uncertifiable(SimpleNamespace(), r, blocked) is blocked


@pytest.mark.parametrize(("key", "waits"), [(None, 60.0), ("k", 3600.0)])
def test_job_run_without_a_key_waits_for_a_backend_away_through_a_handoff_only(
        monkeypatch, key, waits) -> None:
    """Was: `job run` without --key kept asking a stopped backend for an hour, as a keyed
    one does (docs/cli.md: only a keyed run keeps retrying); it ends after 60 s with
    BACKEND_UNAVAILABLE, as other commands do, unless --timeout says otherwise."""
    from backend.cli import jobs
    from protocol.errors import BackendUnavailable
    clock = [1000.0]
    monkeypatch.setattr(jobs.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(jobs.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    away = BackendUnavailable("the backend (pid 9) is stopped", {
        "stopped": None, "diagnostics": {"blocked": None}})

    def call(args, method, params):
        raise away
    args = types.SimpleNamespace(target="s/j", job_args=[], key=key, timeout=None,
                                 wait=False, home="/nonexistent", json=True)
    with pytest.raises(BackendUnavailable):
        jobs._run(args, call, lambda *a: None)
    assert waits <= clock[0] - 1000.0 < waits + 1
