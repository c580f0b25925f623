"""backend.model.plain is dataclasses.asdict without the deep copies: the config revision
and every definition digest are computed from it, so it must give exactly what asdict
gives, for every kind of value a config holds (tuples, dicts, enums, nested dataclasses,
jobs, sockets, identities, limits, metrics and retention settings)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from backend.config import parse_config
from backend.model import plain

DEMO = (Path(__file__).resolve().parents[3] / "examples" / "demo.toml").read_text()
RICH = """
[settings]
[metrics]
listen = "127.0.0.1:9109"
[retention]
plans = 50
[stacks.web.apps.api]
command = ["srv", "--port", "8080"]
instances = 2
env = { B = "2", A = "1" }
after = ["db"]
user = "nobody"
supplementary_groups = ["a", "b"]
umask = "0027"
[stacks.web.apps.api.limits]
nofile = 1024
memory_max = "1G"
[stacks.web.apps.api.sockets.http]
listen = "127.0.0.1:8080"
[stacks.web.apps.api.sockets.admin]
listen = "unix:/run/a.sock"
[stacks.web.apps.db]
command = ["db"]
[stacks.web.jobs.migrate]
command = ["migrate", "--all"]
schedule = "30 3 * * MON-FRI"
time_zone = "Europe/Riga"
catch_up = true
after = ["db"]
"""


def walk(obj: Any) -> list[Any]:
    """Every dataclass instance reachable from ``obj``."""
    found = []
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        found.append(obj)
        for f in dataclasses.fields(obj):
            found += walk(getattr(obj, f.name))
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            found += walk(v)
    elif isinstance(obj, dict):
        for v in obj.values():
            found += walk(v)
    return found


def test_plain_is_asdict_for_every_value_of_a_config() -> None:
    for text in (DEMO, RICH):
        config = parse_config(text, "t.toml")
        values = walk(config)
        assert len(values) > 10
        for value in values:
            expected = dataclasses.asdict(value)
            got = plain(value)
            assert got == expected, type(value)
            assert json.dumps(got, sort_keys=True, default=str) == \
                json.dumps(expected, sort_keys=True, default=str), type(value)


def test_plain_keeps_container_types_and_leaves_other_values_alone() -> None:
    @dataclasses.dataclass(frozen=True)
    class Inner:
        t: tuple[int, ...] = (1, 2)

    @dataclasses.dataclass(frozen=True)
    class Outer:
        items: list[Inner]
        by: dict[str, Inner]
        n: int = 3

    got = plain(Outer([Inner()], {"k": Inner((3,))}))
    assert got == {"items": [{"t": (1, 2)}], "by": {"k": {"t": (3,)}}, "n": 3}
    assert type(got["items"]) is list and type(got["items"][0]["t"]) is tuple
    assert plain("text") == "text" and plain(None) is None
