"""A prewarmed standby interpreter (guardian.backendproc.PREWARM) starts before its
release is verified, so it must run nothing of the release until it is told where the
verified release is: a lib/ whose backend package leaves a mark when imported shows
when that happens. An unused prewarm is stopped, and a prewarm of another interpreter
than the release's is replaced by a standby of the release's own."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from guardian.backendproc import BackendProcess

BACKEND = """
import json, os, sys
open(os.environ.get("MARK", "") or sys.argv[0] + ".mark", "w").close()
print(json.dumps({"standby": True, "report": {"ok": True}}), flush=True)
sys.stdin.readline()
"""


def fake_release(root: Path, interpreter: str = sys.executable) -> Any:
    lib = root / "lib"
    (lib / "backend").mkdir(parents=True)
    (lib / "backend" / "__init__.py").write_text("")
    (lib / "backend" / "__main__.py").write_text(BACKEND)
    return SimpleNamespace(id="r1", lib=lib, interpreter=SimpleNamespace(path=interpreter))


def test_no_release_code_runs_before_the_release_is_named(tmp_path: Path) -> None:
    rel = fake_release(tmp_path)
    mark = rel.lib / "backend" / "__main__.py.mark"

    async def main() -> None:
        warm = await BackendProcess.prewarm(sys.executable, tmp_path, tmp_path)
        try:
            await asyncio.sleep(0.3)           # its stdlib imports are done by now
            assert warm.alive() and not mark.exists()
            bp = await BackendProcess.standby(rel, tmp_path, tmp_path, 30.0, warm)
            assert bp is warm and bp.report == {"ok": True} and bp.release == "r1"
            assert mark.exists()
        finally:
            await warm.stop(kill_after=2.0)
        assert warm.exited.is_set()
    asyncio.run(main())


def test_a_prewarm_of_another_interpreter_is_not_used(tmp_path: Path) -> None:
    rel = fake_release(tmp_path, interpreter=sys.executable)

    async def main() -> None:
        other = "/bin/sh"   # not the release's interpreter: must not run it
        warm = await BackendProcess.prewarm(other, tmp_path, tmp_path)
        bp = await BackendProcess.standby(rel, tmp_path, tmp_path, 30.0, warm)
        try:
            assert bp is not warm and warm.exited.is_set()
            assert bp.report == {"ok": True}
        finally:
            await bp.stop(kill_after=2.0)
    asyncio.run(main())
