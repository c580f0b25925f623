"""Rendering: golden files, systemd escaping, refusals, plists, determinism, policy."""

from __future__ import annotations

import dataclasses
import plistlib
from pathlib import Path

import pytest

import units
from protocol.errors import BadRequest
from units import (
    Installation,
    Manager,
    Scope,
    ServiceSpec,
    exec_word,
    quote_env,
    render_launchd,
    render_systemd,
    services,
)
from units.testing import GOLDEN_INSTALLATIONS, golden_files

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "units"
REGEN = "python -m units.render --regen-golden tests/golden/units"


def _inst(scope: str = "user", home: str = "/srv/tenure", **kw: object) -> Installation:
    account = {"user": "tenure", "group": "tenure"} if scope == "system" else {}
    return Installation.for_scope(scope, home=Path(home), python=Path("/opt/t/bin/python"),
                                  unit_dir=Path("/u"), plist_dir=Path("/p"),
                                  **{**account, **kw})  # type: ignore[arg-type]


def _spec(**kw: object) -> ServiceSpec:
    return dataclasses.replace(services(_inst())[0], **kw)  # type: ignore[arg-type]


def _lines(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(key + "=")]


# -- golden files ----------------------------------------------------------------------

@pytest.mark.parametrize("rel", sorted(golden_files()))
def test_rendering_matches_golden_file(rel: str) -> None:
    expected = (GOLDEN / rel).read_bytes()
    assert golden_files()[rel] == expected, f"{rel} differs; review, then run `{REGEN}`"


def test_golden_directory_holds_exactly_the_renderings() -> None:
    on_disk = sorted(str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file())
    assert on_disk == sorted(golden_files())
    assert {rel.split("/")[0] for rel in on_disk} == set(GOLDEN_INSTALLATIONS)


# -- policy ----------------------------------------------------------------------------

def test_owner_policy_lets_the_owner_stop_apps_itself() -> None:
    text = render_systemd(services(_inst("system"))[0])
    for line in ("Type=notify", "NotifyAccess=main", "Restart=no", "KillMode=process",
                 "SendSIGKILL=no", "Delegate=yes", "TimeoutStopSec=90", "OOMPolicy=continue",
                 "User=root", "WantedBy=multi-user.target"):
        assert line in text.splitlines(), line
    assert "KillMode=control-group" not in text and "KillMode=mixed" not in text
    assert not any(line.startswith("Group=") for line in text.splitlines())


@pytest.mark.parametrize("scope", ["system", "user"])
def test_guardian_stop_signals_only_the_guardian(scope: str) -> None:
    """`systemctl restart tenure` must leave the backend to the guardian, which gets its
    last certificate and retires it (was: control-group SIGTERMed the backend at the same
    time, and the next guardian's recovery was blocked); SIGKILL still reaps what is
    left."""
    lines = render_systemd(services(_inst(scope))[1]).splitlines()
    assert "KillMode=mixed" in lines and "SendSIGKILL=yes" in lines
    assert "KillMode=control-group" not in lines


def test_system_scope_splits_privileges() -> None:
    """The owner runs as root and admits the service account; the guardian (and its
    backends) run as the service account."""
    owner, guardian = (render_systemd(s).splitlines() for s in services(_inst("system")))
    exec_start = next(line for line in owner if line.startswith("ExecStart="))
    assert exec_start.endswith(" --service-account tenure")
    assert "User=root" in owner
    assert "User=tenure" in guardian and "Group=tenure" in guardian
    user_owner, user_guardian = (render_systemd(s) for s in services(_inst()))
    assert "User=" not in user_owner + user_guardian
    assert "--service-account" not in user_owner


@pytest.mark.parametrize("scope", ["system", "user"])
def test_what_the_home_holds_never_decides_what_a_unit_runs(scope: str,
                                                           tmp_path: Path) -> None:
    """Each unit starts in the home, which in system scope the service account owns. The
    home may hold an ``owner.py`` or a ``guardian/`` package (the account's, or anyone's
    file by that name): the unit's command, run there, still runs tenure's own module
    (was: ``python -m owner`` ran the home's ``owner.py`` as root)."""
    import subprocess
    import sys
    (tmp_path / "owner.py").write_text("raise SystemExit('the home ran owner.py')\n")
    (tmp_path / "guardian").mkdir()
    (tmp_path / "guardian" / "__main__.py").write_text("raise SystemExit('ran guardian/')\n")
    for spec in services(_inst(scope, home=str(tmp_path))):
        argv = [sys.executable, *spec.exec_start[1:spec.exec_start.index("--home")],
                "--help"]
        done = subprocess.run(argv, cwd=spec.working_directory, capture_output=True,
                              text=True, timeout=60, env={"PYTHONPATH": str(tmp_path)})
        assert done.returncode == 0 and done.stdout.startswith("usage: python -m "), \
            (argv, done.stderr[-300:])


