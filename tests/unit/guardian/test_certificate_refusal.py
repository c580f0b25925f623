"""`backend status` says `recovery: ready` only for a certificate recovery would accept:
the guardian's diagnostics mark a certificate that names another release than the
selected one (right after an upgrade, until the new generation certifies), another
owner instance or a grant it never issued as not valid, and say why (``refused``).
Fake owner and generations (guardian.testing)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from guardian.handoff import upgrade
from guardian.recovery import refusal
from guardian.testing import FakeCoordinator

OLD, NEW = "a" * 64, "b" * 64
OWNER = {"instance": "o1", "pid": 1, "start_ticks": 2, "boot_id": "b"}


def _body(**over: Any) -> dict[str, Any]:
    return {"activation": "act-1", "epoch": 3, "release": OLD, "owner": OWNER, **over}


def test_refusal_names_what_recovery_would_refuse() -> None:
    assert refusal(_body(), OLD, OWNER, 3) is None
    assert refusal(_body(), NEW, OWNER, 3) == \
        "the certificate was written by another release than the selected one"
    assert refusal(_body(), OLD, {**OWNER, "instance": "o2"}, 3) == \
        "the certificate names another owner instance"
    assert refusal(_body(), OLD, None, 3) is None          # owner not known: not compared
    for granted, epoch in ((None, 3), (2, 3), (3, True)):
        assert refusal(_body(epoch=epoch), OLD, OWNER, granted) == \
            "the certificate names a grant this guardian never issued"


def _certificate(co: FakeCoordinator) -> dict[str, Any]:
    co.write_diagnostics()
    cert: dict[str, Any] = co.status()["certificate"]
    return cert


def test_diagnostics_do_not_call_the_previous_releases_certificate_valid(tmp_path: Path):
    async def main() -> None:
        co = FakeCoordinator(tmp_path)
        try:
            await co.connect_owner()
            bp = await co.boot_generation(OLD)
            assert co.owner_identity is not None
            co.world.certificate = {"valid": True, "updated_at": 1.0, "body": {
                "activation": bp.activation, "epoch": co.world.epoch, "release": OLD,
                "owner": co.owner_identity.to_wire(), "launches": 0, "at": 1.0}}
            cert = _certificate(co)
            assert (cert["valid"], cert["refused"]) == (True, None)

            act = (await upgrade(co, NEW))["activation"]   # the fake never certifies
            assert act["phase"] == "complete", act
            cert = _certificate(co)
            assert cert["valid"] is False and cert["invalidated"] is None
            assert cert["refused"] == ("the certificate was written by another release "
                                       "than the selected one")
        finally:
            await co.cancel_tasks()
            co.state.close()
    asyncio.run(main())
