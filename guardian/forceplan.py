"""A forced recovery is a reviewed plan, never a silent adoption.

When the recovery certificate does not cover the world, `tenure backend recover
--dry-run` shows why, what the certificate vouched for, every live process the new
generation would adopt, and how that differs from the certificate; the plan has a
digest. `tenure backend recover --digest D` then recovers only if the plan computed
again has exactly that digest (the evidence did not change meanwhile), and keeps the
reviewed plan as evidence (runtime/evidence/<activation>.json, 0600) named in the
activation's receipts.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from protocol.durable import atomic_write_json
from protocol.errors import BadRequest, Conflict
from protocol.sockets import ensure_private_dir

from .cold import recovery_check

if TYPE_CHECKING:
    from .coordinator import Coordinator

__all__ = ["EVIDENCE_KIND", "checked_plan", "force_plan", "plan_digest", "write_evidence"]

EVIDENCE_KIND = "tenure-recover-evidence"
_CERT_KEYS = ("activation", "epoch", "release", "launches", "inventory_digest",
              "config_revision", "at")


async def force_plan(co: Coordinator) -> dict[str, Any]:
    """The plan of a forced recovery as of now, with its ``digest``."""
    check = await recovery_check(co)
    owner = await co.owner_status()
    live = (await co.owner_call("inventory"))["launches"]
    cert = co.certificate()
    body = cert.get("body") or {}
    plan: dict[str, Any] = {
        "covered": check.ok, "reason": check.reason, "nothing_runs": check.nothing_runs,
        "owner": {"identity": owner["owner"], "epoch": owner["epoch"],
                  "grant": owner.get("grant")},
        "release": co.state.selector().current,
        "certificate": {"valid": bool(cert.get("valid")),
                        **{k: body.get(k) for k in _CERT_KEYS}},
        "adopt": sorted(({k: r.get(k) for k in ("launch_key", "stack", "app", "instance",
                                                 "pid", "start_ticks")} for r in live),
                        key=lambda r: str(r["launch_key"])),
        "differences": _differences(body, live),
    }
    plan["digest"] = plan_digest(plan)
    return plan


def plan_digest(plan: dict[str, Any]) -> str:
    """sha256 of the plan's canonical JSON without its digest (the certificate's time
    is part of the evidence: a newer certificate is a different plan)."""
    body = {k: v for k, v in plan.items() if k != "digest"}
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def _differences(body: dict[str, Any], live: list[dict[str, Any]]) -> dict[str, Any]:
    """Live launches against the certificate's rows when it lists them; otherwise the
    two inventory digests (the certificate vouches for a digest only)."""
    from .recovery import digest
    rows = body.get("inventory")
    if not isinstance(rows, list):
        return {"certificate_digest": body.get("inventory_digest"),
                "live_digest": digest(live),
                "detail": "the certificate keeps its launches as a digest, not one by one"}
    want = {str(r.get("launch_key")): (r.get("pid"), r.get("start_ticks"))
            for r in rows if isinstance(r, dict)}
    have = {str(r["launch_key"]): (r.get("pid"), r.get("start_ticks")) for r in live}
    return {"gone": sorted(set(want) - set(have)),
            "unexpected": sorted(set(have) - set(want)),
            "replaced": sorted(k for k in set(want) & set(have) if want[k] != have[k])}


async def checked_plan(co: Coordinator, digest: str | None) -> dict[str, Any]:
    """The plan to perform for ``--digest``. Raises BadRequest without a digest and
    Conflict when the evidence changed since the operator reviewed it."""
    if not digest:
        raise BadRequest("a forced recovery adopts processes the certificate does not "
                         "vouch for: review it with `tenure backend recover --dry-run`, "
                         "then run `tenure backend recover --digest D`")
    plan = await force_plan(co)
    if plan["digest"] != digest:
        raise Conflict("the evidence changed since the plan was reviewed; review it again "
                       "with `tenure backend recover --dry-run`",
                       {"reviewed": digest, "current": plan["digest"]})
    return plan


def write_evidence(co: Coordinator, plan: dict[str, Any]) -> str:
    """Keep the reviewed plan (0600, atomic); returns its path."""
    directory = co.paths.runtime / "evidence"
    ensure_private_dir(directory, root=co.paths.home)
    path = directory / f"recover-{time.strftime('%Y%m%dT%H%M%S')}-{plan['digest'][:12]}.json"
    atomic_write_json(path, {"kind": EVIDENCE_KIND, "format": 1, "written_at": time.time(),
                             "plan": plan})
    return str(path)
