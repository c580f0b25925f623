"""supervisord .conf → drafts: value types, expansions, includes, numprocs, groups and
what is reported as not mapped."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from backend.importers import import_files
from backend.importers.model import Context, Finding, FindingKind, SourceResult
from backend.importers.supervisord import read_supervisord
from backend.importers.supervisord_values import (
    AutoRestart,
    auto_restart,
    boolean,
    exit_codes,
    expand,
    key_value_pairs,
    signal_name,
)
from backend.model import ReadyKind, RestartMode, RunAs
from protocol.errors import ConfigInvalid

CTX = Context(environ={"HOME": "/home/ops", "TIER": "prod"}, hostname="box1")


def _read(tmp_path: Path, files: dict[str, str], ctx: Context = CTX) -> SourceResult:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return read_supervisord(str(tmp_path / next(iter(files))), ctx)


def _problems(result: SourceResult, kind: FindingKind = FindingKind.NOT_MAPPED) -> dict[str, str]:
    """Findings by key; without the note on signalling the main process only, which
    most programs get (tested on its own)."""
    return {f.origin.key: f.problem for f in result.findings if f.kind is kind
            and not _signals_note(f)}


def _notes(result: SourceResult) -> list[Finding]:
    return [f for f in result.findings if f.kind is FindingKind.NOTE
            and not _signals_note(f)]


def _signals_note(f: Finding) -> bool:
    return f.kind is FindingKind.NOTE and "main process only" in f.problem


# -- values ------------------------------------------------------------------------------

def test_expand_uses_printf_conversions_and_double_percent() -> None:
    names = {"program_name": "w", "process_num": 7}
    assert expand("%(program_name)s-%(process_num)03d 100%%", names) == "w-007 100%"
    with pytest.raises(ValueError, match="known names: process_num, program_name"):
        expand("%(nope)s", names)
    with pytest.raises(ValueError, match="write '%%'"):
        expand("date +%s", names)  # supervisord would format its whole table in here


def test_an_unknown_name_is_named_without_listing_the_environment() -> None:
    names = {"program_name": "w", "ENV_SECRET_NAME": "x"}
    with pytest.raises(ValueError) as e:
        expand("%(ENV_NOPE)s", names)
    assert str(e.value).startswith("%(ENV_NOPE)s cannot be expanded: NOPE is set neither "
                                   "in the environment")
    with pytest.raises(ValueError) as e:
        expand("%(nope)s", names)
    assert str(e.value).endswith("known names: program_name and ENV_ names")
    assert "SECRET" not in str(e.value)


def test_environment_pairs_are_split_like_supervisord() -> None:
    assert key_value_pairs('A="x, y",B=/p:q,C=http://h:1/a-b.c') == \
        {"A": "x, y", "B": "/p:q", "C": "http://h:1/a-b.c"}
    assert key_value_pairs("") == {}
    for bad in ("A", "A=", "A=1,B", 'A="unterminated'):
        with pytest.raises(ValueError):
            key_value_pairs(bad)



def test_environment_values_keep_backslashes_and_lose_their_end_quotes() -> None:
    """Regression: the values were split as POSIX shell words, backslashes taken as
    escapes and inner quotes kept: a Windows share lost half its backslashes and
    `"'hello'"` kept its single quotes. supervisord splits without escapes and strips
    every quote from a value's ends (supervisor 4.3.0's dict_of_key_value_pairs
    returns exactly this for the same text)."""
    got = key_value_pairs(r'SHARE="\\\\srv\\data",GREETING="'
                          "'hello'" + r'",OPTS="-Dmode=' + "'fast'" + '",A=foo"bar"')
    assert got == {"SHARE": r"\\\\srv\\data", "GREETING": "hello",
                   "OPTS": "-Dmode='fast", "A": 'foo"bar'}


def test_scalar_types() -> None:
    assert [boolean(v) for v in ("TRUE", "yes", "On", "1", "false", "no", "off", "0")] == \
        [True] * 4 + [False] * 4
    assert auto_restart("Unexpected") is AutoRestart.UNEXPECTED
    assert auto_restart("yes") is AutoRestart.TRUE
    assert [signal_name(v) for v in ("term", "SIGHUP", "9", "iot")] == \
        ["TERM", "HUP", "KILL", "ABRT"]
    assert exit_codes("0, 2") == [0, 2]
    for reader, bad in ((boolean, "maybe"), (auto_restart, "sometimes"),
                        (signal_name, "SIGFOO"), (exit_codes, "256")):
        with pytest.raises(ValueError):
            reader(bad)


# -- programs ----------------------------------------------------------------------------

def test_program_keys_map_to_tenure_keys(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[program:api]
command = /srv/api/bin/serve --port 80%(process_num)02d
numprocs = 1
directory = /srv/api
environment = MODE="fast",HOME_COPY="%(ENV_HOME)s"
autorestart = true
startsecs = 3
startretries = 2
stopsignal = 2
stopwaitsecs = 45
priority = 5
"""})
    [draft] = result.drafts
    app = draft.app
    assert app.name == "api" and app.stack == ""
    assert app.command == ("/srv/api/bin/serve", "--port", "8000")
    assert app.cwd == "/srv/api" and app.env == {"MODE": "fast", "HOME_COPY": "/home/ops"}
    assert app.restart is RestartMode.ALWAYS
    assert (app.ready.kind, app.ready.delay) == (ReadyKind.DELAY, 3.0)
    assert app.backoff.reset_after == 3.0
    assert (app.start_limit.burst, app.start_limit.interval) == (3, 3 * 3 + 0.5 + 1.0 + 1)
    assert (app.stop.signal, app.stop.timeout) == ("INT", 45.0)
    assert draft.priority == 5
    assert _problems(result) == {}
    assert list(_problems(result, FindingKind.NOTE)) == ["[program:api] environment"]