def test_guardian_follows_the_owner_but_never_binds_to_it() -> None:
    text = render_systemd(services(_inst())[1])
    lines = text.splitlines()
    for line in ("Restart=always", "RestartSec=1", "After=tenure-owner.service",
                 "WantedBy=default.target"):
        assert line in lines, line
    assert not _lines(text, "Requires") and not _lines(text, "BindsTo")
    assert not _lines(text, "PartOf") and not _lines(text, "User")


@pytest.mark.parametrize("scope", ["system", "user"])
def test_a_guardian_restart_never_starts_a_stopped_owner(scope: str) -> None:
    """The owner stopped for maintenance stays stopped when the guardian (Restart=always)
    is restarted (was: Wants= pulled the owner, and every stack, back up); boot starts
    both because both are enabled."""
    owner, guardian = (render_systemd(s) for s in services(_inst(scope)))
    assert not _lines(guardian, "Wants") and not _lines(guardian, "Requisite")
    target = "multi-user.target" if scope == "system" else "default.target"
    assert f"WantedBy={target}" in owner.splitlines()
    assert f"WantedBy={target}" in guardian.splitlines()


def test_environment_carries_only_the_instance_path() -> None:
    for spec in services(_inst("system")):
        assert spec.environment == (("TENURE_HOME", "/srv/tenure"),)


def test_installation_refuses_bad_shapes() -> None:
    with pytest.raises(BadRequest):
        _inst(home="relative/home")
    with pytest.raises(BadRequest):
        _inst("user", user="alice")
    with pytest.raises(BadRequest):
        Installation(Scope.SYSTEM, Path("/h"), Path("/py"), Path("/u"), Path("/p"))
    with pytest.raises(BadRequest):
        _inst("system", user="bad name")
    with pytest.raises(BadRequest):
        Installation.for_scope("galaxy")


# -- systemd escaping ------------------------------------------------------------------

