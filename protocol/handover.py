"""The records handed from one generation to the next, defined once.

- The **handoff record** (``runtime/handoffs/<activation>.json``) is written by the
  guardian before it starts a generation: which activation, epoch and release it runs
  under, which owner instance it must find, and the checkpoint or cursor to adopt from.
- The **checkpoint** (``runtime/handoffs/<activation>.checkpoint.json``) is written by a
  draining incumbent: its owner, epoch, observation cursor, config revision, every
  instance's state and the inventory a successor must find live. It holds resolved
  environments: never print or log it.

Both are versioned JSON files written atomically. ``pack_*`` are pure functions that
build the body; ``unpack_*`` check every required field's presence and type and fail
closed with ``STATE_CORRUPT`` naming the file and the field (never ``KeyError``);
unknown keys are ignored. ``read_*`` add the file's safety checks (protocol.durable).

``OWNER_CONTRACTS`` are the owner capabilities every generation (and the guardian)
requires, at exactly these versions.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from .durable import atomic_write_json, read_json
from .errors import StateCorrupt

__all__ = ["CHECKPOINT_KIND", "HANDOFF_KIND", "OWNER_CONTRACTS", "handoff_grant",
           "pack_checkpoint", "pack_handoff", "read_checkpoint", "read_handoff",
           "unpack_checkpoint", "unpack_handoff", "write_checkpoint", "write_handoff"]

HANDOFF_KIND = "tenure-handoff"
CHECKPOINT_KIND = "tenure-checkpoint"
FORMAT = 1
# stackControl 2: a generation presents its grant on its owner connection (protocol.md)
OWNER_CONTRACTS: dict[str, int] = {"stackControl": 2, "logJournal": 1, "notify": 1,
                                   "observations": 1}

_IDENTITY = {"instance": str, "pid": int, "start_ticks": int, "boot_id": str}
_HANDOFF = {"activation": str, "mode": str, "epoch": int, "release": str, "owner": dict,
            "checkpoint": (str, type(None)), "cursor": int}
_CHECKPOINT = {"from_activation": str, "owner": dict, "epoch": int, "cursor": int,
               "config_revision": str, "instances": list, "inventory": list,
               "operations": list, "written_at": float}
_INVENTORY_ROW = {"stack": str, "app": str, "instance": int, "generation": int,
                  "launch_key": str, "pid": int, "start_ticks": (int, type(None)),
                  "restarts": int, "state": str}


def pack_handoff(*, activation: str, mode: str, epoch: int, release: str,
                 owner: dict[str, Any], checkpoint: str | None, cursor: int,
                 grant: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"kind": HANDOFF_KIND, "format": FORMAT, "activation": activation, "mode": mode,
            "epoch": epoch, "release": release, "owner": owner, "checkpoint": checkpoint,
            "cursor": cursor}
    if grant is not None:  # JSON has no bytes: the signature goes as base64 text
        body["grant"] = {"grant": grant["grant"],
                         "sig": base64.b64encode(grant["sig"]).decode()}
    return unpack_handoff(body)


def handoff_grant(record: dict[str, Any]) -> dict[str, Any] | None:
    """The signed grant of an unpacked handoff record in its wire form (``{grant, sig}``
    with ``sig`` as bytes), or None for a record without one. Raises StateCorrupt."""
    held = record.get("grant")
    if held is None:
        return None
    try:
        return {"grant": held["grant"], "sig": base64.b64decode(held["sig"], validate=True)}
    except (KeyError, TypeError, ValueError):
        raise StateCorrupt("handoff record: grant is malformed", {"field": "grant"}) from None


def pack_checkpoint(*, from_activation: str, owner: dict[str, Any], epoch: int, cursor: int,
                    config_revision: str, instances: list[dict[str, Any]],
                    inventory: list[dict[str, Any]], operations: list[str],
                    written_at: float, deferred: list[str] | None = None) -> dict[str, Any]:
    """A checkpoint's body, as :func:`write_checkpoint` validates and writes it.
    ``deferred``: the keys of instances whose start waits for a queued config."""
    return {
        "kind": CHECKPOINT_KIND, "format": FORMAT, "from_activation": from_activation,
        "owner": owner, "epoch": epoch, "cursor": cursor, "config_revision": config_revision,
        "instances": instances, "inventory": inventory, "operations": operations,
        "written_at": written_at, "deferred": deferred or []}


def unpack_handoff(obj: Any, where: str = "handoff record") -> dict[str, Any]:
    """The validated record (unknown keys dropped). Raises StateCorrupt."""
    body = _fields(obj, HANDOFF_KIND, _HANDOFF, where)
    body["owner"] = _fields(body["owner"], None, _IDENTITY, f"{where}: owner")
    grant = obj.get("grant")  # optional: the signed grant of ``epoch`` (protocol.md)
    if grant is not None:
        if not isinstance(grant, dict):
            raise StateCorrupt(f"{where}: grant must be a map", {"where": where,
                                                                  "field": "grant"})
        body["grant"] = grant
    if body["epoch"] < 1 or body["cursor"] < 0:
        raise StateCorrupt(f"{where}: epoch must be >= 1 and cursor >= 0", {"where": where})
    return body


def unpack_checkpoint(obj: Any, where: str = "checkpoint") -> dict[str, Any]:
    """The validated checkpoint (unknown keys dropped). Raises StateCorrupt."""
    body = _fields(obj, CHECKPOINT_KIND, _CHECKPOINT, where)
    body["owner"] = _fields(body["owner"], None, _IDENTITY, f"{where}: owner")
    body["inventory"] = [_fields(r, None, _INVENTORY_ROW, f"{where}: inventory[{i}]")
                         for i, r in enumerate(body["inventory"])]
    for i, inst in enumerate(body["instances"]):
        if not isinstance(inst, dict):
            raise StateCorrupt(f"{where}: instances[{i}] is not a map", {"where": where})
    for i, op in enumerate(body["operations"]):
        if not isinstance(op, str):
            raise StateCorrupt(f"{where}: operations[{i}] is not an id", {"where": where})
    deferred = obj.get("deferred", [])   # optional: an older generation writes none
    if not isinstance(deferred, list) or not all(isinstance(k, str) for k in deferred):
        raise StateCorrupt(f"{where}: deferred is not a list of instance keys",
                           {"where": where, "field": "deferred"})
    body["deferred"] = deferred
    return body


def write_handoff(path: str | os.PathLike[str], body: dict[str, Any]) -> None:
    atomic_write_json(path, unpack_handoff(body))


def write_checkpoint(path: str | os.PathLike[str], body: dict[str, Any]) -> None:
    """Validate ``body`` and write it, compact: it is written inside a handoff's pause
    and read by programs only (it holds env: never shown)."""
    atomic_write_json(path, unpack_checkpoint(body), compact=True)


def read_handoff(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Raises FileNotFoundError, UnsafePath, StateCorrupt."""
    return unpack_handoff(read_json(path, HANDOFF_KIND), os.fspath(path))


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Raises FileNotFoundError, UnsafePath, StateCorrupt."""
    return unpack_checkpoint(read_json(path, CHECKPOINT_KIND), os.fspath(path))


def _fields(obj: Any, kind: str | None, spec: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise StateCorrupt(f"{where} is not a map", {"where": where})
    if kind is not None and (obj.get("kind") != kind or obj.get("format") != FORMAT):
        raise StateCorrupt(f"{where} is not a {kind} record of format {FORMAT}",
                           {"where": where})
    out: dict[str, Any] = {} if kind is None else {"kind": kind, "format": FORMAT}
    for name, types in spec.items():
        if name not in obj:
            raise StateCorrupt(f"{where}: {name} is missing", {"where": where, "field": name})
        value = obj[name]
        if not _accepts(value, types):
            raise StateCorrupt(f"{where}: {name} has the wrong type", {"where": where,
                                                                         "field": name})
        out[name] = value
    return out


def _accepts(value: Any, types: Any) -> bool:
    if type(value) is types:   # the common case, at once: a checkpoint has ~9 per launch
        return True
    allowed = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int) and float in allowed:
        return True
    return isinstance(value, allowed)
