"""``[metrics] listen``: parsed, validated with its line, and kept out of old revisions."""

from __future__ import annotations

import pytest

from backend.config import parse_config
from backend.config_metrics import parse_listen
from protocol.errors import ConfigInvalid

APP = '[stacks.s.apps.a]\ncommand = ["sleep", "1"]\n'


def test_listen_is_opt_in_and_leaves_the_revision_of_configs_without_it():
    plain = parse_config(APP, "t.toml")
    assert plain.metrics.listen is None
    on = parse_config(f'[metrics]\nlisten = "127.0.0.1:9464"\n{APP}', "t.toml")
    assert on.metrics.listen == "127.0.0.1:9464" and on.revision != plain.revision
    assert parse_config(f"[metrics]\n{APP}", "t.toml").revision == plain.revision


@pytest.mark.parametrize(("text", "want"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:1", ("::1", 1)),
    ("localhost:65535", ("localhost", 65535)), ("0.0.0.0:80", ("0.0.0.0", 80))])
def test_good_addresses(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["127.0.0.1", ":9464", "127.0.0.1:0", "127.0.0.1:65536",
                                  "127.0.0.1:+80", "::1:80", "[127.0.0.1]:80",
                                  "example.com:80", "[localhost]:80", "127.0.0.1:080", ""])
def test_bad_addresses_are_refused(text):
    assert parse_listen(text) is None


def test_errors_name_the_key_and_its_line():
    with pytest.raises(ConfigInvalid) as e:
        parse_config(f'{APP}\n[metrics]\nlisten = "host:1"\n', "t.toml")
    assert e.value.data["key"] == "metrics.listen" and e.value.data["line"] == 5
    with pytest.raises(ConfigInvalid) as e:
        parse_config(f'[metrics]\nport = 9\n{APP}', "t.toml")
    assert e.value.data["key"] == "metrics.port" and e.value.data["line"] == 2


@pytest.mark.parametrize("listen", ["[fe80::1%lo]:9464", "[::1%1]:9464"])
def test_a_scoped_ipv6_address_is_refused_as_for_an_app_socket(listen):
    """It was accepted, and the check that no app socket claims the listener's address
    skipped it (protocol.listen refuses the zone)."""
    assert parse_listen(listen) is None
    with pytest.raises(ConfigInvalid) as e:
        parse_config(f'[metrics]\nlisten = "{listen}"\n{APP}', "t.toml")
    assert e.value.data["key"] == "metrics.listen"
    assert "scoped IPv6 addresses (%zone) are not supported" in str(e.value)
