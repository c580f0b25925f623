"""start, stop and restart are refused, with nothing done, while the backend has had no
word from the owner for STALE_AFTER: before, each waited its whole --timeout for an owner
that did not answer (stopped: 150 s, then TIMEOUT) and stayed pending after. A fake
owner; nothing sleeps."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from backend.instance import State
from backend.testing import FakeOwner, api_call, go_stale, ready_generation
from protocol.errors import OwnerUnavailable, ShuttingDown, TransportLost

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


async def refused_while_silent(gen: Any, owner: FakeOwner,
                               ask: Callable[[], Awaitable[Any]]) -> OwnerUnavailable:
    """``ask()`` once ``gen``'s view of the owner is stale: its OwnerUnavailable, with
    nothing sent to the owner."""
    sent = list(owner.calls)
    go_stale(gen)
    with pytest.raises(OwnerUnavailable) as refused:
        await ask()
    assert owner.calls == sent
    return refused.value


@pytest.mark.parametrize("verb", ["start", "stop", "restart"])
def test_a_command_acting_through_a_silent_owner_is_refused_untouched(tmp_path: Path,
                                                                      verb: str):
    async def main() -> None:
        owner = FakeOwner()
        async with ready_generation(tmp_path, owner, ONE) as gen:
            refused = await refused_while_silent(gen, owner, lambda: getattr(gen.api, verb)(
                api_call(verb, target="s/a", timeout=30.0)))
            assert refused.msg.startswith("the owner has not answered for ")
            assert f"(pid {os.getpid()} runs (state R) but did not answer); {verb} s/a " \
                "was not done" in refused.msg
            assert refused.data["owner_link"]["current"] is False
            assert gen.sup.instances["s/a/0"].state is State.READY
            assert not gen.api.busy()

            gen.link.heard()   # the owner answers again: so does the command
            done = await gen.api.restart(api_call("restart", target="s/a", timeout=30.0))
            assert done["settled"] is True
            assert [p["launch_key"] for p in owner.sent("launch")][-1] == "s/a/0/2"

    asyncio.run(main())


def test_a_log_read_through_a_silent_owner_is_refused_at_once(tmp_path: Path):
    """Regression: `tenure logs` with the owner stopped failed after 11 s with the
    backend's reconnect error (CONNECT_FAILED: handshake ... no answer within 5 s)."""
    async def main() -> None:
        owner = FakeOwner()
        async with ready_generation(tmp_path, owner, ONE) as gen:
            refused = await refused_while_silent(
                gen, owner, lambda: gen.api.logs(api_call("logs", targets=["s/a"])))
            assert "; reading the logs was not done" in refused.msg

    asyncio.run(main())


@pytest.mark.parametrize(("error", "said"), [
    # the owner stopped during a read; the connection's heartbeat gave up on it, and the
    # read failed with TRANSPORT_LOST (outcome unknown, which a read is not)
    (TransportLost("logs.read: connection lost (connection lost)"),
     "the owner did not answer (logs.read: connection lost (connection lost)) "
     f"(pid {os.getpid()} runs (state R) but did not answer); reading the logs was not "
     "done"),
    # an owner upgrade closes the old owner's journal before its socket: a read in
    # between came back BAD_REQUEST "journal is closed"
    (ShuttingDown("journal is closed"),
     "the owner is stopping (journal is closed); reading the logs was not done")])
def test_a_log_read_the_owner_could_not_answer_is_owner_unavailable(
        tmp_path: Path, error: Exception, said: str):
    """Regression: `tenure logs -f` ended (exit 2) instead of waiting for the owner."""
    async def main() -> None:
        owner = FakeOwner()
        async with ready_generation(tmp_path, owner, ONE) as gen:
            def fails(method: str, params: dict[str, object]) -> None:
                if method == "logs.read":
                    raise error
            owner.before = fails
            with pytest.raises(OwnerUnavailable) as refused:
                await gen.api.logs(api_call("logs", targets=["s/a"]))
            assert refused.value.msg.startswith(said), refused.value.msg
            assert refused.value.data["owner_link"]["current"] is True

    asyncio.run(main())
