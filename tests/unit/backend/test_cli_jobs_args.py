"""`tenure job` argument handling and wording, with the backend answered from memory (no
processes): a malformed job target is BAD_REQUEST before anything is asked, an empty
`--state` reaches the backend (which names the states), a stop that has not settled says
what goes on and what exit status 4 means, and `show` prints a scheduled run's due time.
A dead guardian (no listener, no lock holder) ends a keyed wait at once unless the
owner runs under a service manager, which restarts the guardian. `run --wait` waits
for the job's end by its own deadline, from the admission, not the submission's."""

from __future__ import annotations

import types
from typing import Any

import pytest

from backend.cli import jobs
from backend.cli.jobs import job_command, render_show
from protocol.errors import BackendUnavailable, BadRequest, ConnectFailed, RequestTimedOut

NOW = 1_796_000_000.0
RECORD = {"id": 97, "stack": "s", "template": "trapper", "state": "running", "outcome": None,
          "exit_code": None, "signal": None, "key": None, "argv": ["sh"], "identity": {},
          "attempt": 1, "launch_key": "job:x:97:1", "pid": 4100, "submitted_at": NOW,
          "started_at": NOW, "ended_at": None, "duration": None, "due_at": None}


def args(action: str, target: str | None = None, **kw: Any) -> Any:
    base = {"action": action, "target": target, "key": None, "job_args": [], "wait": False,
            "timeout": None, "state": None, "limit": 50, "follow": False, "n": None,
            "stream": None, "json": False, "home": "/nonexistent"}
    return types.SimpleNamespace(**{**base, **kw})


class Backend:
    """Records what was asked; answers ``answer``."""

    def __init__(self, answer: Any = None) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.answer = answer

    def __call__(self, a: Any, method: str, params: dict[str, Any], **kw: Any) -> Any:
        self.asked.append((method, params))
        return self.answer


@pytest.mark.parametrize(("action", "target"), [
    ("run", "s/echo/1"), ("run", "echo"), ("run", "s/"), ("run", "/echo"),
    ("run", "s/e cho"), ("list", "s/echo/1"), ("list", "s//x"), ("list", "")])
def test_a_malformed_job_target_is_refused_before_anything_is_asked(action: str,
                                                                      target: str) -> None:
    """Was: `job run s/echo/1` asked the backend and got NOT_FOUND (exit 1)."""
    backend = Backend()
    with pytest.raises(BadRequest, match="STACK/JOB") as err:
        job_command(args(action, target), backend, lambda *a: None)
    assert err.value.data["target"] == target and backend.asked == []


def test_list_passes_an_empty_state_on_for_the_backend_to_refuse() -> None:
    """Was: `--state ""` was taken as no filter and listed every record."""
    backend = Backend({"jobs": []})
    job_command(args("list", "s/echo", state=""), backend, lambda *a: None)
    assert backend.asked == [("job.list", {"limit": 50, "template": "s/echo", "state": ""})]


def test_a_stop_not_settled_says_it_is_under_way_and_what_exit_4_means() -> None:
    """Was: only `job 97 s/trapper: running`, exit 4."""
    printed: list[str] = []
    backend = Backend({**RECORD, "settled": False})
    code = job_command(args("stop", "97", timeout=1.0), backend,
                       lambda a, obj, text: printed.append(text))
    assert code == 4
    text, = printed
    assert text.startswith("job 97 s/trapper: running\n")
    assert "stop was asked and is still under way" in text and "SIGKILL" in text
    assert "--timeout 1 s" in text and "exit status is 4 (not settled)" in text


def test_show_prints_the_due_time_of_a_scheduled_run() -> None:
    assert "due:" not in render_show(RECORD)
    shown = render_show({**RECORD, "source": "schedule", "due_at": NOW + 60})
    assert "  due:       2026-" in shown


def unavailable(**data: Any) -> BackendUnavailable:
    return BackendUnavailable("no backend generation answers",
                              {"diagnostics": None, "stopped": None, **data})