@pytest.mark.parametrize(("arg", "word"), [
    ("plain", "plain"),
    ("100%", "100%%"),
    ("$HOME", "$$HOME"),
    ("a b", '"a b"'),
    ("it's", '"it\'s"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("C:\\dir", '"C:\\\\dir"'),
    ("50% of $x", '"50%% of $$x"'),
    (";", '";"'),
    ("", '""'),
])
def test_exec_word_escaping(arg: str, word: str) -> None:
    assert exec_word(arg) == word


@pytest.mark.parametrize(("key", "value", "quoted"), [
    ("TENURE_HOME", "/var/lib/tenure", '"TENURE_HOME=/var/lib/tenure"'),
    ("K", "value with space", '"K=value with space"'),
    ("K", "100%", '"K=100%%"'),
    ("K", 'a"b', '"K=a\\"b"'),
    ("K", "a\\b", '"K=a\\\\b"'),
    ("K", "$HOME", '"K=$HOME"'),
])
def test_environment_quoting(key: str, value: str, quoted: str) -> None:
    assert quote_env(key, value) == quoted


def test_home_with_space_percent_quote_and_backslash_renders_exact_lines() -> None:
    home = '/srv/my tenure/50%/"q"/b\\s'
    inst = Installation.for_scope("user", home=Path(home), python=Path("/opt/my venv/py"),
                                  unit_dir=Path("/u"), plist_dir=Path("/p"))
    text = render_systemd(services(inst)[0])
    esc = '/srv/my tenure/50%%/\\"q\\"/b\\\\s'
    assert _lines(text, "ExecStart") == [
        f'ExecStart="/opt/my venv/py" -I -m owner --home "{esc}"']
    assert _lines(text, "Environment") == [f'Environment="TENURE_HOME={esc}"']
    assert _lines(text, "WorkingDirectory") == [
        'WorkingDirectory=/srv/my tenure/50%%/"q"/b\\s']


@pytest.mark.parametrize("exe", ['/opt/q"x/python', "/opt/it's/python", "/opt/b\\s/py",
                                 "/opt/venv/bin/", "/opt/$v/python", "python"])
def test_an_executable_systemd_would_refuse_is_bad_request(exe: str) -> None:
    """systemd does not load a unit whose executable name has a quote or backslash, or
    names a directory (was: rendered, escaped, and refused by systemd)."""
    with pytest.raises(BadRequest, match="executable") as err:
        exec_word(exe, executable=True)
    assert err.value.data == {"field": "ExecStart"}
    with pytest.raises(BadRequest):
        render_systemd(_spec(exec_start=(exe, "-I")))
    assert exec_word(exe.lstrip("/")) != ""  # the same text as an argument is fine


def test_description_percent_is_doubled() -> None:
    text = render_systemd(_spec(description="tenure at 100% (test)"))
    assert _lines(text, "Description") == ["Description=tenure at 100%% (test)"]


@pytest.mark.parametrize("bad", ["a\nb", "a\x00b", "a\rb", "a\x7fb"])
@pytest.mark.parametrize("where", ["home", "env", "arg", "description", "exe"])
def test_unrepresentable_characters_are_refused(bad: str, where: str) -> None:
    changes: dict[str, object] = {
        "home": {"working_directory": f"/srv/{bad}"},
        "env": {"environment": (("K", bad),)},
        "arg": {"exec_start": ("/py", bad)},
        "description": {"description": bad},
        "exe": {"exec_start": (f"/py{bad}",)},
    }[where]  # type: ignore[assignment]
    spec = _spec(**changes)
    with pytest.raises(BadRequest):
        render_systemd(spec)
    if where != "description":  # launchd does not carry the description
        with pytest.raises(BadRequest):
            render_launchd(spec)


@pytest.mark.parametrize("changes", [
    {"exec_start": ("python", "-m", "owner")},
    {"exec_start": ("/opt/$VENV/python",)},
    {"exec_start": ()},
    {"environment": (("BAD-KEY", "x"),)},
    {"environment": (("1X", "x"),)},
    {"working_directory": "/srv/trailing\\"},
    {"working_directory": " /srv/lead"},
    {"after": ("network.target; rm -rf",)},
    {"kill_mode": "process\nExecStartPre=/bin/sh"},
])
def test_invalid_spec_values_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(BadRequest):
        render_systemd(_spec(**changes))


# -- launchd ---------------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["user", "system"])
def test_plists_parse_and_carry_the_expected_keys(scope: str) -> None:
    inst = _inst(scope, manager=Manager.LAUNCHD)
    owner, guardian = (plistlib.loads(render_launchd(s)) for s in services(inst))
    assert owner["Label"] == "dev.tenure.owner" and guardian["Label"] == "dev.tenure.guardian"
    assert owner["KeepAlive"] is False and guardian["KeepAlive"] is True
    assert owner["AbandonProcessGroup"] is True and "AbandonProcessGroup" not in guardian
    assert owner["ExitTimeOut"] == 90 and guardian["ExitTimeOut"] == 30
    account = ["--service-account", "tenure"] if scope == "system" else []
    for job, who in ((owner, "owner"), (guardian, "guardian")):
        assert job["ProgramArguments"] == ["/opt/t/bin/python", "-I", "-m", who, "--home",
                                           "/srv/tenure", *(account if who == "owner" else [])]
        assert job["EnvironmentVariables"] == {"TENURE_HOME": "/srv/tenure"}
        assert job["RunAtLoad"] is True and job["ProcessType"] == "Standard"
        assert job["StandardOutPath"] == f"/srv/tenure/tenure-{who}.stdout.log"
        assert job["StandardErrorPath"] == f"/srv/tenure/tenure-{who}.stderr.log"
        assert ("UserName" in job) == (scope == "system")
        assert ("GroupName" in job) == (scope == "system" and who == "guardian")
    if scope == "system":
        assert owner["UserName"] == "root" and guardian["UserName"] == "tenure"


# -- determinism and exports -----------------------------------------------------------

def test_rendering_is_deterministic() -> None:
    a = [render_systemd(s).encode() + render_launchd(s) for s in services(_inst("system"))]
    b = [render_systemd(s).encode() + render_launchd(s) for s in services(_inst("system"))]
    assert a == b
    assert golden_files() == golden_files()


def test_public_api_is_pinned() -> None:
    assert sorted(units.__all__) == [
        "GUARDIAN_LABEL", "GUARDIAN_UNIT", "Installation", "Manager", "OWNER_LABEL",
        "OWNER_UNIT", "PLAN_FORMAT", "Plan", "PlannedFile", "Removal", "Scope", "ServiceSpec",
        "Systemctl", "SystemctlLike", "exec_word", "install", "live_sockets", "load_plan",
        "plist_name", "prepare", "quote_env", "render_launchd", "render_systemd", "services",
        "status", "uninstall"]
    for name in units.__all__:
        assert hasattr(units, name), name
