"""`tenure --json metrics` gives every exit reason of every instance, 0 included, as the
exposition does (`tenure_app_exits_total`). Was: `exits: {}` for an instance that never
exited and `{"failure": 5}` for one that only failed: a script reading
`exits["requested"]` failed with a KeyError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.instance_types import ExitReason
from backend.testing import FakeOwner, api_call, go_stale, run_generation

TWO = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = 2\n'


def test_every_exit_reason_is_in_the_answer_zero_included(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        go_stale(gen)                       # no owner measurement asked: not needed here
        gen.sup.instances["s/a/1"].exits = {ExitReason.FAILURE: 5}
        answer = await gen.api.metrics(api_call("metrics"))
        exits = {a["key"]: a["exits"] for a in answer["apps"]}
        assert exits == {"s/a/0": dict.fromkeys(map(str, ExitReason), 0),
                         "s/a/1": {**dict.fromkeys(map(str, ExitReason), 0),
                                   "failure": 5}}
        assert list(exits["s/a/0"]) == ["requested", "success", "failure", "signal"]

    run_generation(tmp_path, TWO, body)
