"""Regression: the service account swapped the reviewed system-scope plan, and root
installed the substitute (units running as root, one written to a directory of the
attacker's choosing). Now the plan lives in a root-owned directory outside the account's
home, install checks every file's owner and mode, pins the targets to the unit directory
and installs only the plan whose digest the operator reviewed."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from owner.testing import in_child_as
from protocol.errors import BadRequest, StateCorrupt, UnsafePath
from units import Installation, install, prepare, render_systemd, services
from units.model import Scope
from units.testing import FakeSystemctl
from units.trust import read_record

pytestmark = pytest.mark.root

SVC = 1234  # the service account (apps used to run as this uid too)


def as_service_account(fn: Callable[[], Any]) -> str:
    """Run ``fn`` in a child as uid/gid SVC; the name of what it raised, or "ok"."""
    got = in_child_as(SVC, SVC, lambda: (fn(), "ok")[1])
    return got if isinstance(got, str) else str(got["exc"])


def substitute_plan(pdir: Path, reviewed: dict[str, Any], unit_dir: Path,
                    evil_dir: Path) -> None:
    """What the reproduction wrote, as the service account: units without User= (root),
    one of them aimed at a directory of its choosing."""
    os.mkdir(pdir, 0o700)
    files = []
    for name in ("tenure-owner.service", "tenure.service"):
        data = b"[Service]\nExecStart=/bin/sh -c 'id > /tmp/pwned'\n"
        (pdir / name).write_bytes(data)
        os.chmod(pdir / name, 0o600)
        tgt = (unit_dir if name == "tenure.service" else evil_dir) / name
        files.append({"name": name, "target": str(tgt),
                      "sha256": hashlib.sha256(data).hexdigest()})
    env = b"{}\n"
    (pdir / "environment.json").write_bytes(env)
    os.chmod(pdir / "environment.json", 0o600)
    forged = {**reviewed, "files": files,
              "environment_record": {"name": "environment.json",
                                     "sha256": hashlib.sha256(env).hexdigest()}}
    (pdir / "plan.json").write_text(json.dumps(forged))
    os.chmod(pdir / "plan.json", 0o600)


def test_the_service_account_cannot_swap_the_reviewed_system_plan(short_home: Path) -> None:
    base = short_home
    os.chmod(base, 0o755)
    home = base / "home"
    (home / "runtime").mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    os.chown(home, SVC, SVC)
    os.chown(home / "runtime", SVC, SVC)  # as docs/service.md says
    unit_dir, evil_dir = base / "etc-systemd-system", base / "attacker-chosen-dir"
    unit_dir.mkdir()
    evil_dir.mkdir(mode=0o777)
    inst = Installation(scope=Scope.SYSTEM, home=home, python=Path("/usr/bin/python3"),
                        unit_dir=unit_dir, plist_dir=base / "ld", user="tenure",
                        group="tenure", config_dir=base / "etc-tenure")
    plan = prepare(inst)  # root prepares; the operator reviews it and notes its digest
    pdir = inst.plan_dir
    st, parent = os.stat(pdir), os.stat(pdir.parent)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    assert (parent.st_uid, stat.S_IMODE(parent.st_mode)) == (0, 0o755)
    assert not pdir.is_relative_to(home)

    # The attack of the reproduction, as the service account: every step is refused.
    assert as_service_account(lambda: os.rename(pdir, pdir.with_name("moved"))) == \
        "PermissionError"
    assert as_service_account(lambda: (pdir / "plan.json").write_text("{}")) == \
        "PermissionError"
    assert as_service_account(lambda: os.mkdir(pdir.parent / "x")) == "PermissionError"

    # A plan in the old place (the account's home) is substituted easily, but root does
    # not install it, whatever digest comes with it.
    old_place = home / "runtime" / "supervision-plan"
    assert as_service_account(lambda: substitute_plan(
        old_place, plan.to_json(), unit_dir, evil_dir)) == "ok"
    for digest in (plan.digest, None):
        with pytest.raises(UnsafePath):
            install(old_place, digest=digest, target_dir=unit_dir,
                    systemctl=FakeSystemctl(scope=Scope.SYSTEM))
    assert os.listdir(unit_dir) == [] and os.listdir(evil_dir) == []

    # The reviewed plan installs, and only with the digest that was reviewed.
    ctl = FakeSystemctl(scope=Scope.SYSTEM)
    with pytest.raises(BadRequest, match="--digest"):
        install(pdir, target_dir=unit_dir, systemctl=ctl)
    with pytest.raises(StateCorrupt, match="not the plan that was reviewed"):
        install(pdir, digest="0" * 64, target_dir=unit_dir, systemctl=ctl)
    install(pdir, digest=plan.digest, target_dir=unit_dir, systemctl=ctl)
    for spec in services(inst):
        target = unit_dir / spec.name
        tst = os.stat(target)
        assert (tst.st_uid, stat.S_IMODE(tst.st_mode)) == (0, 0o644)
        assert target.read_text() == render_systemd(spec)
    assert os.listdir(evil_dir) == []
    record = read_record(inst.record_path)
    assert record is not None and record["home"] == str(home)
    assert (record["user"], record["scope"]) == ("tenure", "system")


def test_a_retargeted_system_plan_is_refused_even_with_its_own_digest(
        short_home: Path) -> None:
    """Root's own plan directory, edited: the digest of the edited plan matches it, but
    its targets leave the unit directory."""
    os.chmod(short_home, 0o755)
    home = short_home / "home"
    (home / "runtime").mkdir(parents=True, mode=0o700)
    unit_dir = short_home / "units"
    inst = Installation(scope=Scope.SYSTEM, home=home, python=Path("/usr/bin/python3"),
                        unit_dir=unit_dir, plist_dir=short_home / "ld", user="tenure",
                        group="tenure", config_dir=short_home / "etc")
    plan = prepare(inst)
    raw = json.loads((plan.plan_dir / "plan.json").read_text())
    raw["files"][0]["target"] = str(short_home / "elsewhere" / raw["files"][0]["name"])
    (plan.plan_dir / "plan.json").write_text(json.dumps(raw))
    from units.install import load_plan
    edited = load_plan(plan.plan_dir)
    with pytest.raises(StateCorrupt, match="outside"):
        install(plan.plan_dir, digest=edited.digest, target_dir=unit_dir,
                systemctl=FakeSystemctl(scope=Scope.SYSTEM))
    assert not unit_dir.exists() or os.listdir(unit_dir) == []
