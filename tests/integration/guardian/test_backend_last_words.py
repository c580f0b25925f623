"""A backend generation that ends before its first line: the guardian's error says its
exit status, the last line of its log (a traceback's names the error) and where that
log is, instead of only that it exited."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from guardian.backendproc import BackendProcess
from protocol.errors import HandoffFailed


def release(root: Path, main: str) -> Any:
    lib = root / "lib"
    (lib / "backend").mkdir(parents=True)
    (lib / "backend" / "__init__.py").write_text("")
    (lib / "backend" / "__main__.py").write_text(main)
    return SimpleNamespace(id="r1", lib=lib, interpreter=SimpleNamespace(path=sys.executable))


def standby_error(tmp_path: Path, main: str) -> HandoffFailed:
    rel = release(tmp_path, main)

    async def start() -> None:
        await BackendProcess.standby(rel, tmp_path, tmp_path, 30.0)
    with pytest.raises(HandoffFailed) as caught:
        asyncio.run(start())
    return caught.value


def test_a_backend_that_cannot_import_is_named_by_its_traceback(tmp_path: Path) -> None:
    err = standby_error(tmp_path, "import json\nimport tenure_no_such_module\n")
    assert err.msg.startswith("backend exited before it was ready (exit status 1): "
                              "ModuleNotFoundError: No module named "
                              "'tenure_no_such_module'; its log: ")
    log = Path(err.data["log"])
    assert log.parent == tmp_path and "Traceback" in log.read_text()
    assert err.data["exit_status"] == 1 and err.msg.endswith(str(log))


def test_a_backend_that_ends_silently_says_only_its_status(tmp_path: Path) -> None:
    err = standby_error(tmp_path, "raise SystemExit(7)\n")
    assert err.msg == (f"backend exited before it was ready (exit status 7); its log: "
                       f"{err.data['log']}")
