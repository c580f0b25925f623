"""Job templates as validated from tenure.toml: pure frozen data.

A template is what ``tenure job run s/name`` starts and what a schedule admits. What a
job runs is copied from its template when it is admitted (the record is pinned: a later
config change never alters an admitted job).
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import Struct, field

from ..model import RunAs, StopSpec

__all__ = ["DEFAULT_KEEP", "DEFAULT_MAX_PENDING", "JobTemplate", "Retention", "Schedule"]

DEFAULT_KEEP = 100
DEFAULT_MAX_PENDING = 1000


class Retention(Struct, frozen=True):
    """Finished records of a template are pruned beyond the newest ``keep`` or when they
    ended more than ``days`` ago (either rule prunes; None disables that rule). Open and
    ``recovery_required`` records are never pruned."""

    keep: int | None = DEFAULT_KEEP
    days: float | None = None


class Schedule(Struct, frozen=True):
    """A 5-field cron expression evaluated in ``time_zone``. ``catch_up``: a due time
    that passed while no backend was up is admitted late (True) or recorded as
    ``missed`` (False)."""

    cron: str
    time_zone: str = "UTC"
    catch_up: bool = False


class JobTemplate(Struct, frozen=True):
    name: str
    stack: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout: float | None = None          # seconds; None: no limit
    max_concurrent: int = 1
    max_pending: int = DEFAULT_MAX_PENDING  # open records (admitted+starting+running) at most
    retention: Retention = field(default_factory=Retention)
    schedule: Schedule | None = None
    after: tuple[str, ...] = ()           # apps of the stack that must be ready first
    stop: StopSpec = field(default_factory=StopSpec)
    run_as: RunAs = field(default_factory=RunAs)  # who it runs as (as apps: config_identity)

    @property
    def key(self) -> str:
        """``stack/name``: how the CLI and the ledger name a template."""
        return f"{self.stack}/{self.name}"
