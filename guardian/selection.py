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

from protocol.errors import CapabilityMissing, StateCorrupt

from .coordinator import Coordinator
from .release import Release
from .schemas import check as check_schemas
from .schemas import declared, on_disk

__all__ = ["check_contracts", "check_release", "missing_contracts", "reported_contracts"]


def reported_contracts(preflight: dict[str, Any] | None) -> dict[str, int]:
    """The owner contracts a release's code asks for, as its preflight result reports them
    (``report.contracts``: the ``CONTRACTS`` its generation connects to the owner with);
    {} when there is no result or the report names none (releases from before reports
    carried them). Raises StateCorrupt for malformed contracts: a requirement that cannot
    be read is not taken to be none."""
    report = (preflight or {}).get("report")
    contracts = report.get("contracts") if isinstance(report, dict) else None
    if contracts is None:
        return {}
    if not isinstance(contracts, dict) or not all(
            isinstance(k, str) and type(v) is int for k, v in contracts.items()):
        raise StateCorrupt("the release's preflight reports malformed contracts",
                           {"contracts": contracts})
    return contracts


def missing_contracts(release: Release, offered: dict[str, Any],
                      preflight: dict[str, Any] | None = None) -> dict[str, Any]:
    """The owner contracts ``release`` requires that the owner does not offer at exactly
    that version (``offered``: the owner's capabilities). Required is the union of what
    its RUNTIME.json declares and, given its ``preflight`` result, what its code reports:
    the code is what asks the owner when the generation attaches, so a manifest that
    says less must not let the release past the check. A contract the two name at
    different versions is missing at least once (the owner offers one version); the
    code's version is named then. Raises StateCorrupt (reported_contracts)."""
    wanted = [*release.contracts.items(), *reported_contracts(preflight).items()]
    return {k: v for k, v in wanted if offered.get(k) != v}


def check_contracts(release: Release, offered: dict[str, Any],
                    preflight: dict[str, Any] | None = None, who: str | None = None
                    ) -> None:
    """Refuse ``release`` when the owner lacks a contract it requires
    (:func:`missing_contracts`); ``who`` names it in the message (default: its id).
    Changes nothing. Raises CapabilityMissing (``data.missing``: name -> version),
    StateCorrupt."""
    missing = missing_contracts(release, offered, preflight)
    if missing:
        names = ", ".join(f"{k}@{v}" for k, v in sorted(missing.items()))
        raise CapabilityMissing(f"the owner lacks {names} that "
                                f"{who or 'release ' + release.id} requires",
                                {"missing": missing})


async def check_release(co: Coordinator, release: Release) -> dict[str, Any]:
    """The checks of a handoff's ``checked`` phase for a cold start of ``release``:
    contracts (its RUNTIME.json's before the preflight, then those its preflight reports
    too), preflight and the schema gate against backend.db (no checkpoint is adopted, so
    no incumbent's checkpoint format matters). Returns the preflight report and the
    formats on disk. Nothing is selected or started here. Raises CapabilityMissing,
    PreflightFailed, PreflightTimeout, SchemaIncompatible, StateCorrupt, and what asking
    the owner raises."""
    owner = await co.owner_status()
    check_contracts(release, owner["capabilities"])
    report = await co.preflight(release)
    check_contracts(release, owner["capabilities"], report)
    co.declared[release.id] = declared(report)
    disk = await asyncio.to_thread(on_disk, co.paths.backend_db)
    check_schemas(co.declared[release.id], disk, None)
    return {"preflight": report, "formats_on_disk": disk}
