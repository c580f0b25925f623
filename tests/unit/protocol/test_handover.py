"""Handoff records and checkpoints: one definition, round trips, and decoders that fail
closed with STATE_CORRUPT on anything malformed (never KeyError or TypeError)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import StateCorrupt
from protocol.handover import (
    handoff_grant,
    pack_checkpoint,
    pack_handoff,
    read_checkpoint,
    read_handoff,
    unpack_checkpoint,
    unpack_handoff,
    write_checkpoint,
    write_handoff,
)

OWNER = {"instance": "o-1", "pid": 10, "start_ticks": 5, "boot_id": "b"}
ROW = {"stack": "s", "app": "a", "instance": 0, "generation": 1, "launch_key": "k",
       "pid": 11, "start_ticks": 6, "restarts": 0, "state": "ready"}


def handoff() -> dict[str, Any]:
    return pack_handoff(activation="act", mode="upgrade", epoch=3, release="r" * 64,
                        owner=OWNER, checkpoint="/x/act.checkpoint.json", cursor=0)


def checkpoint() -> dict[str, Any]:
    return pack_checkpoint(from_activation="act", owner=OWNER, epoch=3, cursor=17,
                           config_revision="rev", instances=[{"stack": "s"}],
                           inventory=[ROW], operations=["op-1"], written_at=1.5)


def test_round_trips_through_files(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    write_handoff(tmp_path / "h.json", handoff())
    write_checkpoint(tmp_path / "c.json", checkpoint())
    assert read_handoff(tmp_path / "h.json") == handoff()
    assert read_checkpoint(tmp_path / "c.json") == checkpoint()


def test_the_signed_grant_round_trips_through_the_json_record(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    wire = {"grant": {"format": 1, "epoch": 3, "activation": "act", "release": "r",
                      "owner_instance": "o-1", "issued_at": 1.0}, "sig": b"\x00\xffsig"}
    body = pack_handoff(activation="act", mode="start", epoch=3, release="r", owner=OWNER,
                        checkpoint=None, cursor=0, grant=wire)
    write_handoff(tmp_path / "h.json", body)
    assert handoff_grant(read_handoff(tmp_path / "h.json")) == wire
    assert handoff_grant(handoff()) is None  # a record from before grants were presented
    for bad in ({"grant": {}}, {"grant": {}, "sig": "not base64!"}, "x"):
        with pytest.raises(StateCorrupt):
            handoff_grant(unpack_handoff({**handoff(), "grant": bad}))


def test_unknown_keys_are_ignored_missing_ones_fail_closed() -> None:
    assert unpack_handoff({**handoff(), "future": 1}) == handoff()
    for key in ("epoch", "owner", "activation"):
        body = handoff()
        del body[key]
        with pytest.raises(StateCorrupt) as info:
            unpack_handoff(body)
        assert key in info.value.msg


@pytest.mark.parametrize("field, value", [
    ("epoch", "3"), ("epoch", True), ("epoch", 0), ("cursor", -1), ("owner", []),
    ("checkpoint", 5), ("kind", "tenure-checkpoint"), ("format", 2)])
def test_mistyped_handoff_fields_fail_closed(field: str, value: Any) -> None:
    with pytest.raises(StateCorrupt):
        unpack_handoff({**handoff(), field: value})


@pytest.mark.parametrize("mutate", [
    lambda c: c["inventory"].append({"pid": 1}),
    lambda c: c["inventory"][0].update(pid="11"),
    lambda c: c["instances"].append(3),
    lambda c: c["operations"].append(None),
    lambda c: c["owner"].pop("boot_id"),
    lambda c: c.update(config_revision=None),
])
def test_malformed_checkpoints_fail_closed(mutate: Any) -> None:
    body = json.loads(json.dumps(checkpoint()))
    mutate(body)
    with pytest.raises(StateCorrupt):
        unpack_checkpoint(body)


def test_a_checkpoint_is_checked_when_written_and_written_on_one_line(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    bad = json.loads(json.dumps(checkpoint()))
    bad["inventory"][0]["pid"] = "11"
    with pytest.raises(StateCorrupt):
        write_checkpoint(tmp_path / "bad.json", bad)
    assert not list(tmp_path.iterdir())   # nothing written, not even a temp file
    write_checkpoint(tmp_path / "c.json", checkpoint())
    assert (tmp_path / "c.json").read_text().count("\n") == 1   # compact: the C encoder


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=12), inner, max_size=6),
                     max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_fuzzed_handoff_records_never_raise_anything_but_state_corrupt(obj: Any) -> None:
    try:
        unpack_handoff(obj)
    except StateCorrupt:
        pass


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(checkpoint())), _json, max_size=12))
def test_fuzzed_checkpoints_never_raise_anything_but_state_corrupt(patch: dict[str, Any]
                                                                   ) -> None:
    try:
        unpack_checkpoint({**checkpoint(), **patch})
    except StateCorrupt:
        pass


def test_a_checkpoint_names_its_deferred_instances_or_none() -> None:
    assert unpack_checkpoint(checkpoint())["deferred"] == []
    older = {k: v for k, v in checkpoint().items() if k != "deferred"}
    assert unpack_checkpoint(older)["deferred"] == []   # one an older generation wrote
    assert unpack_checkpoint({**checkpoint(), "deferred": ["s/a/0"]})["deferred"] == ["s/a/0"]
    for bad in ("s/a/0", [1], {"s/a/0": 1}, None):
        with pytest.raises(StateCorrupt, match="deferred is not a list of instance keys"):
            unpack_checkpoint({**checkpoint(), "deferred": bad})
