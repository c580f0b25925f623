"""Process identity: which exact process is behind a socket or a recorded PID.

A PID alone is reused by the kernel; ``(pid, start_ticks, boot_id)`` is not, and the
random ``instance`` id (128 bits, hex) distinguishes two runs of a daemon that happen to
reuse all three (never in practice, but cheap). Start ticks come from
:func:`protocol.procfs.start_ticks`.
"""

from __future__ import annotations

import os

from .errors import BadRequest
from .procfs import running, start_ticks
from .schema import Field, Schema
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["Identity", "boot_id", "new_identity", "start_ticks"]

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_fallback_boot_id: str | None = None


def boot_id() -> str:
    """This boot's id; a process-lifetime random id where the kernel offers none."""
    global _fallback_boot_id
    try:
        with open(_BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        if _fallback_boot_id is None:
            import psutil
            _fallback_boot_id = f"boot-{int(psutil.boot_time())}"
        return _fallback_boot_id


_SCHEMA = Schema(
    Field("instance", str),
    Field("pid", int),
    Field("start_ticks", int),
    Field("boot_id", str),
)


class Identity(Value):
    __slots__ = ("boot_id", "instance", "pid", "start_ticks")

    def __init__(self, instance: str, pid: int, start_ticks: int, boot_id: str) -> None:
        self.instance, self.pid = instance, pid
        self.start_ticks, self.boot_id = start_ticks, boot_id

    def to_wire(self) -> dict[str, Any]:
        return {"instance": self.instance, "pid": self.pid,
                "start_ticks": self.start_ticks, "boot_id": self.boot_id}

    @classmethod
    def from_wire(cls, obj: Any, where: str = "identity") -> Identity:
        """Raises BadRequest when a field is missing or mistyped."""
        d = _SCHEMA.validate(obj, where)
        if d["pid"] <= 0 or d["start_ticks"] < 0:
            raise BadRequest(f"{where} has an impossible pid or start_ticks")
        return cls(**d)

    def is_alive(self) -> bool:
        """True when the process with this pid and start time runs on this boot (an
        exited process that is not reaped yet does not)."""
        return self.boot_id == boot_id() and running(self.pid, self.start_ticks)


def new_identity(pid: int | None = None) -> Identity:
    """A fresh identity for the calling process (a new random instance id every call)."""
    pid = os.getpid() if pid is None else pid
    ticks = start_ticks(pid)
    if ticks is None:
        raise ProcessLookupError(pid)
    return Identity(instance=os.urandom(16).hex(), pid=pid, start_ticks=ticks,
                    boot_id=boot_id())
