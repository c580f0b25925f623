"""Grants are checked, not trusted by number: a real owner admits a mutation only on a
connection that presented the current grant, and trusts only the key it pinned."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from owner.testing import GuardianKey, OwnerProcess
from protocol.client import Client
from protocol.ed25519 import PrivateKey
from protocol.errors import BadSignature, OwnerChanged, StaleEpoch, Unauthorized
from protocol.grant import Grant, public_key_text

INTENT = {"stack": "s", "intent": "stopped", "expected_revision": 0}


def signed(gk: GuardianKey, epoch: int, instance: str, activation: str | None = None,
           key: PrivateKey | None = None) -> dict[str, Any]:
    grant = Grant(epoch, activation or str(uuid.uuid4()), "r", instance, time.time())
    return grant.sign(key or gk.key).to_wire()


def test_an_epoch_number_alone_changes_nothing(owner: OwnerProcess) -> None:
    gk = GuardianKey()
    with owner.client() as guardian, owner.client() as bare:
        epoch = gk.bootstrap(guardian, owner.instance)
        assert bare.call("status")["epoch"] == epoch  # reads need nothing
        with pytest.raises(Unauthorized, match="presented the current grant"):
            bare.call("stack.set_intent", INTENT, epoch=epoch)
        assert bare.call("stack.intents")["intents"] == {}
        # the fencing connection now presents the grant: it may
        assert guardian.call("stack.set_intent", INTENT, epoch=epoch)["revision"] == 1


def test_an_older_grant_is_stale_whatever_epoch_the_request_names(
        owner: OwnerProcess) -> None:
    gk = GuardianKey()
    with owner.client() as old, owner.client() as new:
        first = gk.bootstrap(old, owner.instance)
        second = gk.fence(new, owner.instance)
        assert second == first + 1
        for epoch in (first, second):
            with pytest.raises(StaleEpoch) as e:
                old.call("stack.set_intent", INTENT, epoch=epoch)
            assert e.value.data["current"] == second
        assert new.call("stack.set_intent", INTENT, epoch=second)["revision"] == 1


def test_a_signed_grant_for_the_epoch_but_another_activation_is_stale(
        owner: OwnerProcess) -> None:
    gk = GuardianKey()
    with owner.client() as guardian:
        epoch = gk.bootstrap(guardian, owner.instance)
    # signed by the real key, never fenced: the epoch matches, the activation does not
    other = signed(gk, epoch, owner.instance)
    with owner.client(grant=other) as c, pytest.raises(StaleEpoch):
        c.call("stack.set_intent", INTENT, epoch=epoch)


def test_forged_or_foreign_grants_are_refused_at_the_hello(owner: OwnerProcess) -> None:
    gk = GuardianKey()
    with owner.client() as guardian:
        epoch = gk.bootstrap(guardian, owner.instance)
    forged = signed(gk, epoch, owner.instance, key=PrivateKey.generate())
    with owner.client(grant=forged) as c, pytest.raises(BadSignature):
        c.call("status")
    foreign = signed(gk, epoch, "another-owner-instance")
    with owner.client(grant=foreign) as c, pytest.raises(OwnerChanged):
        c.call("status")


def test_the_pinned_key_is_held_not_re_read(owner: OwnerProcess, short_home: Path) -> None:
    gk, intruder = GuardianKey(), GuardianKey()
    with owner.client() as c:
        epoch = gk.bootstrap(c, owner.instance)
    pub = owner.paths.guardian_pub
    Path(pub).write_text(public_key_text(intruder.key.public_key()) + "\n")  # swapped
    with owner.client() as c, pytest.raises(BadSignature):
        c.call("fence", {"grant": signed(intruder, epoch + 1, owner.instance,
                                         key=intruder.key)})
    Path(pub).write_text(public_key_text(gk.key.public_key()) + "\n")
    # after a restart the owner reads back only a private file of its own
    assert owner.stop() == 0
    os.chmod(pub, 0o644)
    res = owner.run_exit("serve")
    assert res.returncode == 2 and "guardian.pub" in res.stderr, res.stderr
    os.chmod(pub, 0o600)
    # a file that holds no key: STATE_CORRUPT naming it, exit 2 (was a UnicodeDecodeError
    # traceback, exit 1, and for text that is no key BAD_REQUEST without the path)
    kept = Path(pub).read_bytes()
    for junk in (b"\xff\xfe not text\n", b"not a key\n"):
        Path(pub).write_bytes(junk)
        res = owner.run_exit("serve")
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert f"STATE_CORRUPT: {pub} does not hold the guardian's public key" in \
            res.stderr, res.stderr
    Path(pub).write_bytes(kept)
    again = OwnerProcess(short_home).start()
    try:
        with again.client() as c:
            assert gk.fence(c, again.instance) == epoch + 1  # no pin needed: it is held
    finally:
        assert again.stop() == 0


def test_the_refused_shutdown_really_was_refused(owner: OwnerProcess) -> None:
    gk = GuardianKey()
    with owner.client() as c:
        epoch = gk.bootstrap(c, owner.instance)
    with Client(owner.paths.sock) as bare, pytest.raises(Unauthorized):
        bare.call("shutdown", {}, epoch=epoch)
    with owner.client() as c:
        assert c.call("status")["draining"] is False
