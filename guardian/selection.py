"""`tenure release select` while no backend generation runs: put another release in
control, cold, from the recovery certificate the previous one wrote.

Recovery accepts a certificate only for the release that wrote it, and for a reason:
its facts are about the applications (owner instance, inventory digest, grant), but
every move of control to *another* release goes through the checks of a handoff's
``checked`` phase — the owner offers the contracts it needs, its preflight passes, and
the schema gate shows it can read and write the state on disk (backend.db). A cold
start of another release from the certificate would skip them. So a selection that
changes the release runs those same checks first (a failing one selects nothing); the
start that follows, in the same command, may then use the certificate the previous
release wrote, with every other condition of recovery unchanged (owner, inventory,
grant, staleness). A later `tenure backend recover` asks for this again: the checks
vouch for the moment they were made.
"""

from __future__ import annotations

import asyncio
from typing import Any

from protocol.errors import CapabilityMissing

from .coordinator import Coordinator
from .release import Release
from .schemas import check as check_schemas
from .schemas import declared, on_disk

__all__ = ["check_release", "missing_contracts"]


def missing_contracts(release: Release, offered: dict[str, Any]) -> dict[str, Any]:
    """The owner contracts ``release`` requires that the owner does not offer at exactly
    that version (``offered``: the owner's capabilities)."""
    return {k: v for k, v in release.contracts.items() if offered.get(k) != v}


async def check_release(co: Coordinator, release: Release) -> dict[str, Any]:
    """The checks of a handoff's ``checked`` phase for a cold start of ``release``:
    contracts, preflight and the schema gate against backend.db (no checkpoint is
    adopted, so no incumbent's checkpoint format matters). Returns the preflight report
    and the formats on disk. Raises CapabilityMissing, PreflightFailed,
    PreflightTimeout, SchemaIncompatible, and what asking the owner raises."""
    owner = await co.owner_status()
    missing = missing_contracts(release, owner["capabilities"])
    if missing:
        raise CapabilityMissing(f"the owner lacks {missing} that release {release.id} "
                                "requires", {"missing": missing})
    report = await co.preflight(release)
    co.declared[release.id] = declared(report)
    disk = await asyncio.to_thread(on_disk, co.paths.backend_db)
    check_schemas(co.declared[release.id], disk, None)
    return {"preflight": report, "formats_on_disk": disk}
