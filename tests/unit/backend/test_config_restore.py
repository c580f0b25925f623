"""backend.configrestore: with no applied config in backend.db while apps run, a generation
adopts them by the config given, which must be the one the certificate vouches for."""

from __future__ import annotations

import pytest

from backend.config import parse_recent
from backend.configrestore import adopting_config
from backend.queuefile import queue
from protocol.errors import Uncertain

APPLIED = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def _revision(text: str) -> str:
    return parse_recent(text, "/etc/tenure.toml").revision


def test_a_certificate_that_vouches_for_no_config_takes_what_is_given(tmp_path):
    queued = str(tmp_path / "queued-config.json")
    for cert in (None, {"config_revision": ""}, {"invalidated": "a stop"}):
        with pytest.raises(Uncertain, match="no recovery certificate names one"):
            adopting_config(cert, queued)   # nothing given: not an empty config
    queue(queued, APPLIED, "/etc/tenure.toml")
    for cert in (None, {"config_revision": ""}):
        got = adopting_config(cert, queued)
        assert got is not None and got[0].revision == _revision(APPLIED)


def test_without_the_config_given_the_generation_refuses_naming_the_way_out(tmp_path):
    with pytest.raises(Uncertain, match="backend recover --config FILE"):
        adopting_config({"config_revision": _revision(APPLIED)},
                       str(tmp_path / "queued-config.json"))


def test_another_config_is_refused_and_the_same_one_in_other_words_is_taken(tmp_path):
    queued = str(tmp_path / "queued-config.json")
    cert = {"config_revision": _revision(APPLIED)}
    queue(queued, APPLIED.replace("1000", "2000"), "/etc/edited.toml")
    with pytest.raises(Uncertain, match=r"/etc/edited\.toml.*is not the one the recovery"):
        adopting_config(cert, queued)
    text = "# kept as it was applied\n" + APPLIED.replace(" = ", "=")
    queue(queued, text, "/etc/tenure.toml")
    got = adopting_config(cert, queued)
    assert got is not None
    config, given = got
    assert config.revision == cert["config_revision"] and given == text
