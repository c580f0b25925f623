"""An integer too large for a float, for Python to read or for the wire, in tenure.toml:
refused as CONFIG_INVALID naming the key and the line, like any value out of range.

Was: ``float()`` raised OverflowError for a duration written as an integer past the
largest float (ValueError from tomllib for one of more than 4300 digits), and `tenure
plan` answered INTERNAL; a count without an upper bound was applied, and `tenure
inspect` answered INTERNAL."""

from __future__ import annotations

import pytest

from backend.config import parse_config
from protocol.codes import Code
from protocol.errors import ConfigInvalid

APP = "stacks.s.apps.a"
HEAD = f'[{APP}]\ncommand = ["x"]\n'                    # lines 1-2; the next line is 3
JOB = "stacks.s.jobs.j"
JOB_HEAD = f'{HEAD}[{JOB}]\ncommand = ["j"]\n'          # lines 1-4; the next line is 5
HUGE = "9" * 400                                         # past 1.8e308, the largest float

# (table, what it needs set before the key, the key)
DURATIONS = [
    (f"{APP}.ready", 'kind = "tcp"\nport = 80\n', "timeout"),
    (f"{APP}.ready", 'kind = "tcp"\nport = 80\n', "interval"),
    (f"{APP}.ready", 'kind = "delay"\n', "delay"),
    (f"{APP}.health", 'kind = "tcp"\nport = 80\n', "interval"),
    (f"{APP}.health", 'kind = "tcp"\nport = 80\n', "timeout"),
    (f"{APP}.health", 'kind = "tcp"\nport = 80\n', "grace"),
    (f"{APP}.backoff", "", "initial"),
    (f"{APP}.backoff", "", "max"),
    (f"{APP}.backoff", "", "factor"),
    (f"{APP}.backoff", "", "reset_after"),
    (f"{APP}.start_limit", "", "interval"),
    (f"{APP}.stop", "", "timeout"),
    (f"{APP}.stop", "", "kill_after"),
    (JOB, "", "timeout"),
    (f"{JOB}.retention", "", "days"),
]


def _invalid(text: str) -> ConfigInvalid:
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.toml")
    return info.value


def _text(table: str, before: str, key: str, value: str) -> tuple[str, int]:
    """The config setting ``key`` of ``table`` to ``value``, and the line it is on."""
    head = JOB_HEAD if table.startswith(JOB) else HEAD
    if table not in (APP, JOB):
        head += f"[{table}]\n"
    head += before
    return f"{head}{key} = {value}\n", head.count("\n") + 1


@pytest.mark.parametrize(("table", "before", "key"), DURATIONS,
                         ids=[f"{t.rsplit('.', 1)[-1]}.{k}" for t, _, k in DURATIONS])
@pytest.mark.parametrize("sign", ["", "-"], ids=["positive", "negative"])
def test_a_duration_past_the_largest_float_is_invalid_not_internal(
        table: str, before: str, key: str, sign: str) -> None:
    text, line = _text(table, before, key, sign + HUGE)
    err = _invalid(text)
    assert err.code is Code.CONFIG_INVALID
    assert (err.data["key"], err.data["line"]) == (f"{table}.{key}", line), err.msg
    problem = err.data["problem"]
    assert problem.startswith("must be "), problem
    assert problem.endswith(f"not {'a negative' if sign else 'an'} integer of more than "
                            "24 digits"), problem


def test_a_huge_stop_timeout_gets_the_message_of_any_too_long_one() -> None:
    """The reported example: the range message a stop timeout of 1e9 gets."""
    err = _invalid(f"{HEAD}stop = {{ timeout = {HUGE} }}\n")
    assert (err.data["key"], err.data["line"]) == (f"{APP}.stop.timeout", 3)
    assert err.data["problem"] == ("must be at most 604800 s, not an integer of more than "
                                   "24 digits")
    assert _invalid(f"{HEAD}stop = {{ timeout = 1000000000 }}\n").data["problem"] == \
        "must be at most 604800 s, not 1000000000"


