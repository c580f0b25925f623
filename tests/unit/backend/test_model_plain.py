"""backend.model.plain turns the config model into plain values without copying what is
immutable: the config revision and every definition digest are computed from it, so it
must give exactly what a full recursive conversion gives, for every kind of value a
config holds (tuples, dicts, enums, nested structs, jobs, sockets, identities, limits,
metrics and retention settings), and revisions recorded by earlier releases must still
match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgspec import Struct

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
    """Every struct instance reachable from ``obj``."""
    found = []
    if isinstance(obj, Struct):
        found.append(obj)
        for name in obj.__struct_fields__:
            found += walk(getattr(obj, name))
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            found += walk(v)
    elif isinstance(obj, dict):
        for v in obj.values():
            found += walk(v)
    return found


def converted(obj: Any) -> Any:
    """The reference: a struct becomes a dict of its fields, recursively, and every list,
    tuple and dict is copied with its type kept (what dataclasses.asdict gave when the
    model was made of dataclasses)."""
    if isinstance(obj, Struct):
        return {name: converted(getattr(obj, name)) for name in obj.__struct_fields__}
    if isinstance(obj, (list, tuple)):
        return type(obj)(converted(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((converted(k), converted(v)) for k, v in obj.items())
    return obj


def test_plain_is_the_full_conversion_for_every_value_of_a_config() -> None:
    for text in (DEMO, RICH):
        config = parse_config(text, "t.toml")
        values = walk(config)
        assert len(values) > 10
        for value in values:
            expected = converted(value)
            got = plain(value)
            assert got == expected, type(value)
            assert json.dumps(got, sort_keys=True, default=str) == \
                json.dumps(expected, sort_keys=True, default=str), type(value)


def test_revision_and_definition_digests_are_what_earlier_releases_computed() -> None:
    # computed when the model was made of dataclasses: a hot upgrade's candidate must
    # compute what the incumbent recorded, or every app would look changed to it
    config = parse_config(RICH, "t.toml")
    assert config.revision == \
        "e87589213de44520e2cfd9ff37e712bc8dda5aa08463f19ccafb5dd7acda6aad"
    apps = config.stacks["web"].apps
    # A definition digest is only ever compared with another computed by the same
    # backend (plans, taking a config); an app with sockets has had a new one since a
    # socket's backlog, mode and owner left its definition (they change in place).
    assert apps["api"].definition_digest() == \
        "bce6c9bb5d92da228c5f8dfd3a888ad095dbbee8b32cd981847ec7437972a280"
    assert apps["db"].definition_digest() == \
        "671306e44cc3257fd64bb9b087e6550526fadae176d6407f30fdfa4c018b7851"


def test_plain_keeps_container_types_and_leaves_other_values_alone() -> None:
    class Inner(Struct, frozen=True):
        t: tuple[int, ...] = (1, 2)

    class Outer(Struct, frozen=True):
        items: list[Inner]
        by: dict[str, Inner]
        n: int = 3

    got = plain(Outer([Inner()], {"k": Inner((3,))}))
    assert got == {"items": [{"t": (1, 2)}], "by": {"k": {"t": (3,)}}, "n": 3}
    assert type(got["items"]) is list and type(got["items"][0]["t"]) is tuple
    assert plain("text") == "text" and plain(None) is None
