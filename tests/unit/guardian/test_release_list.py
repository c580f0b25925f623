"""`release.list` answers why an entry of runtime/releases is corrupt (``reason``), as
guardian.release.list_releases found it, and carries no reason for any other entry.
The real coordinator over a fake world (guardian.testing)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from guardian.manifest import DEFAULT_CONTRACTS, RUNTIME_NAME, canonical_json, release_id
from guardian.service import GuardianService
from guardian.testing import FakeCoordinator


def _manifest() -> bytes:
    return canonical_json({
        "format": 1, "tenure_version": "0.1.0", "source_commit": None,
        "interpreter": {"path": "/usr/bin/python3.11", "version": "3.11.7",
                        "sha256": "a" * 64},
        "files": {"lib/protocol/__init__.py": "b" * 64},
        "contracts": dict(DEFAULT_CONTRACTS)})


def _listed(tmp_path: Path, fill: Any) -> dict[str, dict[str, Any]]:
    async def main() -> dict[str, dict[str, Any]]:
        co = FakeCoordinator(tmp_path)
        try:
            fill(Path(co.paths.releases))
            got = await GuardianService(co, lambda: None).release_list(None)  # type: ignore[arg-type]
            return {x["release"]: x for x in got["releases"]}
        finally:
            await co.cancel_tasks()
            co.state.close()
    return asyncio.run(main())


def test_a_corrupt_entry_is_listed_with_its_reason(tmp_path: Path) -> None:
    good = release_id(_manifest())
    misnamed, tmp = "2" * 64, good + ".tmp-abc"

    def fill(releases: Path) -> None:
        (releases / good).mkdir()
        (releases / good / RUNTIME_NAME).write_bytes(_manifest())
        (releases / misnamed).mkdir()
        (releases / misnamed / RUNTIME_NAME).write_bytes(_manifest())
        (releases / tmp).mkdir()
        (releases / "junk").write_text("")
    got = _listed(tmp_path, fill)
    assert got[good]["status"] == "ok" and "reason" not in got[good]
    assert got[tmp]["status"] == "incomplete" and "reason" not in got[tmp]
    assert got[misnamed]["status"] == "corrupt"
    assert got[misnamed]["reason"] == \
        f"STATE_CORRUPT: {RUNTIME_NAME} does not hash to the directory name"
    assert got["junk"] == {"release": "junk", "status": "corrupt", "current": False,
                           "previous": False,
                           "reason": "STATE_CORRUPT: junk: not a release id"}
