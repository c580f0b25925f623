"""Every answer of the owner to the guardian is a word from it (the owner link's
``seen``), not only the owner watch's: a new guardian retrying its first recovery for
~100 s (the watch starts after it) said `owner link: connected, last word 23.0s ago;
pid N runs but did not answer` while the owner answered each of its fences."""

from __future__ import annotations

import asyncio
from pathlib import Path

from guardian.testing import FakeCoordinator


def test_an_answer_of_the_owner_is_a_word_from_it(tmp_path: Path) -> None:
    async def main() -> None:
        co = FakeCoordinator(tmp_path)
        try:
            co.owner_link.heard(23.0)
            assert co.owner_link.current() is False
            await co.owner_call("status")
            link = co.owner_link.to_wire()
            assert link["state"] == "connected" and link["current"] is True, link
            assert link["age"] < 1.0, link
        finally:
            await co.cancel_tasks()
            co.state.close()
    asyncio.run(main())
