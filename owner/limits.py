"""Resource limits of a launch: rlimits for its processes, cgroup limits for the whole app.

Wire shape (launch param ``limits``; every key optional)::

    {"nofile": 4096, "nproc": 256, "core": 0 | "infinity",           rlimits (soft = hard)
     "memory_max": 536870912, "cpu_quota": 1.5, "pids_max": 512}     cgroup v2 limits

rlimits are set in the child before its program runs (:class:`owner.runas.ChildSetup`),
for every process of the app that inherits them. The cgroup limits need the app's own
cgroup (the owner under systemd with ``Delegate=yes``, docs/owner.md "Cgroups") with the
controller enabled; they are written after the cgroup is created and before the app
joins it. Without one the launch is refused with ``LIMIT_UNENFORCEABLE``: a limit that is
silently not enforced would be worse than none. ``cpu_quota`` is in CPUs: 1.5 means 150 ms
of CPU time per 100 ms period (cgroup ``cpu.max``).
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from protocol.errors import BadRequest, LimitUnenforceable

__all__ = ["CPU_PERIOD_US", "Limits", "apply_cgroup_limits", "require_cgroup_limits"]

INFINITY = "infinity"
CPU_PERIOD_US = 100_000
MAX_CPUS = 4096.0
_RLIMITS = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC,
            "core": resource.RLIMIT_CORE}
_CGROUP = {"memory_max": ("memory", "memory.max"), "cpu_quota": ("cpu", "cpu.max"),
           "pids_max": ("pids", "pids.max")}
_MAX_INT = 2**62


def _rlimit(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if value == INFINITY:
        return resource.RLIM_INFINITY
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
        raise BadRequest(f"limits.{key} must be a non-negative integer or 'infinity'")
    return value


def _positive(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_INT:
        raise BadRequest(f"limits.{key} must be a positive integer")
    return value


def _cpus(d: Mapping[str, Any]) -> float | None:
    value = d.get("cpu_quota")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not 0.01 <= value <= MAX_CPUS:
        raise BadRequest(f"limits.cpu_quota must be a number of CPUs between 0.01 and "
                         f"{MAX_CPUS:.0f}")
    return float(value)


@dataclass(frozen=True)
class Limits:
    """rlimits (``resource.RLIM_INFINITY`` for "infinity") and cgroup limits; None = not
    set, so the app inherits the owner's rlimits and its cgroup's parent limits."""

    nofile: int | None = None
    nproc: int | None = None
    core: int | None = None
    memory_max: int | None = None
    cpu_quota: float | None = None
    pids_max: int | None = None

    @classmethod
    def from_wire(cls, d: object) -> Limits:
        """Parse the ``limits`` map. Raises BadRequest (and nothing else); unknown keys
        are ignored."""
        if not isinstance(d, Mapping):
            raise BadRequest(f"limits must be a map, not {type(d).__name__}")
        return cls(nofile=_rlimit(d, "nofile"), nproc=_rlimit(d, "nproc"),
                   core=_rlimit(d, "core"), memory_max=_positive(d, "memory_max"),
                   cpu_quota=_cpus(d), pids_max=_positive(d, "pids_max"))

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if value is None:
                continue
            out[key] = INFINITY if key in _RLIMITS and value == resource.RLIM_INFINITY \
                else value
        return out

    def rlimits(self) -> tuple[tuple[int, tuple[int, int]], ...]:
        """``(resource, (soft, hard))`` for every rlimit set; soft equals hard."""
        return tuple((res, (v, v)) for key, res in _RLIMITS.items()
                     if (v := getattr(self, key)) is not None)

    def cgroup_files(self) -> dict[str, tuple[str, str]]:
        """Interface file → (controller, value) for every cgroup limit set."""
        out: dict[str, tuple[str, str]] = {}
        if self.memory_max is not None:
            out["memory.max"] = ("memory", str(self.memory_max))
        if self.cpu_quota is not None:
            quota = max(1000, round(self.cpu_quota * CPU_PERIOD_US))
            out["cpu.max"] = ("cpu", f"{quota} {CPU_PERIOD_US}")
        if self.pids_max is not None:
            out["pids.max"] = ("pids", str(self.pids_max))
        return out


def require_cgroup_limits(limits: Limits, controllers: tuple[str, ...] | None) -> None:
    """Raises LimitUnenforceable when ``limits`` sets a cgroup limit and the owner has no
    per-app cgroups (``controllers`` None) or lacks that limit's controller."""
    files = limits.cgroup_files()
    if not files:
        return
    wanted = sorted(k for k, v in asdict(limits).items() if v is not None and k in _CGROUP)
    if controllers is None:
        raise LimitUnenforceable(
            f"limits {', '.join(wanted)} need per-app cgroups, and this owner has no "
            "delegated cgroup (it tracks apps by process group)", {"limits": wanted})
    missing = sorted({c for c, _ in files.values()} - set(controllers))
    if missing:
        raise LimitUnenforceable(
            f"the owner's cgroup does not have the {', '.join(missing)} controller "
            f"enabled (it has: {' '.join(controllers) or 'none'})",
            {"limits": wanted, "missing": missing})


def apply_cgroup_limits(limits: Limits, cgroup: str | os.PathLike[str]) -> None:
    """Write the cgroup limits into the app's (still empty) cgroup. Raises
    LimitUnenforceable when the kernel refuses a value or a file is missing."""
    for name, (_controller, value) in limits.cgroup_files().items():
        try:
            (Path(cgroup) / name).write_text(value)
        except OSError as e:
            raise LimitUnenforceable(f"cannot set {name} = {value}: {e.strerror}",
                                     {"file": name, "value": value}) from None