def test_defaults_are_supervisords(tmp_path: Path) -> None:
    [draft] = _read(tmp_path, {"s.conf": "[program:x]\ncommand=/bin/x\n"}).drafts
    app = draft.app
    assert app.restart is RestartMode.ON_FAILURE  # autorestart=unexpected, exitcodes=0
    assert (app.ready.kind, app.ready.delay) == (ReadyKind.DELAY, 1.0)  # startsecs=1
    assert app.start_limit.burst == 4  # startretries=3
    assert (app.stop.signal, app.stop.timeout) == ("TERM", 10.0)
    assert draft.priority == 999


def test_start_retries_under_autorestart_false_are_reported(tmp_path: Path) -> None:
    """Regression: supervisord starts a program again when it ends within startsecs,
    even with autorestart=false (BACKOFF, FATAL after startretries); the import wrote
    restart = "never" and dropped startretries without a word."""
    result = _read(tmp_path, {"s.conf": (
        "[program:flaky]\ncommand=/bin/x\nautorestart=false\nstartretries=5\n"
        "[program:quiet]\ncommand=/bin/x\nautorestart=false\n"
        "[program:instant]\ncommand=/bin/x\nautorestart=false\nstartsecs=0\n"
        "[program:once]\ncommand=/bin/x\nautorestart=false\nstartretries=0\n"
        "[program:always]\ncommand=/bin/x\nautorestart=true\n")})
    assert {k: v for k, v in _problems(result).items() if "startretries" in k} == {
        "[program:flaky] startretries": "supervisord starts a program again when it ends "
        "within startsecs (1 s), up to 5 times, even with autorestart=false; under "
        'restart = "never" tenure does not',
        "[program:quiet] startretries": "supervisord starts a program again when it ends "
        "within startsecs (1 s), up to 3 times, even with autorestart=false; under "
        'restart = "never" tenure does not'}
    assert [f.origin.line for f in result.findings if f.origin.key.endswith("retries")] \
        == [4, 5]   # the key's line, or the section's when supervisord's default applies


def test_identical_processes_become_instances(tmp_path: Path) -> None:
    [draft] = _read(tmp_path, {"s.conf": """
[program:web]
command=/bin/web
process_name=%(program_name)s_%(process_num)02d
numprocs=3
"""}).drafts
    assert (draft.app.name, draft.app.instances) == ("web", 3)


