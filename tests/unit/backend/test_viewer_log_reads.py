"""Viewers' `logs` calls reach the owner VIEWER_READS at a time, and an admin's read is
never queued behind them. Was: every viewer read (up to 32 connections x 64 requests)
became a `logs.read` on the backend's one owner connection, each answer up to 4 MiB,
and the heartbeat's answer behind them timed out: the connection was dropped, launches
and stops on it with it. Fake owner whose reads are held; real generation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from backend.api_logs import VIEWER_READS
from backend.generation import Generation
from backend.testing import FakeOwner, run_generation, until
from protocol.server import Call

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
PAGE = {"records": [], "more": False, "next": 0, "last_id": 0}


def _logs(role: str) -> Call:
    conn = SimpleNamespace(role=role, peer=SimpleNamespace(uid=1000))
    return Call("logs", {"limit": 100}, None, 1, conn)  # type: ignore[arg-type]


def test_viewers_reads_take_turns_and_an_admins_goes_by(tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        owner._logs_read = lambda p: dict(PAGE)  # type: ignore[attr-defined]
        owner.hold("logs.read")
        viewers = [asyncio.create_task(gen.api.logs(_logs("viewer"))) for _ in range(20)]
        await until(lambda: len(owner.sent("logs.read")) >= VIEWER_READS, "viewer reads")
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(owner.sent("logs.read")) == VIEWER_READS    # the rest wait their turn
        admin = asyncio.create_task(gen.api.logs(_logs("admin")))
        await until(lambda: len(owner.sent("logs.read")) == VIEWER_READS + 1, "admin's")
        owner.release("logs.read")
        answers: list[Any] = await asyncio.gather(admin, *viewers)
        assert answers == [PAGE] * 21
        assert len(owner.sent("logs.read")) == 21
    run_generation(tmp_path, ONE, body)
