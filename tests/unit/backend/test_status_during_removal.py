"""status and inspect ask the owner, then build their rows: an apply that removes an
instance meanwhile leaves it out. Was: INTERNAL (KeyError), once per such apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.generation import Generation
from backend.testing import FakeOwner, api_call, run_generation

TWO = '[stacks.s.apps.a]\ncommand = ["srv"]\n[stacks.s.apps.b]\ncommand = ["srv"]\n'


def test_an_instance_removed_while_the_owner_is_asked_is_left_out(tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        api, ask = gen.api, gen.api._ask_owner

        async def asked_while_removed(keys: Any, link: Any) -> Any:
            answer = await ask(keys, link)
            gen.sup.instances.pop("s/b/0", None)    # as an apply that removes s/b does
            return answer
        api._ask_owner = asked_while_removed  # type: ignore[method-assign]
        rows = (await api.status(api_call("status")))["apps"]
        assert [r["key"] for r in rows] == ["s/a/0"]
        gen.sup.instances["s/b/0"] = gen.sup.instances["s/a/0"]   # back for inspect
        shown = await api.inspect(api_call("inspect", target="s/*"))
        assert [r["key"] for r in shown["instances"]] == ["s/a/0"]

    run_generation(tmp_path, TWO, body)