def test_processes_that_differ_by_number_become_one_app_each(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[program:worker]
command=/bin/worker --id %(process_num)d
process_name=%(program_name)s-%(process_num)d
numprocs=2
numprocs_start=4
"""})
    assert [(d.app.name, d.app.command[-1], d.app.instances) for d in result.drafts] == \
        [("worker-4", "4", 1), ("worker-5", "5", 1)]


def test_too_many_processes_are_capped_and_reported(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": "[program:w]\ncommand=/bin/w\nnumprocs=100\n"
                                        "process_name=%(process_num)d\n"})
    assert result.drafts[0].app.instances == 64
    assert "at most 64" in _problems(result)["[program:w] numprocs"]


@pytest.mark.parametrize("numprocs", ["10000000", "99999999999999999999"])
def test_a_huge_numprocs_builds_no_more_processes_than_are_imported(
        tmp_path: Path, numprocs: str) -> None:
    """Every process was built before the cap: ten million took minutes and 300 MB, and
    a twenty-digit count never ended."""
    result = _read(tmp_path, {"s.conf": f"[program:w]\ncommand=/bin/w\nnumprocs={numprocs}\n"})
    assert result.drafts[0].app.instances == 64
    assert _problems(result)["[program:w] numprocs"] == (
        f"tenure runs at most 64 instances of an app, not {numprocs}")
    many = _read(tmp_path, {"s.conf": "[program:api]\ncommand=/bin/api %(process_num)d\n"
                                      f"numprocs={numprocs}\n"
                                      "process_name=api-%(process_num)d\n"})
    assert len(many.drafts) == 64 and f"not {numprocs}: the first 64" in \
        _problems(many)["[program:api] numprocs"]


def test_too_many_processes_of_one_app_each_are_capped_and_reported(tmp_path: Path) -> None:
    """Processes that differ by %(process_num) become one app each: no more than the
    most instances of one app either, the first 64 by process_num."""
    result = _read(tmp_path, {"s.conf": "[program:api]\ncommand=/bin/api --port "
                                        "%(process_num)d\nnumprocs=100\nnumprocs_start=1\n"
                                        "process_name=%(program_name)s-%(process_num)d\n"})
    assert [d.app.name for d in result.drafts] == [f"api-{n}" for n in range(1, 65)]
    assert all(d.app.instances == 1 for d in result.drafts)
    assert _problems(result) == {"[program:api] numprocs": (
        "tenure runs at most 64 processes of a program, not 100: the first 64 "
        "(process_num 1 to 64) are imported")}


@pytest.mark.parametrize(("value", "timeout", "problem"), [
    ("604800", 604800.0, None),
    ("700000", 604800.0, "tenure waits at most 604800 s (a week) for an app to stop, "
                         "not 700000"),
    ("-5", 10.0, "tenure needs a stop timeout > 0, not '-5'; the default applies"),
    ("soon", 10.0, "not an integer: 'soon'; the default applies"),
])
def test_stop_wait_beyond_a_week_is_capped_and_reported(
        tmp_path: Path, value: str, timeout: float, problem: str | None) -> None:
    conf = tmp_path / "s.conf"
    conf.write_text(f"[program:w]\ncommand=/bin/w\nstopwaitsecs={value}\n")
    result = read_supervisord(str(conf), CTX)
    assert result.drafts[0].app.stop.timeout == timeout
    assert _problems(result).get("[program:w] stopwaitsecs") == problem
    stop = import_files([str(conf)], "s").config.stacks["s"].apps["w"].stop
    assert stop.timeout == timeout  # and what it wrote passed tenure plan's parser


def test_command_sees_program_environment_but_environment_does_not(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[supervisord]
environment=TZ=UTC
[program:x]
environment=APP_DIR=/srv/x
command=%(ENV_APP_DIR)s/bin/run --tz %(ENV_TZ)s --host %(host_node_name)s
directory=%(ENV_APP_DIR)s
"""})
    app = result.drafts[0].app
    assert app.command == ("/srv/x/bin/run", "--tz", "UTC", "--host", "box1")
    assert app.cwd == "/srv/x"
    assert app.env == {"TZ": "UTC", "APP_DIR": "/srv/x"}
    notes = [f.problem for f in _notes(result)]
    assert len(notes) == 1 and "%(host_node_name)s" in notes[0]


