"""PM2 ecosystem files → drafts: the command PM2 would run, times in milliseconds,
restart limits and backoff, and what is reported as not mapped. ``node`` is faked here;
tests/integration/backend/test_import_node.py runs the real one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.importers import import_files
from backend.importers.model import Context, FindingKind, SourceResult
from backend.importers.pm2 import read_pm2
from backend.model import App, Backoff, ReadyKind, RestartMode, RunAs, StartLimit
from protocol.errors import ConfigInvalid


def _read(tmp_path: Path, data: Any, name: str = "ecosystem.json") -> SourceResult:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return read_pm2(str(path), Context(environ={}, hostname="h"))


def _app(tmp_path: Path, **conf: Any) -> tuple[App, dict[str, str]]:
    result = _read(tmp_path, {"apps": [conf]})
    [draft] = result.drafts
    return draft.app, {f.origin.key: f.problem for f in result.findings
                       if f.kind is FindingKind.NOT_MAPPED}


@pytest.mark.parametrize(("conf", "command"), [
    ({"script": "server.js"}, ("node", "{d}/server.js")),
    ({"script": "app.py", "args": "--x 1"}, ("python3", "{d}/app.py", "--x", "1")),
    ({"script": "run.sh", "cwd": "/srv"}, ("bash", "/srv/run.sh")),
    ({"script": "./bin/srv", "args": ["-p", 80]}, ("{d}/bin/srv", "-p", "80")),
    ({"script": "npm", "args": "run start"}, ("npm", "run", "start")),
    ({"script": "x.js", "interpreter": "none"}, ("x.js",)),  # not in cwd: from PATH
    ({"script": "x.js", "exec_interpreter": "/opt/node/bin/node",
      "node_args": "--inspect --max-old-space-size=64"},
     ("/opt/node/bin/node", "--inspect", "--max-old-space-size=64", "{d}/x.js")),
    ({"script": "x.rb", "interpreter_args": ["-W0"]}, ("ruby", "-W0", "{d}/x.rb")),
    ({"script": "python worker.py --fast"}, ("bash", "-c", "python worker.py --fast")),
    ({"cmd": "server.js"}, ("node", "{d}/server.js")),
    ({"script": "t.js", "args": "--name=\"a b\" 'c d' \"e f\""},
     ("node", "{d}/t.js", '--name="a b"', "c d", "e f")),
])
def test_command_is_built_as_pm2_builds_it(
        tmp_path: Path, conf: dict[str, Any], command: tuple[str, ...]) -> None:
    app, _ = _app(tmp_path, **conf)
    assert app.command == tuple(c.replace("{d}", str(tmp_path)) for c in command)


@pytest.mark.parametrize(("conf", "flags", "problems"), [
    ({"interpreter_args": "--b", "node_args": "--a"}, ["--a"],
     {"interpreter_args": "PM2 uses node_args instead"}),
    ({"interpreterArgs": ["--b"]}, ["--b"], {}),
    ({"nodeArgs": "--c", "interpreterArgs": "--b"}, ["--b"],
     {"nodeArgs": "PM2 uses interpreterArgs instead"}),
    ({"node_args": "", "interpreter_args": "--b"}, ["--b"], {}),  # "" is unset in PM2
])
def test_node_args_and_its_aliases_are_read_in_pm2s_order(
        tmp_path: Path, conf: dict[str, Any], flags: list[str],
        problems: dict[str, str]) -> None:
    app, found = _app(tmp_path, script="x.js", **conf)
    assert app.command == ("node", *flags, f"{tmp_path}/x.js")
    assert found == {f"apps[0].{k}": v for k, v in problems.items()}


@pytest.mark.parametrize(("conf", "command", "why"), [
    ({"script": "bin/srv"}, ("{d}/bin/srv",), "without an interpreter"),
    ({"script": "x.js", "interpreter": "none"}, ("x.js",), "without an interpreter"),
    ({"script": "node x.js"}, ("bash", "-c", "node x.js"), "a whole command line"),
])
def test_node_args_without_an_interpreter_are_reported(
        tmp_path: Path, conf: dict[str, Any], command: tuple[str, ...], why: str) -> None:
    app, problems = _app(tmp_path, node_args="--inspect", **conf)
    assert app.command == tuple(c.replace("{d}", str(tmp_path)) for c in command)
    assert list(problems) == ["apps[0].node_args"]
    assert why in problems["apps[0].node_args"]


def test_a_bare_program_name_found_in_cwd_is_taken_from_there(tmp_path: Path) -> None:
    (tmp_path / "server").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(56))   # a binary
    app, _ = _app(tmp_path, script="server", args="-v")
    assert app.command == (f"{tmp_path}/server", "-v")


@pytest.mark.parametrize("script", ["bin/www", "server.mjs", "index.cjs"])
def test_a_text_script_of_no_known_extension_runs_with_node_as_under_pm2(
        tmp_path: Path, script: str) -> None:
    """Regression: PM2 runs a script whose extension it does not know with node unless
    the file is a binary (lib/Common.js, isbinaryfile.js); the import ran it directly
    (Express's bin/www, an ES module: no start), and called node_args unused."""
    (tmp_path / script).parent.mkdir(exist_ok=True)
    (tmp_path / script).write_text("#!/usr/bin/env node\nrequire('./app')\n")
    result = _read(tmp_path, {"apps": [{"script": script, "node_args": "--max-old-space-size=64"}]})
    [draft] = result.drafts
    assert draft.app.command == ("node", "--max-old-space-size=64", f"{tmp_path}/{script}")
    assert [(f.kind, f.origin.key) for f in result.findings] == [
        (FindingKind.NOTE, "apps[0].script")]


def test_a_script_found_on_path_is_judged_and_given_as_found(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tool").write_text("console.log(1)\n")   # npm's own launcher is such a file
    (bin_dir / "tool").chmod(0o755)
    path = tmp_path / "ecosystem.json"
    path.write_text(json.dumps({"apps": [{"script": "tool", "args": "start"}]}))
    found = read_pm2(str(path), Context(environ={"PATH": str(bin_dir)}, hostname="h"))
    assert found.drafts[0].app.command == ("node", f"{bin_dir}/tool", "start")
    nowhere = read_pm2(str(path), Context(environ={}, hostname="h"))
    assert nowhere.drafts[0].app.command == ("tool", "start")   # PATH at run time


def test_name_cwd_env_and_port(tmp_path: Path) -> None:
    app, problems = _app(tmp_path, script="workers/mail.py", cwd="svc", port=8080,
                         env={"N": 1, "F": 1.5, "B": False, "S": "s", "NUL": None,
                              "OBJ": {"a": 1}})
    assert app.name == "mail"  # PM2: the script's file name without extension
    assert app.cwd == f"{tmp_path}/svc"
    assert app.env == {"N": "1", "F": "1.5", "B": "false", "S": "s", "NUL": "null",
                       "PORT": "8080", "PYTHONUNBUFFERED": "1"}
    assert list(problems) == ["apps[0].env.OBJ"]


@pytest.mark.parametrize(("conf", "name"), [
    ({"script": "srv/web-api.js"}, "web-api"),
    ({"script": "srv/web-api.js", "name": ""}, "web-api"),  # PM2: an empty name is none
    ({"script": ".env.js"}, ".env"),                        # a leading dot is no extension
    ({"script": "bin/worker"}, "worker"),
    # PM2 names the app before it turns a command line into bash -c
    ({"script": "node scripts/report.js --nightly"}, "report"),
    ({"script": "npm run start"}, "npm run start"),
])
def test_an_unnamed_app_is_named_as_pm2_names_it(
        tmp_path: Path, conf: dict[str, Any], name: str) -> None:
    app, problems = _app(tmp_path, **conf)
    assert app.name == name and problems == {}


def test_unnamed_apps_get_valid_unique_names_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "ecosystem.json"
    path.write_text(json.dumps({"apps": [
        {"script": "api/server.js"}, {"script": "admin/server.py"},
        {"script": "tools/img@resize.py"}]}))
    result = import_files([str(path)], "s")
    assert sorted(result.config.stacks["s"].apps) == ["img-resize", "server", "server-2"]
    assert [str(f) for f in result.findings if f.kind is FindingKind.NOTE] == [
        f"{path}: apps[1]: app 'server' is named 'server-2' in tenure.toml",
        f"{path}: apps[2]: app 'img@resize' is named 'img-resize' in tenure.toml"]


def test_pm2_defaults(tmp_path: Path) -> None:
    app, problems = _app(tmp_path, script="a.js")
    assert app.restart is RestartMode.ALWAYS          # autorestart, on any exit
    assert app.ready.kind is ReadyKind.NONE           # PM2 calls it online at once
    assert (app.stop.signal, app.stop.timeout) == ("INT", 1.6)
    assert app.backoff == Backoff(reset_after=1.0)    # min_uptime 1000 ms
    assert app.start_limit.burst == 16                # max_restarts
    assert problems == {}


def test_restart_limits_and_delays(tmp_path: Path) -> None:
    app, _ = _app(tmp_path, script="a.js", max_restarts=3, min_uptime="2s",
                  restart_delay=1500, kill_timeout=8000)
    assert (app.ready.kind, app.ready.delay) == (ReadyKind.DELAY, 2.0)
    assert app.backoff == Backoff(initial=1.5, max=1.5, factor=1.0, reset_after=2.0)
    assert app.start_limit == StartLimit(burst=3, interval=3 * 2.0 + 1.5 * 2 + 1)
    assert app.stop.timeout == 8.0


def test_kill_timeout_beyond_a_week_is_capped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "ecosystem.json"
    path.write_text(json.dumps({"apps": [{"script": "a.js", "kill_timeout": "192h"}]}))
    result = import_files([str(path)], "s")
    assert result.config.stacks["s"].apps["a"].stop.timeout == 604800.0
    assert [(f.origin.key, f.problem) for f in result.findings] == [(
        "apps[0].kill_timeout",
        "tenure waits at most 604800 s (a week) for an app to stop, not 691200 s")]


def test_exponential_backoff_wins_over_a_fixed_delay(tmp_path: Path) -> None:
    app, problems = _app(tmp_path, script="a.js", exp_backoff_restart_delay=100,
                         restart_delay=5000, min_uptime=500)
    assert app.backoff == Backoff(initial=0.1, max=15.0, factor=1.5, reset_after=30.0)
    assert "exp_backoff_restart_delay instead" in problems["apps[0].restart_delay"]


@pytest.mark.parametrize(("conf", "restart"), [
    ({"autorestart": False}, RestartMode.NEVER),
    ({"autorestart": "false"}, RestartMode.NEVER),
    ({"max_restarts": 0}, RestartMode.NEVER),
    ({"stop_exit_codes": [0]}, RestartMode.ON_FAILURE),
    ({"stop_exit_codes": 0}, RestartMode.ON_FAILURE),
])
def test_restart_policy(tmp_path: Path, conf: dict[str, Any], restart: RestartMode) -> None:
    app, problems = _app(tmp_path, script="a.js", **conf)
    assert app.restart is restart and problems == {}
    if restart is RestartMode.NEVER:
        assert (app.backoff, app.start_limit) == (Backoff(), StartLimit())


@pytest.mark.parametrize(("codes", "restart", "problem"), [
    # PM2 does not restart after 0 or 2; on-failure is tenure's nearest: it agrees on 0
    ([0, 2], RestartMode.ON_FAILURE, "restart = \"on-failure\" is written: tenure "
     "restarts the app after exit status 2 too (only 0 counts as expected)"),
    ([3, 0, 2], RestartMode.ON_FAILURE, "restart = \"on-failure\" is written: tenure "
     "restarts the app after exit status 2 or 3 too (only 0 counts as expected)"),
    # PM2 restarts after 0 but not after 2: always agrees on every status but 2
    ([2], RestartMode.ALWAYS, "restart = \"always\" is written: tenure restarts the "
     "app after exit status 2 too (it has no exit statuses that stop restarts)"),
    (2, RestartMode.ALWAYS, "restart = \"always\" is written: tenure restarts the "
     "app after exit status 2 too (it has no exit statuses that stop restarts)"),
    (["x"], RestartMode.ALWAYS, "must be exit statuses (whole numbers), not ['x']"),
])
def test_other_stop_exit_codes_are_reported_as_the_config_has_them(
        tmp_path: Path, codes: Any, restart: RestartMode, problem: str) -> None:
    app, problems = _app(tmp_path, script="a.js", stop_exit_codes=codes)
    assert app.restart is restart
    assert problems == {"apps[0].stop_exit_codes": problem}


@pytest.mark.parametrize("conf", [{"autorestart": False}, {"max_restarts": 0}])
def test_stop_exit_codes_do_not_matter_when_pm2_never_restarts(
        tmp_path: Path, conf: dict[str, Any]) -> None:
    app, problems = _app(tmp_path, script="a.js", stop_exit_codes=[0, 2], **conf)
    assert app.restart is RestartMode.NEVER and problems == {}


@pytest.mark.parametrize(("instances", "expected", "reported"), [
    (3, 3, False), ("2", 2, False), ("max", 1, True), (0, 1, True), (-1, 1, True),
    (200, 64, True),
])
def test_instances(tmp_path: Path, instances: Any, expected: int, reported: bool) -> None:
    app, problems = _app(tmp_path, script="a.py", instances=instances)
    assert app.instances == expected
    assert ("apps[0].instances" in problems) is reported


def test_node_apps_with_instances_are_cluster_mode_unless_fork(tmp_path: Path) -> None:
    _, implied = _app(tmp_path, script="a.js", instances=2)
    _, fork = _app(tmp_path, script="a.js", instances=2, exec_mode="fork")
    _, python = _app(tmp_path, script="a.py", instances=2)
    assert "cluster mode" in implied["apps[0].exec_mode"]
    assert "apps[0].exec_mode" not in fork and "apps[0].exec_mode" not in python


def test_keys_without_equivalent_are_reported(tmp_path: Path) -> None:
    result = _read(tmp_path, {"apps": [{
        "script": "a.js", "username": "ops", "watch": True, "out_file": "/x", "env_staging": {},
        "max_memory_restart": "1G", "cron_restart": "* * * * *", "wait_ready": True,
        "treekill": False, "vizion": False}], "deploy": {}})
    problems = {f.origin.key: f.problem for f in result.findings}
    assert set(problems) == {"deploy", *(f"apps[0].{k}" for k in (
        "username", "watch", "out_file", "env_staging", "max_memory_restart", "cron_restart",
        "wait_ready", "treekill", "vizion"))}
    assert "--env staging" in problems["apps[0].env_staging"]


@pytest.mark.parametrize("conf", [
    {"watch": False}, {"watch": None}, {"watch": 0}, {"watch": ""},
    # watch settings have no effect while PM2 does not watch
    {"watch": False, "ignore_watch": ["node_modules"], "watch_delay": 1000,
     "watch_options": {"followSymlinks": False}},
    {"wait_ready": False}, {"max_memory_restart": 0}, {"cron_restart": ""},
    {"merge_logs": False, "combine_logs": False, "time": False, "disable_logs": False},
    {"autorestart": True, "treekill": True},
])
def test_keys_off_as_tenure_is_are_not_reported(tmp_path: Path,
                                                conf: dict[str, Any]) -> None:
    _, problems = _app(tmp_path, script="a.js", **conf)
    assert problems == {}


@pytest.mark.parametrize("watch", [True, ["src"], [], "src"])
def test_a_watch_that_pm2_does_is_reported_with_its_settings(tmp_path: Path,
                                                             watch: Any) -> None:
    """PM2 takes watch as JavaScript does: an empty array is true (it watches cwd)."""
    _, problems = _app(tmp_path, script="a.js", watch=watch, ignore_watch=["x"])
    assert set(problems) == {"apps[0].watch", "apps[0].ignore_watch"}


@pytest.mark.parametrize(("conf", "run_as"), [
    ({"uid": "www"}, RunAs(user="www")),
    ({"user": "www", "gid": "web"}, RunAs(user="www", group="web")),  # user: uid's alias
    ({"uid": 0, "gid": "0"}, RunAs(user="root", group="root")),  # ids: their names here
])
def test_uid_and_gid_become_user_and_group(tmp_path: Path, conf: dict[str, Any],
                                           run_as: RunAs) -> None:
    result = _read(tmp_path, {"apps": [{"script": "a.js", **conf}]})
    assert result.drafts[0].app.run_as == run_as
    notes = {f.origin.key: f.problem for f in result.findings}
    if conf.get("uid") == 0:
        assert notes == {
            "apps[0].uid": "user id 0 is 'root' on this machine, where it was imported; "
                           "tenure.toml names the user",
            "apps[0].gid": "group id 0 is 'root' on this machine, where it was imported; "
                           "tenure.toml names the group"}
    else:
        assert notes == {}


@pytest.mark.parametrize(("conf", "key", "problem"), [
    ({"gid": "web"}, "gid", "needs uid"),
    ({"uid": True}, "uid", "must be a user name or id"),
    ({"uid": "two words"}, "uid", "invalid user name"),
    ({"uid": 2**40}, "uid", "has no name on this machine"),
    ({"uid": "www", "user": "web"}, "user", "PM2 uses uid instead"),
])
def test_unusable_uid_and_gid_are_reported(tmp_path: Path, conf: dict[str, Any], key: str,
                                           problem: str) -> None:
    app, problems = _app(tmp_path, script="a.js", **conf)
    assert problem in problems[f"apps[0].{key}"], problems
    assert app.run_as.group is None and app.run_as.user in (None, "www")


def test_unusable_values_are_reported_and_defaults_kept(tmp_path: Path) -> None:
    app, problems = _app(tmp_path, script="a.js", min_uptime="soon", kill_timeout=0,
                         max_restarts="many", name=5)
    assert app.name == "a" and app.stop.timeout == 1.6 and app.start_limit.burst == 16
    assert set(problems) == {"apps[0].min_uptime", "apps[0].kill_timeout",
                             "apps[0].max_restarts", "apps[0].name"}


def test_file_shapes(tmp_path: Path) -> None:
    assert [d.app.name for d in _read(tmp_path, [{"script": "a.js"}, {"script": "b.js"}])
            .drafts] == ["a", "b"]
    assert [d.app.name for d in _read(tmp_path, {"script": "one.js"}).drafts] == ["one"]
    missing = _read(tmp_path, {"apps": [{"name": "x"}, "text"]})
    assert missing.drafts == []
    assert {f.origin.key for f in missing.findings} == {"apps[0].script", "apps[1]"}
    with pytest.raises(ConfigInvalid, match="must be a list of apps"):
        _read(tmp_path, {"apps": 3})


def test_config_js_goes_through_node_and_its_errors_are_config_invalid(
        tmp_path: Path) -> None:
    path = tmp_path / "ecosystem.config.js"
    path.write_text("module.exports = {}")
    calls: list[tuple[str, float]] = []

    def fake_node(file: str, script: str, timeout: float) -> str:
        calls.append((file, timeout))
        return json.dumps({"apps": [{"script": "srv.js"}]})

    result = read_pm2(str(path), Context(environ={}, hostname="h", run_node=fake_node,
                                         node_timeout=3.0))
    assert calls == [(str(path), 3.0)]
    assert result.drafts[0].app.name == "srv"
    with pytest.raises(ConfigInvalid, match="node returned no JSON"):
        read_pm2(str(path), Context(run_node=lambda *_: "undefined"))


def test_json_with_a_byte_order_mark_is_read_without_node(tmp_path: Path) -> None:
    path = tmp_path / "process.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"apps": [{"script": "a.js"}]}).encode())

    def no_node(file: str, script: str, timeout: float) -> str:
        raise ConfigInvalid("reading it needs `node` on PATH", {})

    result = read_pm2(str(path), Context(environ={}, hostname="h", run_node=no_node))
    assert [d.app.name for d in result.drafts] == ["a"]


def test_json_that_is_not_javascript_either_reports_the_json_error(tmp_path: Path) -> None:
    path = tmp_path / "process.json"
    path.write_text('{\n  "apps": [\n    {"script": }\n  ]\n}\n')

    def failing_node(file: str, script: str, timeout: float) -> str:
        raise ConfigInvalid("node could not read it", {})

    with pytest.raises(ConfigInvalid) as e:
        read_pm2(str(path), Context(run_node=failing_node))
    assert (e.value.data["line"], e.value.data["file"]) == (3, str(path))
    assert "not valid JSON" in e.value.data["problem"]


def test_max_restarts_beyond_a_start_limit_is_capped_and_reported(tmp_path: Path) -> None:
    """start_limit.burst takes at most 1,000,000 starts: more was written as is and the
    import ended in INTERNAL (the config it wrote did not validate)."""
    path = tmp_path / "ecosystem.json"
    path.write_text(json.dumps({"apps": [{"script": "a.js", "max_restarts": 5_000_000}]}))
    result = import_files([str(path)], "s")
    assert result.config.stacks["s"].apps["a"].start_limit.burst == 1_000_000
    assert [(f.origin.key, f.problem) for f in result.findings] == [(
        "apps[0].max_restarts",
        "max_restarts = 5,000,000 allows more starts than tenure's start_limit.burst "
        "takes (at most 1,000,000); imported as 1,000,000")]


@pytest.mark.parametrize(("conf", "key"), [
    ({"script": "bin/srv\0x"}, "script"),        # no extension: PM2 would read the file
    ({"cmd": "srv\0x"}, "cmd"),
    ({"script": "srv\0.js"}, "script"),
    ({"script": "server.js", "cwd": "/srv\0/app"}, "cwd"),
    ({"script": "srv", "cwd": "/srv\0/app"}, "cwd"),
    ({"script": "srv", "interpreter": "/usr/bin/py\0"}, "interpreter"),
    ({"script": "srv", "exec_interpreter": "/usr/bin/py\0"}, "exec_interpreter"),
])
def test_a_path_with_a_nul_is_reported_before_any_file_is_looked_up(
        tmp_path: Path, conf: dict[str, Any], key: str) -> None:
    """Regression: a NUL in a script without an extension reached open(), whose
    ValueError (embedded null byte) ended the import with INTERNAL."""
    result = _read(tmp_path, {"apps": [{"name": "w", **conf}, {"script": "ok.js"}]})
    assert [d.app.name for d in result.drafts] == ["ok"]
    problems = {f.origin.key: f.problem for f in result.findings
                if f.kind is FindingKind.NOT_MAPPED}
    assert problems == {f"apps[0].{key}": "has a NUL character: app not imported"}
    path = tmp_path / "ecosystem.json"
    assert sorted(import_files([str(path)], "s").config.stacks["s"].apps) == ["ok"]