def test_a_dead_guardian_means_no_backend_is_coming_unless_a_service_restarts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: a keyed `run --wait` waited its whole --timeout for it."""
    from backend.cli import everyday, holders, nobackend, ownerplan, render
    monkeypatch.setattr(everyday, "listens", lambda sock: False)
    monkeypatch.setattr(holders, "lock_holder", lambda sock, module: None
                        if module == "guardian" else (4242, 1))
    monkeypatch.setattr(holders, "listener", lambda sock, module: None)
    monkeypatch.setattr(ownerplan, "mode_of", lambda pid: "standalone")

    def told() -> BackendUnavailable:   # as everyday.call raises it
        said = nobackend.facts(args("run", "s/echo"), None)
        return BackendUnavailable(render.unavailable(said), said)

    exc = told()
    assert jobs.none_coming(args("run", "s/echo"), exc) is exc
    assert exc.msg.startswith("no backend generation answers, and none is coming; ")
    assert "the guardian is not running" in exc.msg and "`tenure up`" in exc.msg
    assert exc.data["guardian_running"] is False

    monkeypatch.setattr(everyday, "owner_stopping", lambda a: 4242)   # `down` under way
    down = told()
    assert jobs.none_coming(args("run", "s/echo"), down) is down
    assert "none is coming; the owner (pid 4242) is shutting down" in down.msg, down
    assert "keep running" not in down.msg and down.data["owner_shutting_down"] == 4242
    monkeypatch.setattr(everyday, "owner_stopping", lambda a: None)

    # the guardian already stopped, the owner not told yet: the `down` is seen by its lock
    monkeypatch.setattr(everyday, "down_running", lambda a: 4343)
    down = told()
    assert jobs.none_coming(args("run", "s/echo"), down) is down
    assert "none is coming; `tenure down` (pid 4343) is stopping tenure" in down.msg
    assert "keep running" not in down.msg
    assert down.data["down_running"] == 4343 and down.data["owner_shutting_down"] is None
    monkeypatch.setattr(everyday, "down_running", lambda a: None)

    monkeypatch.setattr(ownerplan, "mode_of", lambda pid: "systemd")
    managed = told()   # systemd restarts it
    assert jobs.none_coming(args("run", "s/echo"), managed) is None
    assert "its service manager starts it again" in managed.msg, managed
    monkeypatch.setattr(ownerplan, "mode_of", lambda pid: "standalone")
    monkeypatch.setattr(holders, "lock_holder", lambda sock, module: (4241, 1))
    monkeypatch.setattr(holders, "silent_holder", lambda sock, module: BackendUnavailable(
        "hung", {"pid": 4241}))
    assert jobs.none_coming(args("run", "s/echo"), told()) is None   # hung, not gone
    monkeypatch.setattr(everyday, "listens", lambda sock: True)
    assert jobs.none_coming(args("run", "s/echo"), told()) is None   # it runs


def test_tenure_stopped_or_a_blocked_recovery_ends_the_wait_with_its_own_error() -> None:
    for exc in (unavailable(stopped={"owner": None}),
                unavailable(diagnostics={"blocked": {"reason": "x"}})):
        assert jobs.none_coming(args("run", "s/echo"), exc) is exc


def test_job_show_prints_no_terminal_control_its_arguments_or_note_carry() -> None:
    """Arguments and notes come through the API from whoever may submit: ESC [8m in
    one concealed every line after it on the operator's terminal."""
    from backend.cli.jobs import render_show
    text = render_show({
        "id": 7, "stack": "s", "template": "t", "state": "succeeded", "outcome": None,
        "exit_code": 0, "signal": None, "key": "k\x1b[8m", "argv": ["run", "\x1b[8m"],
        "identity": None, "attempt": 1, "launch_key": "job:s:7:1", "pid": 4242,
        "submitted_at": 1.0, "started_at": 2.0, "ended_at": 3.0, "duration": 1.0,
        "resolution": {"started": True, "note": "ok\x9b2J", "by": "op", "at": 4.0},
        "history": []})
    assert "\x1b" not in text and "\x9b" not in text
    assert "k\\x1b[8m" in text and "ok\\x9b2J" in text and "pid:" in text


@pytest.mark.parametrize("target", ["\u00b2", "x", "-1", "99999999999999999999999"])
def test_a_job_id_that_is_no_number_is_refused_before_anything_is_asked(target: str) -> None:
    """'\u00b2'.isdigit() is True and int() refused it: INTERNAL."""
    backend = Backend()
    with pytest.raises(BadRequest, match="is not a job id"):
        job_command(args("show", target), backend, lambda *a: None)
    assert backend.asked == []


class Clock:
    """``time.monotonic`` and ``time.sleep`` of the CLI: a sleep moves the clock on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Runs:
    """A backend whose job runs ``for_s`` seconds of the fake clock after its admission."""

    def __init__(self, clock: Clock, for_s: float) -> None:
        self.clock, self.ends_at = clock, clock.now + for_s

    def __call__(self, a: Any, method: str, params: dict[str, Any], **kw: Any) -> Any:
        if method == "job.run":
            return {"job": {**RECORD, "state": "admitted"}, "deduplicated": False}
        if self.clock.now < self.ends_at:
            return {**RECORD, "history": []}
        return {**RECORD, "state": "succeeded", "outcome": "success", "exit_code": 0,
                "history": []}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(jobs, "time", types.SimpleNamespace(monotonic=fake.monotonic,
                                                             sleep=fake.sleep))
    return fake


def test_run_wait_without_a_key_waits_past_the_submissions_minute(clock: Clock) -> None:
    """Was: the wait reused the unkeyed submission's 60 s deadline and ended with exit 4
    after a minute while the job still ran."""
    printed: list[str] = []
    code = job_command(args("run", "s/trapper", wait=True), Runs(clock, 600.0),
                       lambda a, obj, text: printed.append(text))
    assert code == 0 and printed[-1].startswith("job 97 s/trapper: succeeded")
    assert clock.now >= 1600.0


def test_run_wait_gives_up_at_its_timeout_counted_from_the_admission(clock: Clock) -> None:
    code = job_command(args("run", "s/trapper", wait=True, timeout=5.0),
                       Runs(clock, 600.0), lambda *a: None)
    assert code == 4 and 1005.0 <= clock.now < 1006.0


def test_run_wait_without_a_timeout_gives_up_after_an_hour(clock: Clock) -> None:
    code = job_command(args("run", "s/trapper", wait=True, key="k"),
                       Runs(clock, 7200.0), lambda *a: None)
    assert code == 4 and 1000.0 + jobs.RUN_WAIT <= clock.now < 1000.0 + jobs.RUN_WAIT + 1


class LostAfterAdmission:
    """A backend that admits the job, then answers nothing (stopped: the connection is
    made, no answer comes; or gone between generations)."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __call__(self, a: Any, method: str, params: dict[str, Any], **kw: Any) -> Any:
        if method == "job.run":
            return {"job": {**RECORD, "state": "admitted"}, "deduplicated": False}
        raise self.exc


@pytest.mark.parametrize("exc", [
    RequestTimedOut("job.show: no answer within 5 s"),
    ConnectFailed("no socket at api.sock", {"path": "api.sock"})])
def test_run_wait_that_loses_the_backend_after_admission_names_the_job_and_exits_4(
        clock: Clock, exc: Exception) -> None:
    """Was: the error of the last call at the deadline, exit 3, without the job's id: a
    script that retries on 3 without --key ran the job twice."""
    printed: list[tuple[Any, str]] = []
    code = job_command(args("run", "s/trapper", wait=True, timeout=5.0),
                       LostAfterAdmission(exc), lambda a, obj, text: printed.append((obj, text)))
    assert code == 4 and 1005.0 <= clock.now < 1007.0
    (obj, text), = printed
    assert obj["job"]["id"] == 97 and obj["settled"] is False, obj
    assert text.startswith("job 97 s/trapper: admitted\n"), text
    assert "job 97 goes on" in text and "`tenure job show 97`" in text, text


@pytest.mark.parametrize("argv", [
    ["job", "run", "s/x", "--started"], ["job", "run", "s/x", "--state", "bogus"],
    ["job", "run", "s/x", "-n", "5"], ["job", "run", "s/x", "-f"],
    ["job", "list", "--key", "foo"], ["job", "show", "1", "--wait"],
    ["job", "show", "1", "--arg", "x"], ["job", "show", "1", "--note", "hi"],
    ["job", "withdraw", "1", "--limit", "5"], ["job", "logs", "1", "--timeout", "3"],
    ["job", "resolve", "1", "--started", "--stream", "stdout"]])
def test_an_option_of_another_job_action_is_a_usage_error(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Was: accepted and ignored (`job list --key foo` listed every job, `job show 1
    --wait` did not wait), exit 0."""
    from backend.cli.cmdline import parser
    with pytest.raises(SystemExit) as info:
        parser(argv).parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: tenure job" in err and f"tenure job {argv[1]}" in err, err


def test_each_job_action_takes_its_own_options_with_their_defaults() -> None:
    from backend.cli.cmdline import parser
    argv = ["job", "run", "s/x", "--key", "k", "--arg", "a", "--wait", "--timeout", "5"]
    ns = parser(argv).parse_args(argv)
    assert (ns.key, ns.job_args, ns.wait, ns.timeout) == ("k", ["a"], True, 5.0)
    assert (ns.limit, ns.state, ns.n, ns.follow, ns.note, ns.started) == \
        (50, None, None, False, "", False)
    argv = ["job", "logs", "3", "-f", "-n", "2", "--stream", "stderr", "--json"]
    ns = parser(argv).parse_args(argv)
    assert (ns.follow, ns.n, ns.stream, ns.json, ns.key, ns.job_args) == \
        (True, 2, "stderr", True, None, [])
    argv = ["job", "resolve", "3", "--not-started", "--note", "checked"]
    ns = parser(argv).parse_args(argv)
    assert (ns.not_started, ns.started, ns.note) == (True, False, "checked")