def test_a_variable_that_cannot_be_expanded_is_left_out_alone(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[supervisord]
environment=D=%(ENV_NOPE_D)s,E=1
[program:c]
command=sleep 3
environment=P="100%%",Q=%(ENV_NOPE_UNSET)s,H=%(ENV_HOME)s
startsecs=%(ENV_NOPE_S)s
"""})
    assert result.drafts[0].app.env == {"E": "1", "P": "100%", "H": "/home/ops"}
    problems = sorted((f.origin.key, f.problem) for f in result.findings
                      if f.kind is FindingKind.NOT_MAPPED)
    assert problems == [
        ("[program:c] environment", "Q is not imported: %(ENV_NOPE_UNSET)s cannot be "
         "expanded: NOPE_UNSET is set neither in the environment `tenure import` runs in "
         "nor by `environment`"),
        ("[program:c] startsecs", "%(ENV_NOPE_S)s cannot be expanded: NOPE_S is set "
         "neither in the environment `tenure import` runs in nor by `environment`; the "
         "default applies"),
        ("[supervisord] environment", "D is not imported: %(ENV_NOPE_D)s cannot be "
         "expanded: NOPE_D is set neither in the environment `tenure import` runs in nor "
         "by `environment`")]
    notes = [f.problem for f in _notes(result)]
    assert len(notes) == 1 and notes[0].startswith("%(ENV_HOME)s was expanded")


def test_an_environment_that_cannot_be_split_is_left_out_and_says_so(
        tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": "[program:c]\ncommand=sleep 3\n"
                                        "environment=A=%(ENV_HOME)s,B\n"})
    assert result.drafts[0].app.env == {}
    assert _problems(result)["[program:c] environment"] == (
        "not KEY=value pairs separated by commas: 'A=/home/ops,B'; none of its variables "
        "is imported")
    assert _problems(result, FindingKind.NOTE) == {}


def test_unusable_values_are_reported_and_defaults_kept(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[program:x]
command=/bin/x
startsecs=soon
stopsignal=SIGFOO
stopwaitsecs=0
directory=relative/dir
environment=BROKEN
"""})
    app = result.drafts[0].app
    assert (app.ready.delay, app.stop.signal, app.stop.timeout, app.cwd, app.env) == \
        (1.0, "TERM", 10.0, None, {})
    assert set(_problems(result)) == {f"[program:x] {k}" for k in (
        "startsecs", "stopsignal", "stopwaitsecs", "directory", "environment")}


@pytest.mark.parametrize(("body", "problem"), [
    ("directory=/x\n", "has no command"),
    ("command=/bin/x '\n", "No closing quotation"),
    ("command=date +%s\n", "write '%%'"),
    ("command=%(ENV_NOPE)s\n", "cannot be expanded"),
])
def test_a_program_without_a_usable_command_is_not_imported(
        tmp_path: Path, body: str, problem: str) -> None:
    result = _read(tmp_path, {"s.conf": "[program:x]\n" + body})
    assert result.drafts == []
    assert any(problem in p for p in _problems(result).values()), result.findings


