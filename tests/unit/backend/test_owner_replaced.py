"""backend.adopt.owner_replaced: which log line says why instances start again."""

from __future__ import annotations

import pytest

from backend.adopt import owner_replaced

MINE = "2801c790-17c0-45f3-9ca6-e76766001f19"


@pytest.mark.parametrize(("certificate", "replaced"), [
    ({"owner": {"instance": "another", "pid": 7}}, True),            # tenure down, up
    ({"owner": {"instance": "another"}, "invalidated": "launch"}, True),
    ({"owner": {"instance": MINE}}, False),       # same owner: the backend was away
    ({"owner": None}, False),                     # no owner known: cannot tell
    ({}, False),
    (None, False),                                # never certified
    ({"owner": "another"}, False),                # damaged: AttributeError before
    ({"owner": ["another"]}, False),
    ({"owner": {"instance": 7}}, False),
])
def test_only_a_certificate_naming_another_owner_explains_the_loss(certificate, replaced):
    assert owner_replaced(certificate, MINE) is replaced
