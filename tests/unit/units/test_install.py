"""Plans: prepare writes only the plan; install/uninstall refuse rather than stop anything."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import (
    BadRequest,
    Conflict,
    ServiceActive,
    ServiceError,
    StateCorrupt,
    UnsafePath,
)
from units import (
    GUARDIAN_UNIT,
    OWNER_UNIT,
    Installation,
    Manager,
    Scope,
    install,
    load_plan,
    prepare,
    render_systemd,
    services,
    status,
    uninstall,
)
from units.testing import FakeSystemctl
from units.trust import write_record

PLAN_FILES = {OWNER_UNIT, GUARDIAN_UNIT, "environment.json", "plan.json"}


@pytest.fixture
def inst(short_home: Path) -> Installation:
    home = short_home / "h"
    home.mkdir(mode=0o700)
    return Installation.for_scope("user", home=home, python=Path("/opt/t/bin/python"),
                                  unit_dir=short_home / "units", plist_dir=short_home / "la")


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = os.lstat(p)
            out[str(p.relative_to(root))] = (
                stat.S_IMODE(st.st_mode), p.read_bytes() if stat.S_ISREG(st.st_mode) else b"")
    return out


@pytest.fixture
def listening(inst: Installation) -> Iterator[Path]:
    sdir = inst.home / "execution"
    sdir.mkdir(mode=0o700)
    path = sdir / "owner.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen(4)
        yield path


# -- prepare ---------------------------------------------------------------------------

def test_prepare_writes_exactly_the_plan_privately(inst: Installation) -> None:
    root = inst.home.parent
    before = _tree(root)
    plan = prepare(inst)
    after = _tree(root)
    created = {k: v for k, v in after.items() if k not in before}
    pdir = "h/runtime/supervision-plan"
    assert set(created) == {"h/runtime", pdir, *(f"{pdir}/{n}" for n in PLAN_FILES)}
    assert all(after.get(k) == v for k, v in before.items())
    assert created["h/runtime"][0] == 0o700 and created[pdir][0] == 0o700
    for name in PLAN_FILES:
        assert created[f"{pdir}/{name}"][0] == 0o600, name
    assert not inst.unit_dir.exists()
    assert plan.plan_dir == inst.plan_dir and plan.scope is Scope.USER


def test_plan_json_records_targets_hashes_and_environment(inst: Installation) -> None:
    prepare(inst)
    raw = json.loads((inst.plan_dir / "plan.json").read_text())
    assert raw["kind"] == "tenure-supervision-plan" and raw["format"] == 1
    assert raw["scope"] == "user" and raw["manager"] == "systemd"
    assert raw["environment"] == {"TENURE_HOME": str(inst.home)}
    for f, spec in zip(raw["files"], services(inst), strict=True):
        assert f["name"] == spec.name
        assert f["target"] == str(inst.unit_dir / spec.name)
        data = (inst.plan_dir / spec.name).read_bytes()
        assert data == render_systemd(spec).encode()
        assert f["sha256"] == hashlib.sha256(data).hexdigest()
    env = (inst.plan_dir / "environment.json").read_bytes()
    assert raw["environment_record"]["sha256"] == hashlib.sha256(env).hexdigest()
    record = json.loads(env)
    assert record["services"][OWNER_UNIT]["environment"] == {"TENURE_HOME": str(inst.home)}


def test_prepare_refuses_a_symlinked_plan_dir(inst: Installation, short_home: Path) -> None:
    (inst.home / "runtime").mkdir(mode=0o700)
    os.symlink(short_home, inst.plan_dir)
    with pytest.raises(UnsafePath):
        prepare(inst)


def test_system_prepare_creating_home_needs_the_account(short_home: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("hands directories to the service account only as root")
    inst = Installation.for_scope("system", home=short_home / "new", user="tnnoacct",
                                  group="tnnoacct", python=Path("/py"),
                                  unit_dir=short_home / "u", plist_dir=short_home / "p")
    with pytest.raises(BadRequest):
        prepare(inst)


# -- install ---------------------------------------------------------------------------

def test_install_writes_files_then_reloads_then_enables(inst: Installation) -> None:
    plan = prepare(inst)
    ctl = FakeSystemctl()
    install(plan.plan_dir, target_dir=inst.target_dir, systemctl=ctl)
    assert ctl.calls == [("show", OWNER_UNIT), ("show", GUARDIAN_UNIT), ("daemon-reload",),
                         ("enable", OWNER_UNIT, GUARDIAN_UNIT)]
    assert sorted(os.listdir(inst.unit_dir)) == sorted([OWNER_UNIT, GUARDIAN_UNIT])
    for spec in services(inst):
        target = inst.unit_dir / spec.name
        assert target.read_text() == render_systemd(spec)
        assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.parametrize("state", ["active", "activating", "deactivating", "reloading"])
@pytest.mark.parametrize("unit", [OWNER_UNIT, GUARDIAN_UNIT])
def test_install_refuses_a_unit_that_is_not_idle(inst: Installation, state: str,
                                                 unit: str) -> None:
    plan = prepare(inst)
    ctl = FakeSystemctl(properties={unit: {"ActiveState": state}})
    with pytest.raises(ServiceActive) as err:
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=ctl)
    assert unit in err.value.data["units"]
    assert not inst.unit_dir.exists()
    assert all(c[0] == "show" for c in ctl.calls)


def test_install_refuses_a_queued_job(inst: Installation) -> None:
    plan = prepare(inst)
    ctl = FakeSystemctl(properties={GUARDIAN_UNIT: {"ActiveState": "inactive", "Job": "42"}})
    with pytest.raises(ServiceActive):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=ctl)
    assert not inst.unit_dir.exists()


def test_install_over_a_failed_unit_is_allowed(inst: Installation) -> None:
    plan = prepare(inst)
    install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl(
        properties={OWNER_UNIT: {"ActiveState": "failed", "Job": "0"}}))
    assert (inst.unit_dir / OWNER_UNIT).exists()


def test_install_refuses_when_a_live_socket_answers(inst: Installation,
                                                     listening: Path) -> None:
    plan = prepare(inst)
    ctl = FakeSystemctl()
    with pytest.raises(ServiceActive) as err:
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=ctl)
    assert err.value.data["sockets"] == [str(listening)]
    assert not inst.unit_dir.exists()
    assert ("daemon-reload",) not in ctl.calls


def test_install_ignores_a_stale_socket_file(inst: Installation) -> None:
    sdir = inst.home / "runtime"
    sdir.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(sdir / "guardian.sock"))  # closed without listening: ECONNREFUSED
    plan = prepare(inst)
    install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    assert (inst.unit_dir / GUARDIAN_UNIT).exists()


@pytest.mark.parametrize("victim", [OWNER_UNIT, GUARDIAN_UNIT, "environment.json"])
def test_install_refuses_a_tampered_plan(inst: Installation, victim: str) -> None:
    plan = prepare(inst)
    path = plan.plan_dir / victim
    path.write_bytes(path.read_bytes().replace(b"tenure", b"tenurX", 1))
    ctl = FakeSystemctl()
    with pytest.raises(StateCorrupt):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=ctl)
    with pytest.raises(StateCorrupt):
        load_plan(plan.plan_dir)
    assert ctl.calls == [] and not inst.unit_dir.exists()


def test_install_refuses_a_missing_plan_file(inst: Installation) -> None:
    plan = prepare(inst)
    (plan.plan_dir / OWNER_UNIT).unlink()
    with pytest.raises(StateCorrupt):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())


@pytest.mark.parametrize("target", ["/etc/passwd", "relative/tenure.service"])
def test_install_refuses_a_plan_retargeted_elsewhere(inst: Installation, target: str) -> None:
    plan = prepare(inst)
    raw = json.loads((plan.plan_dir / "plan.json").read_text())
    raw["files"][1]["target"] = target
    (plan.plan_dir / "plan.json").write_text(json.dumps(raw))
    with pytest.raises(StateCorrupt):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())


def test_install_refuses_an_unknown_plan_format(inst: Installation) -> None:
    plan = prepare(inst)
    raw = json.loads((plan.plan_dir / "plan.json").read_text())
    raw["format"] = 2
    (plan.plan_dir / "plan.json").write_text(json.dumps(raw))
    with pytest.raises(StateCorrupt):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())


def test_install_refuses_a_systemctl_of_the_other_scope(inst: Installation) -> None:
    plan = prepare(inst)
    with pytest.raises(BadRequest):
        install(plan.plan_dir, target_dir=inst.target_dir,
                systemctl=FakeSystemctl(scope=Scope.SYSTEM))


def test_install_reports_a_failing_systemctl(inst: Installation) -> None:
    plan = prepare(inst)
    with pytest.raises(ServiceError):
        install(plan.plan_dir, target_dir=inst.target_dir,
                systemctl=FakeSystemctl(fail={"enable": "no such unit"}))


def test_launchd_plan_installs_plists_without_systemctl(short_home: Path) -> None:
    home = short_home / "h"
    home.mkdir(mode=0o700)
    inst = Installation.for_scope("user", home=home, python=Path("/py"),
                                  unit_dir=short_home / "u", plist_dir=short_home / "la",
                                  manager=Manager.LAUNCHD)
    plan = prepare(inst)
    install(plan.plan_dir, target_dir=inst.target_dir)
    assert sorted(os.listdir(inst.plist_dir)) == ["dev.tenure.guardian.plist",
                                                  "dev.tenure.owner.plist"]
    assert uninstall(inst).removed[:2] == (inst.plist_dir / "dev.tenure.owner.plist",
                                           inst.plist_dir / "dev.tenure.guardian.plist")
    assert os.listdir(inst.plist_dir) == []


# -- status and uninstall --------------------------------------------------------------

def test_status_reads_both_units(inst: Installation) -> None:
    ctl = FakeSystemctl(properties={OWNER_UNIT: {"ActiveState": "active", "MainPID": "7",
                                                 "NRestarts": "0"}})
    got = status(inst, systemctl=ctl)
    assert set(got) == {OWNER_UNIT, GUARDIAN_UNIT}
    assert got[OWNER_UNIT]["ActiveState"] == "active" and got[OWNER_UNIT]["MainPID"] == "7"
    assert set(got[GUARDIAN_UNIT]) >= {"ActiveState", "SubState", "MainPID", "NRestarts",
                                       "ExecMainStatus"}


def test_uninstall_refuses_when_active(inst: Installation) -> None:
    install(prepare(inst).plan_dir, target_dir=inst.target_dir,
            systemctl=FakeSystemctl())
    ctl = FakeSystemctl(properties={OWNER_UNIT: {"ActiveState": "active"}})
    with pytest.raises(ServiceActive):
        uninstall(inst, systemctl=ctl)
    assert (inst.unit_dir / OWNER_UNIT).exists()
    assert all(c[0] == "show" for c in ctl.calls)


def test_uninstall_disables_removes_then_reloads(inst: Installation) -> None:
    install(prepare(inst).plan_dir, target_dir=inst.target_dir,
            systemctl=FakeSystemctl())
    ctl = FakeSystemctl()
    removal = uninstall(inst, systemctl=ctl)
    assert removal.removed[:2] == (inst.unit_dir / OWNER_UNIT, inst.unit_dir / GUARDIAN_UNIT)
    assert removal.left == ()
    assert ctl.calls[2:] == [("disable", OWNER_UNIT, GUARDIAN_UNIT), ("daemon-reload",)]
    assert os.listdir(inst.unit_dir) == []


HAND_WRITTEN = "[Unit]\nDescription=the operator's own tenure\n\n[Service]\nExecStart=/bin/true\n"


def test_uninstall_leaves_a_unit_file_tenure_did_not_write(inst: Installation) -> None:
    """(was: a hand-written tenure.service in the unit directory was disabled and
    deleted)"""
    install(prepare(inst).plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    (inst.unit_dir / GUARDIAN_UNIT).write_text(HAND_WRITTEN)
    ctl = FakeSystemctl()
    removal = uninstall(inst, systemctl=ctl)
    assert (inst.unit_dir / GUARDIAN_UNIT).read_text() == HAND_WRITTEN
    assert not (inst.unit_dir / OWNER_UNIT).exists()
    assert ("disable", OWNER_UNIT) in ctl.calls
    assert not any(c[0] == "disable" and GUARDIAN_UNIT in c for c in ctl.calls)
    assert removal.removed[0] == inst.unit_dir / OWNER_UNIT
    assert inst.unit_dir / GUARDIAN_UNIT not in removal.removed
    assert [(p, "not written by tenure" in why) for p, why in removal.left] == [
        (inst.unit_dir / GUARDIAN_UNIT, True)]
    assert removal.to_json()["left"][0]["path"] == str(inst.unit_dir / GUARDIAN_UNIT)


def test_uninstall_removes_tenures_unit_without_a_plan(inst: Installation) -> None:
    """A unit with tenure's header line is tenure's even when the plan is gone (or was
    prepared again for another interpreter)."""
    install(prepare(inst).plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    for name in os.listdir(inst.plan_dir):
        os.unlink(inst.plan_dir / name)
    os.rmdir(inst.plan_dir)
    other = dataclasses.replace(inst, python=Path("/opt/other/bin/python"))
    removal = uninstall(other, systemctl=FakeSystemctl())
    assert removal.removed == (inst.unit_dir / OWNER_UNIT, inst.unit_dir / GUARDIAN_UNIT)
    assert removal.left == () and os.listdir(inst.unit_dir) == []


def _system_installed(short_home: Path) -> Installation:
    """A system-scope installation of home ``h`` under ``short_home``, installed (its
    record written; skips unless root, whose the record is)."""
    if os.geteuid() != 0:
        pytest.skip("the installation record is root's")
    home = short_home / "h"
    home.mkdir(mode=0o700)
    inst = Installation.for_scope("system", home=home, python=Path("/opt/t/bin/python"),
                                  user="root", group="root", unit_dir=short_home / "units",
                                  plist_dir=short_home / "la",
                                  config_dir=short_home / "etc" / "tenure")
    plan = prepare(inst)
    install(plan.plan_dir, digest=plan.digest, target_dir=inst.target_dir,
            systemctl=FakeSystemctl(scope=Scope.SYSTEM))
    return inst


def test_system_uninstall_removes_the_record_and_the_plan(short_home: Path) -> None:
    """(was: /etc/tenure/installation.json and the plan directory stayed behind, and a
    viewer's CLI kept trusting the service account for the home)"""
    inst = _system_installed(short_home)
    home = inst.home
    assert inst.record_path.exists()
    removal = uninstall(inst, systemctl=FakeSystemctl(scope=Scope.SYSTEM))
    assert not inst.record_path.exists() and not inst.plan_dir.exists()
    assert not (short_home / "etc" / "tenure").exists()   # nothing else was in it
    assert os.listdir(inst.unit_dir) == [] and home.is_dir()
    assert inst.record_path in removal.removed and inst.plan_dir in removal.removed
    assert removal.left == ()
    # a record of another home is not this installation's to remove: nothing is
    inst.plan_root.mkdir(mode=0o755)
    write_record(inst.record_path, scope="system", home=short_home / "other", user="root",
                 group="root")
    with pytest.raises(Conflict, match=r"for home .*other, not"):
        uninstall(inst, systemctl=FakeSystemctl(scope=Scope.SYSTEM))
    assert inst.record_path.exists()


def test_uninstall_for_another_home_changes_nothing(short_home: Path) -> None:
    """Was: an uninstall for another home (a system install made without --home before
    the system default became /var/lib/tenure, uninstalled after) removed the installed
    units and plan and kept the record that trusts the service account for the home."""
    inst = _system_installed(short_home)
    home = inst.home
    before = sorted(os.listdir(inst.unit_dir)), sorted(os.listdir(inst.plan_dir))
    ctl = FakeSystemctl(scope=Scope.SYSTEM)
    other = dataclasses.replace(inst, home=short_home / "elsewhere")
    with pytest.raises(Conflict) as refused:
        uninstall(other, systemctl=ctl)
    assert refused.value.data == {"installed_home": str(home), "home": str(other.home)}
    assert f"uninstall it with --home {home}" in refused.value.msg
    assert (sorted(os.listdir(inst.unit_dir)), sorted(os.listdir(inst.plan_dir))) == before
    assert inst.record_path.exists() and ctl.calls == []


def test_uninstall_leaves_a_plan_directory_holding_files_tenure_did_not_write(
        inst: Installation) -> None:
    install(prepare(inst).plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    (inst.plan_dir / "notes.txt").write_text("mine")
    os.chmod(inst.plan_dir / "notes.txt", 0o600)
    removal = uninstall(inst, systemctl=FakeSystemctl())
    assert (inst.plan_dir / "plan.json").exists()
    assert [p for p, _ in removal.left] == [inst.plan_dir]
    assert "notes.txt" in removal.left[0][1]


def test_uninstall_refuses_to_remove_a_symlink(inst: Installation, short_home: Path) -> None:
    inst.unit_dir.mkdir()
    os.symlink(short_home / "elsewhere", inst.unit_dir / OWNER_UNIT)
    with pytest.raises(UnsafePath):
        uninstall(inst, systemctl=FakeSystemctl())


# -- what install trusts ---------------------------------------------------------------

def test_install_refuses_a_plan_file_others_can_read(inst: Installation) -> None:
    plan = prepare(inst)
    os.chmod(plan.plan_dir / "environment.json", 0o640)
    with pytest.raises(UnsafePath, match=r"environment\.json"):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    os.chmod(plan.plan_dir / "environment.json", 0o600)
    os.chmod(plan.plan_dir, 0o750)
    with pytest.raises(UnsafePath):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    assert not inst.unit_dir.exists()


def test_install_pins_targets_to_the_unit_directory(inst: Installation,
                                                     short_home: Path) -> None:
    plan = prepare(inst)
    raw = json.loads((plan.plan_dir / "plan.json").read_text())
    raw["files"][1]["target"] = str(short_home / "other" / raw["files"][1]["name"])
    (plan.plan_dir / "plan.json").write_text(json.dumps(raw))
    with pytest.raises(StateCorrupt, match="outside"):
        install(plan.plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    assert not (short_home / "other").exists()


def test_a_digest_given_must_be_the_plans(inst: Installation) -> None:
    plan = prepare(inst)
    with pytest.raises(StateCorrupt, match="reviewed"):
        install(plan.plan_dir, digest="f" * 64, target_dir=inst.target_dir,
                systemctl=FakeSystemctl())
    install(plan.plan_dir, digest=plan.digest, target_dir=inst.target_dir,
            systemctl=FakeSystemctl())
    assert (inst.unit_dir / OWNER_UNIT).exists()
    assert not inst.record_path.exists()  # user scope records nothing


def test_system_plans_live_outside_the_home() -> None:
    inst = Installation.for_scope("system", home=Path("/var/lib/tenure"),
                                  python=Path("/py"))
    assert inst.plan_dir == Path("/etc/tenure/supervision-plan")
    assert inst.record_path == Path("/etc/tenure/installation.json")
    user = Installation.for_scope("user", home=Path("/h/t"), python=Path("/py"))
    assert user.plan_dir == Path("/h/t/runtime/supervision-plan")


@pytest.mark.parametrize("scope", ["user", "system"])
def test_prepare_refuses_a_home_whose_parent_is_missing(short_home: Path,
                                                        scope: str) -> None:
    """Prepare creates the home, not the directories above it (was: INTERNAL, No such
    file or directory)."""
    inst = Installation.for_scope(scope, home=short_home / "no" / "h", python=Path("/py"),
                                  unit_dir=short_home / "u", plist_dir=short_home / "p",
                                  config_dir=short_home / "etc" if scope == "system"
                                  else None)  # never /etc/tenure here
    with pytest.raises(UnsafePath, match="does not exist") as err:
        prepare(inst)
    assert err.value.data == {"path": str(short_home / "no")}
    assert sorted(os.listdir(short_home)) == []


def test_uninstall_needs_no_unit_it_could_render(inst: Installation) -> None:
    """Was: an interpreter path systemd refuses (a quote in it: BAD_REQUEST to prepare)
    made uninstall fail too, leaving both units, though it renders nothing: the plan's
    digests and tenure's header line tell its files."""
    install(prepare(inst).plan_dir, target_dir=inst.target_dir, systemctl=FakeSystemctl())
    odd = dataclasses.replace(inst, python=Path("/opt/it's/bin/python"))
    removal = uninstall(odd, systemctl=FakeSystemctl())
    assert removal.removed[:2] == (inst.unit_dir / OWNER_UNIT, inst.unit_dir / GUARDIAN_UNIT)
    assert removal.left == () and os.listdir(inst.unit_dir) == []