def test_settings_without_equivalent_are_reported(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[program:x]
command=/bin/x
autostart=false
autorestart=unexpected
exitcodes=0,3
stopasgroup=false
killasgroup=true
stdout_logfile=/var/log/x.log
"""})
    problems = _problems(result)
    assert set(problems) == {f"[program:x] {k}" for k in (
        "autostart", "exitcodes", "stopasgroup", "stdout_logfile")}
    assert problems["[program:x] stdout_logfile"].startswith("tenure keeps")


def test_user_and_umask_become_user_and_umask(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": f"""
[program:named]
command=/bin/x
user=%(ENV_TIER)s-web
umask=022

[program:numbered]
command=/bin/x
user=0
umask=0o7

[program:unusable]
command=/bin/x
user={unnamed_uid()}
umask=1000

[program:badname]
command=/bin/x
user=web server
"""})
    run_as = {d.app.name: d.app.run_as for d in result.drafts}
    assert run_as["named"] == RunAs(user="prod-web", umask=0o022)
    assert run_as["numbered"] == RunAs(user="root", umask=0o007)
    assert run_as["unusable"] == run_as["badname"] == RunAs()
    problems = _problems(result)
    assert set(problems) == {"[program:unusable] user", "[program:unusable] umask",
                             "[program:badname] user"}
    assert "has no name on this machine" in problems["[program:unusable] user"]
    assert "0 to 777" in problems["[program:unusable] umask"]
    assert "invalid user name 'web server'" in problems["[program:badname] user"]
    notes = _notes(result)
    assert any("user id 0 is 'root' on this machine" in f.problem for f in notes), notes
    assert {f.origin.key for f in notes if "HOME, USER and LOGNAME" in f.problem} == \
        {"[program:named] user", "[program:numbered] user"}


def unnamed_uid() -> int:
    """A uid with no name in this machine's user database."""
    return next(u for u in range(2**31 - 2, 2**31 - 100, -1) if not _named(u))


def _named(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def test_autorestart_false_gives_never_and_exit_codes_do_not_matter(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": "[program:x]\ncommand=/bin/x\nautorestart=false\n"
                                        "exitcodes=0,3\nstartsecs=0\n"})
    assert result.drafts[0].app.restart is RestartMode.NEVER
    assert _problems(result) == {}   # (startsecs=0: supervisord retries no start either)


# -- files, groups, sections -------------------------------------------------------------

def test_includes_are_relative_to_the_including_file_and_here_is_per_file(
        tmp_path: Path) -> None:
    result = _read(tmp_path, {
        "etc/supervisord.conf": "[include]\nfiles = conf.d/*.conf extra/none-*.conf\n"
                                "[program:main]\ncommand=%(here)s/bin/main\n",
        "etc/conf.d/b.conf": "[program:b]\ncommand=%(here)s/bin/b\n",
        "etc/conf.d/a.conf": "[program:a]\ncommand=/bin/a\n",
    })
    commands = {d.app.name: d.app.command[0] for d in result.drafts}
    assert commands == {"main": f"{tmp_path}/etc/bin/main", "a": "/bin/a",
                        "b": f"{tmp_path}/etc/conf.d/bin/b"}
    [note] = _notes(result)
    assert "no file matches 'extra/none-*.conf'" in note.problem
    origin = next(d.origin for d in result.drafts if d.app.name == "b")
    assert (origin.file, origin.line) == (f"{tmp_path}/etc/conf.d/b.conf", 1)


def test_groups_become_stacks_and_their_priority_is_reported(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[group:shop]
programs=web, db ,ghost
priority=10
[program:web]
command=/bin/web
[program:db]
command=/bin/db
[program:lone]
command=/bin/lone
"""})
    assert {d.app.name: d.app.stack for d in result.drafts} == \
        {"web": "shop", "db": "shop", "lone": ""}
    problems = _problems(result)
    assert problems["[group:shop] programs"] == "names no [program:ghost]"
    assert "orders whole groups" in problems["[group:shop] priority"]


def test_a_program_in_two_groups_is_imported_in_the_first(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": "[group:a]\nprograms=x\n[group:b]\nprograms=x\n"
                                        "[program:x]\ncommand=/bin/x\n"})
    assert [(d.app.name, d.app.stack) for d in result.drafts] == [("x", "a")]
    assert _problems(result) == {"[group:b] programs": "x is already in [group:a]; it is "
                                                       "imported there only"}


def test_daemon_sections_are_reported_once_each(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": """
[unix_http_server]
file=/run/s.sock
[supervisord]
environment=A=1
[supervisorctl]
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = x
[fcgi-program:f]
command=/bin/f
[something]
a=1
[program:x]
command=/bin/x
"""})
    assert set(_problems(result)) == {"[unix_http_server]", "[supervisorctl]",
                                      "[rpcinterface:supervisor]", "[fcgi-program:f]",
                                      "[something]"}
    assert result.drafts[0].app.env == {"A": "1"}  # [supervisord] had only environment


@pytest.mark.parametrize(("files", "line", "problem"), [
    ({"s.conf": "[program:x]\ncommand=/bin/x\nwhat is this\n"}, 3, "not a 'key = value'"),
    ({"s.conf": "[include]\n"}, 1, "has no 'files' key"),
    ({"s.conf": "[include]\nfiles=bad.conf\n", "bad.conf": "orphan=1\n"}, 1,
     "outside any [section]"),
    ({"s.conf": "[program:x\ncommand=sleep 1\n"}, 1, "a malformed section header"),
])
def test_unparsable_files_are_config_invalid_with_file_and_line(
        tmp_path: Path, files: dict[str, str], line: int, problem: str) -> None:
    with pytest.raises(ConfigInvalid) as e:
        _read(tmp_path, files)
    assert e.value.data["line"] == line
    assert problem in e.value.data["problem"]


def test_a_leading_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "bom.conf").write_bytes(b"\xef\xbb\xbf[program:a]\ncommand=sleep 1\n")
    result = read_supervisord(str(tmp_path / "bom.conf"), CTX)
    assert [d.app.command for d in result.drafts] == [("sleep", "1")]


def test_a_missing_file_is_config_invalid(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match="cannot read the file"):
        read_supervisord(str(tmp_path / "nope.conf"), CTX)


X = "[program:x]"


def _retention(tmp_path: Path, keys: str) -> tuple[int | None, dict[str, str]]:
    result = _read(tmp_path, {"s.conf": f"[program:x]\ncommand=/bin/x\n{keys}"})
    return result.drafts[0].app.log_retention, _problems(result)


@pytest.mark.parametrize(("keys", "kept"), [
    ("", None),                                                # tenure's default
    ("stdout_logfile=/var/log/x.log\n", None),                 # sizes not set: default
    ("stdout_logfile_maxbytes=50MB\n", 2 * 550 << 20),         # both streams, 11 files
    ("stdout_logfile_maxbytes=10MB\nredirect_stderr=true\n", 110 << 20),
    ("stdout_logfile_backups=0\nstderr_logfile=NONE\n", 50 << 20),
    ("stderr_logfile_maxbytes=512kb\nstderr_logfile_backups=3\nstdout_logfile=none\n",
     2 << 20),
    ("stdout_logfile_maxbytes=100\nstdout_logfile_backups=0\nredirect_stderr=true\n",
     1 << 20),                                                 # at least 1 MiB
])
def test_log_file_sizes_become_log_retention(tmp_path: Path, keys: str,
                                             kept: int | None) -> None:
    """What supervisord keeps on disk: each kept stream's maxbytes x (backups + 1)."""
    got, problems = _retention(tmp_path, keys)
    assert got == kept
    assert not any(k.endswith(("_maxbytes", "_backups")) for k in problems) or \
        kept == 1 << 20, problems


def test_an_unlimited_log_file_keeps_the_default_and_says_so(tmp_path: Path) -> None:
    got, problems = _retention(tmp_path, "stdout_logfile_maxbytes=0\n")
    assert got is None
    assert "0 (no limit) has no tenure equivalent" in problems[f"{X} stdout_logfile_maxbytes"]
    got, problems = _retention(tmp_path, "stdout_logfile_maxbytes=lots\n")
    assert got == 2 * 550 << 20 and "lots" in problems[f"{X} stdout_logfile_maxbytes"]


def test_start_retries_beyond_a_start_limit_are_capped_and_reported(tmp_path: Path) -> None:
    """start_limit.burst takes at most 1,000,000 starts: more was written as is and the
    import ended in INTERNAL (the config it wrote did not validate)."""
    conf = tmp_path / "s.conf"
    conf.write_text("[program:w]\ncommand=/bin/w\nstartretries=999999\n"
                    "[program:x]\ncommand=/bin/x\nstartretries=2000000\n")
    apps = import_files([str(conf)], "s").config.stacks["s"].apps
    assert (apps["w"].start_limit.burst, apps["x"].start_limit.burst) == \
        (1_000_000, 1_000_000)
    assert _problems(read_supervisord(str(conf), CTX)) == {
        "[program:x] startretries": "startretries = 2,000,000 allows more starts than "
        "tenure's start_limit.burst takes (at most 1,000,000); imported as 1,000,000"}


# -- what programs inherit from the daemon -----------------------------------------------

DAEMON_CONF = """[supervisord]
user=nobody
directory=/srv/app
umask=077
[program:web]
command=python3 server.py --config ./settings.ini
"""


def test_daemon_user_directory_and_umask_are_every_programs_defaults(
        tmp_path: Path) -> None:
    """Regression: `[supervisord] user`, `directory` and `umask` were dropped as settings
    "tenure's daemons need none of". supervisord drops to `user` before starting
    anything, and as a daemon changes into `directory` and sets `umask`: every program
    ran as nobody, in /srv/app (where ./settings.ini is), with umask 077."""
    result = _read(tmp_path, {"s.conf": DAEMON_CONF})
    app = result.drafts[0].app
    assert app.run_as == RunAs(user="nobody", umask=0o077)
    assert app.cwd == "/srv/app"
    assert _problems(result) == {}
    notes = _problems(result, FindingKind.NOTE)
    assert set(notes) == {"[supervisord] user", "[supervisord] directory",
                          "[supervisord] umask"}
    assert "user = 'nobody'" in notes["[supervisord] user"]
    assert "cwd = '/srv/app'" in notes["[supervisord] directory"]
    assert 'umask = "0077"' in notes["[supervisord] umask"]
    toml = import_files([str(tmp_path / "s.conf")], "s").text
    assert 'user = "nobody"' in toml and 'cwd = "/srv/app"' in toml


def test_the_daemons_raised_limits_are_reported_as_every_programs(tmp_path: Path) -> None:
    """minfds and minprocs raised supervisord's limits, which its programs inherited:
    not "settings tenure's daemons need none of"."""
    result = _read(tmp_path, {"s.conf": "[supervisord]\nminfds=4096\nminprocs=400\n"
                                        "logfile=/var/log/s.log\n[program:web]\n"
                                        "command=web\n"})
    problems = _problems(result)
    assert "set `limits.nofile` on the apps" in problems["[supervisord] minfds"]
    assert "set `limits.nproc` on the apps" in problems["[supervisord] minprocs"]
    assert problems["[supervisord]"].endswith("(logfile)"), problems


def test_a_programs_own_user_directory_and_umask_win_over_the_daemons(
        tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": DAEMON_CONF + "user=root\ndirectory=/opt/web\n"
                                                      "umask=022\n"})
    app = result.drafts[0].app
    assert app.run_as == RunAs(user="root", umask=0o022)
    assert app.cwd == "/opt/web"
    assert any("could not switch to 'root'" in f.problem for f in result.findings
               if f.origin.key == "[program:web] user" and f.kind is FindingKind.NOTE)


def test_in_the_foreground_the_daemon_directory_and_umask_do_not_apply(
        tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": DAEMON_CONF.replace(
        "[supervisord]\n", "[supervisord]\nnodaemon=true\n")})
    app = result.drafts[0].app
    assert app.run_as == RunAs(user="nobody")
    assert app.cwd is None
    problems = _problems(result)
    assert problems["[supervisord] directory"].startswith(
        "supervisord applies it only when it daemonizes, and nodaemon is true")
    assert "umask" in problems["[supervisord] umask"]
    assert problems["[supervisord]"].endswith("(nodaemon)")