def test_a_huge_hex_integer_is_out_of_range_without_being_written_out() -> None:
    """A hex literal is read whatever its length; its decimal digits are too many to
    format (str() raises ValueError past 4300 of them)."""
    err = _invalid(f"{HEAD}instances = 0x{'f' * 5000}\n")
    assert (err.data["key"], err.data["line"]) == (f"{APP}.instances", 3)
    assert err.data["problem"] == "must be between 1 and 64, not an integer of more than " \
                                  "24 digits"
    err = _invalid(f"{HEAD}stop = {{ kill_after = 0x{'f' * 5000} }}\n")
    assert err.data["key"] == f"{APP}.stop.kill_after"


@pytest.mark.parametrize(("written", "key", "line"), [
    (f"instances = {'9' * 4301}\n", f"{APP}.instances", 3),
    (f"instances = -1_{'2' * 4300}\n", f"{APP}.instances", 3),
    (f'env = {{ A = "{"9" * 5000}" }}\nstop = {{ timeout = {"9" * 5000} }}\n',
     f"{APP}.stop", 4),
    (f"[{APP}.limits]\nnofile = [\n  {'9' * 5000}]\n", f"{APP}.limits.nofile", 5),
])
def test_an_integer_too_long_to_read_is_invalid_with_its_line(written: str, key: str,
                                                              line: int) -> None:
    """tomllib raises ValueError (not TOMLDecodeError) for a decimal integer of more
    digits than Python converts."""
    err = _invalid(HEAD + written)
    assert err.code is Code.CONFIG_INVALID
    assert (err.data["key"], err.data["line"]) == (key, line), err.msg
    assert err.data["problem"].startswith("an integer of more than 4300 digits")


@pytest.mark.parametrize(("table", "before", "key"), [
    (f"{APP}.start_limit", "", "burst"),
    (f"{APP}.health", 'kind = "tcp"\nport = 80\n', "failures"),
])
def test_a_count_beyond_the_bound_is_refused_and_one_at_it_goes_on_the_wire(
        table: str, before: str, key: str) -> None:
    """Was: no upper bound; 2**64 was applied, and `tenure inspect` answered INTERNAL
    (msgpack has no integer past 64 bits)."""
    from backend.config import MAX_COUNT
    from backend.model import plain
    from protocol.framing import pack
    assert MAX_COUNT == 1_000_000   # docs/config.md says so
    for value in (MAX_COUNT + 1, 2**64):
        text, line = _text(table, before, key, str(value))
        err = _invalid(text)
        assert (err.data["key"], err.data["line"]) == (f"{table}.{key}", line), err.msg
        assert err.data["problem"] == f"must be between 1 and 1000000, not {value}"
    app = parse_config(_text(table, before, key, str(MAX_COUNT))[0], "t.toml").app("s", "a")
    assert app is not None
    pack({"app": plain(app)})   # what inspect sends of it


@pytest.mark.parametrize(("written", "key", "line"), [
    (f"umask = 0x{'f' * 5000}\n", f"{APP}.umask", 3),
    (f"limits = {{ cpu_quota = 0x{'f' * 5000} }}\n", f"{APP}.limits.cpu_quota", 3),
    (f'[{APP}.sockets.h]\nlisten = "unix:/run/x.sock"\nmode = 0x{"f" * 5000}\n',
     f"{APP}.sockets.h.mode", 5),
])
def test_a_huge_hex_umask_quota_or_mode_is_invalid_not_internal(
        written: str, key: str, line: int) -> None:
    """Was: their messages wrote the value out (repr), which raises ValueError past
    4300 decimal digits: INTERNAL instead of CONFIG_INVALID."""
    err = _invalid(f"{HEAD}{written}")
    assert (err.data["key"], err.data["line"]) == (key, line)
    assert err.data["problem"].endswith("not an integer of more than 24 digits")
