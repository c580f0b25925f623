"""Test helpers: a recording ``FakeSystemctl`` and the canonical golden-file inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from protocol.errors import ServiceError

from .model import Installation, Manager, Scope, services
from .render import plist_name, render_launchd, render_systemd

__all__ = ["GOLDEN_INSTALLATIONS", "FakeSystemctl", "golden_files"]


@dataclass
class FakeSystemctl:
    """Records every call as a tuple of its arguments (``("show", unit)`` for show).

    ``properties[unit]`` answers ``show`` (absent units look like systemd's answer for an
    unknown unit: inactive, no job); ``fail`` maps a first argument ("enable",
    "daemon-reload", ...) to the stderr of a ServiceError.
    """

    scope: Scope = Scope.USER
    properties: dict[str, dict[str, str]] = field(default_factory=dict)
    fail: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, *args: str) -> str:
        """Raises ServiceError when ``args[0]`` is in ``fail``."""
        self.calls.append(tuple(args))
        if args and args[0] in self.fail:
            raise ServiceError(f"systemctl {' '.join(args)} failed: {self.fail[args[0]]}",
                               {"stderr": self.fail[args[0]]})
        return ""

    def show(self, unit: str, props: Sequence[str]) -> dict[str, str]:
        self.run("show", unit)
        known = {"ActiveState": "inactive", "SubState": "dead", "Job": "",
                 "LoadState": "not-found", **self.properties.get(unit, {})}
        return {p: known.get(p, "") for p in props}


GOLDEN_INSTALLATIONS: dict[str, Installation] = {
    "systemd-user": Installation(
        scope=Scope.USER, home=Path("/home/alice/.local/state/tenure"),
        python=Path("/opt/tenure/venv/bin/python"),
        unit_dir=Path("/home/alice/.config/systemd/user"),
        plist_dir=Path("/Users/alice/Library/LaunchAgents")),
    "systemd-system": Installation(
        scope=Scope.SYSTEM, home=Path("/var/lib/tenure"),
        python=Path("/opt/tenure/venv/bin/python"), unit_dir=Path("/etc/systemd/system"),
        plist_dir=Path("/Library/LaunchDaemons"), user="tenure", group="tenure"),
    "launchd-user": Installation(
        scope=Scope.USER, home=Path("/Users/alice/Library/Application Support/tenure"),
        python=Path("/opt/tenure/venv/bin/python"),
        unit_dir=Path("/Users/alice/.config/systemd/user"),
        plist_dir=Path("/Users/alice/Library/LaunchAgents"), manager=Manager.LAUNCHD),
    "launchd-system": Installation(
        scope=Scope.SYSTEM, home=Path("/Library/Application Support/tenure"),
        python=Path("/opt/tenure/venv/bin/python"), unit_dir=Path("/etc/systemd/system"),
        plist_dir=Path("/Library/LaunchDaemons"), user="_tenure", group="_tenure",
        manager=Manager.LAUNCHD),
}


def golden_files() -> dict[str, bytes]:
    """Relative path under tests/golden/units → expected bytes, for every rendering."""
    out: dict[str, bytes] = {}
    for key, inst in GOLDEN_INSTALLATIONS.items():
        for spec in services(inst):
            if inst.manager is Manager.LAUNCHD:
                out[f"{key}/{plist_name(spec)}"] = render_launchd(spec)
            else:
                out[f"{key}/{spec.name}"] = render_systemd(spec).encode()
    return out