def test_a_daemon_user_tenure_cannot_name_is_reported_with_what_it_meant(
        tmp_path: Path) -> None:
    uid = next(u for u in range(60000, 70000) if not _has_uid(u))
    result = _read(tmp_path, {"s.conf": f"[supervisord]\nuser={uid}\ndirectory=srv\n"
                                        "[program:w]\ncommand=/bin/w\n"})
    assert result.drafts[0].app.run_as == RunAs()
    problems = _problems(result)
    assert problems["[supervisord] user"].startswith(f"every program ran as '{uid}'")
    assert problems["[supervisord] directory"].startswith("every program ran in 'srv'")


def _has_uid(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


# -- values supervisord itself cannot format ---------------------------------------------

@pytest.mark.parametrize(("spec", "start", "problem"), [
    ("c", 1114112, "%(process_num)c: %c arg not in range(0x110000)"),
    ("099999999999d", 0, "%(process_num)099999999999d: a width over 1000 characters"),
    (".99999999999d", 0, "%(process_num).99999999999d: a precision over 1000 characters"),
    ("9" * 5000 + "d", 0, f"%(process_num){'9' * 5000}d: a width over 1000 characters"),
])
@pytest.mark.parametrize("key", ["command", "environment", "process_name", "directory"])
def test_a_conversion_supervisord_cannot_format_is_reported_not_a_crash(
        tmp_path: Path, spec: str, start: int, problem: str, key: str) -> None:
    """Regression: `%(process_num)c` past Unicode raised OverflowError and a huge width
    MemoryError out of the import (INTERNAL); supervisord refuses such values too."""
    value = {"command": f"/bin/echo %(process_num){spec}",
             "environment": f"N=%(process_num){spec}",
             "process_name": f"w%(process_num){spec}",
             "directory": f"/srv/%(process_num){spec}"}[key]
    command = "" if key == "command" else "command=/bin/echo hi\n"
    result = _read(tmp_path, {"s.conf": f"[program:w]\n{command}{key}={value}\n"
                                        f"numprocs_start={start}\n"})
    assert problem in _problems(result)[f"[program:w] {key}"]
    assert len(result.drafts) == (0 if key == "command" else 1)
    if key != "command":  # the rest is imported, and what is written passes the parser
        import_files([str(tmp_path / "s.conf")], "s")


def test_a_width_up_to_the_limit_is_formatted() -> None:
    assert expand("%(process_num)01000d", {"process_num": 7}) == "0" * 999 + "7"


# -- signalling the main process or the group --------------------------------------------

@pytest.mark.parametrize(("keys", "note"), [
    ("", "stopasgroup and killasgroup are not set, so supervisord sent stopsignal and "
         "SIGKILL to the program's main process only; tenure signals the app's whole "
         "process group, the processes it started too"),
    ("killasgroup=true\n", "stopasgroup is not set, so supervisord sent stopsignal to the "
                           "program's main process only (killasgroup: SIGKILL to the "
                           "group); tenure signals the app's whole process group, the "
                           "processes it started too"),
    ("stopasgroup=true\n", None),
    ("stopasgroup=true\nkillasgroup=true\n", None),
    ("killasgroup=false\n", None),   # reported as not mapped instead
    ("killasgroup=maybe\n", None),   # reported as not mapped instead
])
def test_supervisords_default_of_signalling_the_main_process_is_noted(
        tmp_path: Path, keys: str, note: str | None) -> None:
    """Regression: supervisord signals only a program's main process unless
    stopasgroup (or, for SIGKILL, killasgroup) is true; the import reported the keys
    only when written, so the default became whole-group signalling without a word."""
    result = _read(tmp_path, {"s.conf": f"[program:w]\ncommand=/bin/w\n{keys}"})
    found = [f.problem for f in result.findings if f.origin.key == "[program:w]"]
    assert found == ([note] if note else [])
    if "false" in keys or "maybe" in keys:
        assert "[program:w] killasgroup" in _problems(result)


def test_a_program_not_imported_gets_no_note_on_signals(tmp_path: Path) -> None:
    result = _read(tmp_path, {"s.conf": "[program:w]\nnumprocs=2\n"})
    assert not any(_signals_note(f) for f in result.findings)
