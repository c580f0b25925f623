"""tenure.toml parsing: errors name the key and line, defaults, revision, order_apps."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.config import canonical_form, load_config, order_apps, parse_config
from backend.config_lines import find_line, format_key
from backend.model import (
    App,
    Backoff,
    HealthKind,
    Readiness,
    ReadyKind,
    RestartMode,
    Stack,
    StartLimit,
    StopSpec,
)
from protocol.codes import Code
from protocol.errors import ConfigInvalid

ROOT = Path(__file__).resolve().parents[3]
APP = "stacks.demo.apps.web"
HEAD = f'[{APP}]\ncommand = ["x"]\n'          # lines 1-2; the next line is 3


def _invalid(text: str) -> ConfigInvalid:
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.toml")
    return info.value


# (id, text, expected key, expected line)
BAD: list[tuple[str, str, str, int]] = [
    ("typo-in-app-key", f'[{APP}]\ncomand = ["x"]\n', f"{APP}.comand", 2),
    ("unknown-top-level", 'stack = 1\n', "stack", 1),
    ("unknown-settings-key", '[settings]\nviewer = "x"\n', "settings.viewer", 2),
    ("viewer-group-type", '[settings]\nviewer_group = 5\n', "settings.viewer_group", 2),
    ("viewer-group-bad", '[settings]\nviewer_group = "a:b"\n', "settings.viewer_group", 2),
    ("stacks-not-table", 'stacks = 1\n', "stacks", 1),
    ("unknown-stack-key", '[stacks.demo]\napp = 1\n', "stacks.demo.app", 2),
    ("stack-without-apps", '[stacks.demo]\n', "stacks.demo.apps", 1),
    ("bad-stack-name", '[stacks."-x".apps.web]\ncommand = ["x"]\n', "stacks.-x", 1),
    ("bad-app-name", '[stacks.demo.apps."we b"]\ncommand = ["x"]\n',
     'stacks.demo.apps."we b"', 1),
    ("app-name-too-long", f'[stacks.demo.apps.{"a" * 65}]\ncommand = ["x"]\n',
     f'stacks.demo.apps.{"a" * 65}', 1),
    ("app-not-table", '[stacks.demo.apps]\nweb = 1\n', APP, 2),
    ("missing-command", f'[{APP}]\ninstances = 1\n', f"{APP}.command", 1),
    # an app declared only by its sub-tables: the first of them (was: no line)
    ("missing-command-subtable", f'\n[{APP}.ready]\nkind = "none"\n', f"{APP}.command", 2),
    ("command-empty", f'[{APP}]\ncommand = []\n', f"{APP}.command", 2),
    ("command-string", f'[{APP}]\ncommand = "x"\n', f"{APP}.command", 2),
    ("command-item-type", f'[{APP}]\ncommand = ["x", 1]\n', f"{APP}.command[1]", 2),
    ("command-empty-program", f'[{APP}]\ncommand = [""]\n', f"{APP}.command[0]", 2),
    # a blank program name was accepted, and the launch failed "spawn failed: : No such
    # file or directory (not found in PATH)"
    ("command-blank-program", f'[{APP}]\ncommand = [" "]\n', f"{APP}.command[0]", 2),
    ("command-whitespace-program", f'[{APP}]\ncommand = ["\\t \\n", "a"]\n',
     f"{APP}.command[0]", 2),
    ("command-nul", f'[{APP}]\n\ncommand = ["x", "a\\u0000"]\n', f"{APP}.command[1]", 3),
    ("env-value-type", HEAD + 'env = { A = 1 }\n', f"{APP}.env.A", 3),
    ("env-key-equals", HEAD + 'env = { "A=B" = "x" }\n', f'{APP}.env."A=B"', 3),
    ("env-table-form", HEAD + f'[{APP}.env]\nA = "1"\nB = true\n', f"{APP}.env.B", 5),
    ("env-not-table", HEAD + 'env = ["A=1"]\n', f"{APP}.env", 3),
    ("cwd-relative", HEAD + 'cwd = "srv"\n', f"{APP}.cwd", 3),
    ("instances-zero", HEAD + 'instances = 0\n', f"{APP}.instances", 3),
    ("instances-65", HEAD + 'instances = 65\n', f"{APP}.instances", 3),
    ("instances-bool", HEAD + 'instances = true\n', f"{APP}.instances", 3),
    ("instances-float", HEAD + 'instances = 1.5\n', f"{APP}.instances", 3),
    ("restart-unknown", HEAD + 'restart = "sometimes"\n', f"{APP}.restart", 3),
    ("after-unknown", HEAD + 'after = ["db"]\n', f"{APP}.after", 3),
    ("after-self", HEAD + 'after = ["web"]\n', f"{APP}.after", 3),
    ("after-not-list", HEAD + 'after = "db"\n', f"{APP}.after", 3),
    ("after-item-type", HEAD + 'after = [1]\n', f"{APP}.after[0]", 3),
    ("after-twice", HEAD + '[stacks.demo.apps.db]\ncommand = ["x"]\nafter = ["web", "web"]\n',
     "stacks.demo.apps.db.after[1]", 5),
    ("after-cycle", '[stacks.demo.apps.a]\ncommand = ["x"]\nafter = ["c"]\n'
     '[stacks.demo.apps.b]\ncommand = ["x"]\nafter = ["a"]\n'
     '[stacks.demo.apps.c]\ncommand = ["x"]\nafter = ["b"]\n', "stacks.demo.apps.a.after", 3),
    ("backoff-unknown", HEAD + f'[{APP}.backoff]\nmaximum = 3\n', f"{APP}.backoff.maximum", 4),
    ("backoff-factor", HEAD + f'[{APP}.backoff]\nfactor = 0.5\n', f"{APP}.backoff.factor", 4),
    ("backoff-negative", HEAD + f'[{APP}.backoff]\ninitial = -1\n',
     f"{APP}.backoff.initial", 4),
    ("backoff-inf", HEAD + f'[{APP}.backoff]\nreset_after = inf\n',
     f"{APP}.backoff.reset_after", 4),
    ("backoff-nan", HEAD + f'[{APP}.backoff]\nmax = nan\n', f"{APP}.backoff.max", 4),
    ("backoff-max-lt-initial", HEAD + f'[{APP}.backoff]\ninitial = 5\nmax = 1\n',
     f"{APP}.backoff.max", 5),
    ("backoff-string", HEAD + 'backoff = { initial = "1s" }\n', f"{APP}.backoff.initial", 3),
    ("start-limit-burst", HEAD + f'[{APP}.start_limit]\nburst = 0\n',
     f"{APP}.start_limit.burst", 4),
    ("start-limit-interval", HEAD + f'[{APP}.start_limit]\nburst = 2\ninterval = 0\n',
     f"{APP}.start_limit.interval", 5),
    ("ready-kind", HEAD + f'[{APP}.ready]\nkind = "udp"\n', f"{APP}.ready.kind", 4),
    ("ready-unknown", HEAD + f'[{APP}.ready]\nkind = "tcp"\nprot = 80\n',
     f"{APP}.ready.prot", 5),
    ("ready-tcp-no-port", HEAD + f'[{APP}.ready]\nkind = "tcp"\n', f"{APP}.ready.port", 3),
    ("ready-port-zero", HEAD + f'[{APP}.ready]\nkind = "tcp"\nport = 0\n',
     f"{APP}.ready.port", 5),
    ("ready-port-string", HEAD + f'[{APP}.ready]\nkind = "tcp"\nport = "80"\n',
     f"{APP}.ready.port", 5),
    ("ready-port-inline", HEAD + 'ready = { kind = "tcp", port = 70000 }\n',
     f"{APP}.ready.port", 3),
    ("ready-tcp-instances", HEAD + f'instances = 2\n[{APP}.ready]\nkind = "tcp"\nport = 80\n',
     f"{APP}.ready.port_step", 4),
    ("ready-port-overflow", HEAD + 'instances = 3\n'
     'ready = { kind = "tcp", port = 65534, port_step = 1 }\n', f"{APP}.ready.port_step", 4),
    ("ready-host", HEAD + 'ready = { kind = "tcp", port = 80, host = "bad host" }\n',
     f"{APP}.ready.host", 3),
    ("ready-http-no-url", HEAD + f'[{APP}.ready]\nkind = "http"\n', f"{APP}.ready.url", 3),
    ("ready-https", HEAD + f'[{APP}.ready]\nkind = "http"\nurl = "https://x/"\n',
     f"{APP}.ready.url", 5),
    ("ready-url-no-host", HEAD + f'[{APP}.ready]\nkind = "http"\nurl = "http:///x"\n',
     f"{APP}.ready.url", 5),
    ("ready-exec-no-command", HEAD + f'[{APP}.ready]\nkind = "exec"\n',
     f"{APP}.ready.command", 3),
    ("ready-delay-zero", HEAD + f'[{APP}.ready]\nkind = "delay"\ndelay = 0\n',
     f"{APP}.ready.delay", 5),
    ("ready-delay-missing", HEAD + f'[{APP}.ready]\nkind = "delay"\n', f"{APP}.ready.delay", 3),
    ("ready-key-for-other-kind", HEAD + f'[{APP}.ready]\nkind = "tcp"\nport = 1\n'
     'url = "http://x/"\n', f"{APP}.ready.url", 6),
    ("ready-port-without-kind", HEAD + f'[{APP}.ready]\nport = 1\n', f"{APP}.ready.port", 4),
    ("ready-timeout-zero", HEAD + f'[{APP}.ready]\nkind = "notify"\ntimeout = 0\n',
     f"{APP}.ready.timeout", 5),
    ("ready-interval-negative", HEAD + 'ready = { kind = "exec", command = ["t"], '
     'interval = -1 }\n', f"{APP}.ready.interval", 3),
    ("health-no-kind", HEAD + f'[{APP}.health]\ninterval = 1\n', f"{APP}.health.kind", 3),
    ("health-kind-delay", HEAD + f'[{APP}.health]\nkind = "delay"\n', f"{APP}.health.kind", 4),
    ("health-tcp-no-port", HEAD + f'[{APP}.health]\nkind = "tcp"\n', f"{APP}.health.port", 3),
    ("health-tcp-instances", HEAD + f'instances = 4\n[{APP}.health]\nkind = "tcp"\n'
     'port = 9000\n', f"{APP}.health.port_step", 4),
    ("health-http-no-url", HEAD + f'[{APP}.health]\nkind = "http"\n', f"{APP}.health.url", 3),
    ("health-exec-empty", HEAD + f'[{APP}.health]\nkind = "exec"\ncommand = []\n',
     f"{APP}.health.command", 5),
    ("health-exec-blank-program", HEAD + f'[{APP}.health]\nkind = "exec"\n'
     'command = [" ", "-c"]\n', f"{APP}.health.command[0]", 5),
    ("ready-exec-blank-program", HEAD + f'[{APP}.ready]\nkind = "exec"\n'
     'command = [""" """]\n', f"{APP}.ready.command[0]", 5),
    ("health-failures", HEAD + f'[{APP}.health]\nkind = "exec"\ncommand = ["t"]\n'
     'failures = 0\n', f"{APP}.health.failures", 6),
    ("health-grace", HEAD + f'[{APP}.health]\nkind = "exec"\ncommand = ["t"]\n'
     'grace = -0.5\n', f"{APP}.health.grace", 6),
    ("health-delay-key", HEAD + f'[{APP}.health]\nkind = "exec"\ncommand = ["t"]\n'
     'delay = 1\n', f"{APP}.health.delay", 6),
    ("stop-signal-unknown", HEAD + f'[{APP}.stop]\nsignal = "FOO"\n', f"{APP}.stop.signal", 4),
    ("stop-signal-number", HEAD + f'[{APP}.stop]\nsignal = 15\n', f"{APP}.stop.signal", 4),
    ("stop-timeout-zero", HEAD + f'[{APP}.stop]\ntimeout = 0\n', f"{APP}.stop.timeout", 4),
    ("stop-kill-after", HEAD + f'[{APP}.stop]\nkill_after = -1\n', f"{APP}.stop.kill_after", 4),
    ("stop-unknown", HEAD + f'[{APP}.stop]\nsignl = "TERM"\n', f"{APP}.stop.signl", 4),
    ("whole-app-inline", '[stacks.demo.apps]\nweb = { command = ["x"], instances = 0 }\n',
     f"{APP}.instances", 2),
    ("dotted-keys", '[stacks.demo]\napps.web.command = ["x"]\napps.web.instances = 0\n',
     f"{APP}.instances", 3),
    ("after-multiline-string", HEAD + 'env = { A = """\n[x]\ninstances = 0\n""" }\n'
     'instances = 0\n', f"{APP}.instances", 7),
    ("comment-with-quotes", HEAD + '# use """ here\ninstances = 0\n', f"{APP}.instances", 4),
    ("literal-with-quotes", HEAD + "cwd = '/a\"\"\"b' # x\ninstances = 0\n",
     f"{APP}.instances", 4),
    ("multiline-literal", HEAD + "env = { A = '''\n[stacks.demo.apps.web]\ninstances = 0\n"
     "''' }\ninstances = 0\n", f"{APP}.instances", 7),
    ("long-after-chain", "".join(f'[stacks.demo.apps.a{i}]\ncommand = ["x"]\n'
                                 f'after = ["a{i + 1}"]\n' for i in range(1500))
     + '[stacks.demo.apps.a1500]\ncommand = ["x"]\nafter = ["a0"]\n',
     "stacks.demo.apps.a0.after", 3),
    ("crlf-and-unicode-separator", HEAD.replace("\n", "\r\n")
     + 'env = { A = "a\u2028b" }\r\ninstances = 0\r\n', f"{APP}.instances", 4),
    # TOML itself rejects these; the error still carries the line.
    ("duplicate-app", HEAD + f'[{APP}]\ncommand = ["y"]\n', APP, 3),
    ("duplicate-key", HEAD + 'command = ["y"]\n', f"{APP}.command", 3),
    ("duplicate-key-metrics", '[metrics]\nlisten = "127.0.0.1:1"\nlisten = "127.0.0.1:2"\n',
     "metrics.listen", 3),
    ("duplicate-key-dotted", f'{APP}.command = ["x"]\n{APP}.command = ["y"]\n',
     f"{APP}.command", 2),
    ("duplicate-key-multiline", HEAD + 'cwd = "/a"\ncwd = """\n/b"""\n', f"{APP}.cwd", 4),
    ("duplicate-key-array", HEAD + 'after = []\nafter = [\n"a"]\n', f"{APP}.after", 4),
    ("duplicate-key-inline", HEAD + 'env = { A = "1", A = "2" }\n', f"{APP}.env", 3),
    ("duplicate-key-subtable", HEAD + f'[{APP}.env]\nA = "1"\nA = "2"\n', f"{APP}.env.A", 5),
    ("syntax-unterminated-array", HEAD + 'after = ["a",\n', "", 3),
    ("syntax-missing-value", HEAD + 'cwd =\n', "", 3),
    ("syntax-bad-header", '[stacks.demo\n', "", 1),
    ("log-retention-small", HEAD + 'log_retention = "512K"\n', f"{APP}.log_retention", 3),
    ("log-retention-large", HEAD + 'log_retention = "2T"\n', f"{APP}.log_retention", 3),
    ("log-retention-word", HEAD + 'log_retention = "lots"\n', f"{APP}.log_retention", 3),
    ("log-retention-float", HEAD + 'log_retention = 1.5\n', f"{APP}.log_retention", 3),
]


@pytest.mark.parametrize(("text", "key", "line"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_names_key_and_line(text: str, key: str, line: int) -> None:
    err = _invalid(text)
    assert err.code is Code.CONFIG_INVALID
    assert err.data["file"] == "t.toml"
    assert err.data["key"] == key, err.msg
    assert err.data["line"] == line, err.msg
    assert err.data["problem"]
    assert err.msg.startswith(f"t.toml:{line}: ")
    assert key in err.msg


def test_cycle_is_reported_with_its_path() -> None:
    err = _invalid(BAD[[b[0] for b in BAD].index("after-cycle")][1])
    assert "a -> c -> b -> a" in err.data["problem"]


def test_unknown_key_lists_the_allowed_ones() -> None:
    assert "command" in _invalid(f'[{APP}]\ncomand = ["x"]\n').data["problem"]


def test_a_typo_names_the_key_it_likely_meant_and_a_stranger_key_does_not() -> None:
    problem = _invalid(f'[{APP}]\ncomand = ["x"]\n').data["problem"]
    assert problem.startswith("unknown key (did you mean command?); allowed: after, ")
    problem = _invalid(f'[{APP}]\ncommand = ["x"]\nrestarts = "always"\n').data["problem"]
    assert problem.startswith("unknown key (did you mean restart?); allowed: ")
    problem = _invalid(f'[{APP}]\ncommand = ["x"]\nzzz = 1\n').data["problem"]
    assert problem.startswith("unknown key; allowed: ")


def test_load_config_missing_file_and_bad_utf8(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid) as info:
        load_config(tmp_path / "nope.toml")
    assert info.value.data["file"] == str(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'[stacks.demo.apps.web]\ncommand = ["\xff"]\n')
    with pytest.raises(ConfigInvalid) as info:
        load_config(bad)
    assert info.value.data["line"] == 2


def test_defaults_are_filled_in() -> None:
    config = parse_config(HEAD, "t.toml")
    app = config.app("demo", "web")
    assert app == App(name="web", stack="demo", command=("x",))
    assert app.restart is RestartMode.ON_FAILURE and app.backoff == Backoff()
    assert app.start_limit == StartLimit() and app.stop == StopSpec()
    assert app.ready == Readiness() and app.health is None and app.env == {}
    assert config.settings.viewer_group is None and config.source == "t.toml"
    assert len(config.revision) == 64


def test_values_are_typed_and_normalised() -> None:
    text = HEAD + ('instances = 2\nafter = ["b", "a"]\nrestart = "always"\n'
                   'cwd = "/srv"\nenv = { Z = "1", A = "" }\n'
                   'ready = { kind = "tcp", port = 8000, port_step = 10, timeout = 3 }\n'
                   'health = { kind = "http", url = "http://127.0.0.1:8000/h" }\n'
                   'stop = { signal = "sigint", timeout = 1, kill_after = 2.5 }\n'
                   '[stacks.demo.apps.a]\ncommand = ["a"]\n'
                   '[stacks.demo.apps.b]\ncommand = ["b"]\n'
                   '[settings]\nviewer_group = "tenure-view"\n')
    config = parse_config(text, "t.toml")
    web = config.app("demo", "web")
    assert web is not None
    assert web.after == ("a", "b") and web.instances == 2 and web.cwd == "/srv"
    assert list(web.env) == ["A", "Z"]
    assert web.ready.kind is ReadyKind.TCP and web.ready.timeout == 3.0
    assert isinstance(web.ready.timeout, float) and web.ready.port_step == 10
    assert web.health is not None and web.health.kind is HealthKind.HTTP
    assert web.health.failures == 3 and web.stop == StopSpec("INT", 1.0, 2.5)
    assert list(config.stacks["demo"].apps) == ["a", "b", "web"]
    assert config.settings.viewer_group == "tenure-view"


@pytest.mark.parametrize(("written", "stored"), [("TERM", "TERM"), ("SIGTERM", "TERM"),
                                                  ("int", "INT"), ("SIGIOT", "ABRT"),
                                                  ("KILL", "KILL"), ("HUP", "HUP")])
def test_stop_signal_is_normalised(written: str, stored: str) -> None:
    config = parse_config(HEAD + f'stop = {{ signal = "{written}" }}\n', "t.toml")
    assert config.app("demo", "web").stop.signal == stored  # type: ignore[union-attr]


def test_empty_file_is_an_empty_config() -> None:
    assert parse_config("", "t.toml").stacks == {}


# ---------------------------------------------------------------- a tiny TOML emitter

def _str(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c.isprintable() and c != "\x7f":
            out.append(c)
        else:
            out.append(f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def _key(k: str) -> str:
    return k if k and all(c.isascii() and (c.isalnum() or c in "_-") for c in k) else _str(k)


def _value(v: Any, order: int) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") \
            if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x, order) for x in v) + "]"
    items = sorted(v.items(), reverse=order == 1)
    return "{" + ", ".join(f"{_key(k)} = {_value(x, order)}" for k, x in items) + "}"


def render(doc: dict[str, Any], order: int = 0, inline_from: int = 99) -> str:
    """TOML text for ``doc``: keys sorted (order 0) or reverse-sorted (1); tables nested
    ``inline_from`` levels deep or more are inline tables, shallower ones get headers."""
    lines: list[str] = [f"# rendered with order={order}"]

    def table(t: dict[str, Any], path: list[str]) -> None:
        items = sorted(t.items(), reverse=order == 1)
        subs = [(k, v) for k, v in items if isinstance(v, dict) and len(path) + 1 < inline_from]
        if path:
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in path) + "]" + "  # a comment" * order)
        for k, v in items:
            if (k, v) not in subs:
                lines.append(f"{' ' * order}{_key(k)} = {_value(v, order)}")
        for k, v in subs:
            table(v, [*path, k])

    table(doc, [])
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ revision stability

BASE: dict[str, Any] = {
    "settings": {"viewer_group": "ops"},
    "stacks": {"demo": {"apps": {
        "db": {"command": ["db", "--x"], "env": {"A": "1", "B": "2"}, "cwd": "/srv",
               "ready": {"kind": "tcp", "port": 5432}, "stop": {"signal": "INT"}},
        "web": {"command": ["web"], "after": ["db"], "instances": 2, "restart": "always",
                "backoff": {"initial": 1, "max": 10, "factor": 3, "reset_after": 60},
                "start_limit": {"burst": 3, "interval": 30},
                "ready": {"kind": "http", "url": "http://127.0.0.1:80/"},
                "health": {"kind": "tcp", "port": 80, "port_step": 1, "failures": 2}},
    }}},
}


def _rev(doc: dict[str, Any], **kw: Any) -> str:
    return parse_config(render(doc, **kw), "t.toml").revision


def test_revision_ignores_formatting_order_comments_and_source() -> None:
    first = _rev(BASE)
    assert _rev(BASE, order=1) == first
    assert _rev(BASE, inline_from=4) == first and _rev(BASE, order=1, inline_from=2) == first
    assert parse_config(render(BASE), "/elsewhere.toml").revision == first


def test_revision_ignores_written_defaults_and_number_spelling() -> None:
    explicit = copy.deepcopy(BASE)
    db = explicit["stacks"]["demo"]["apps"]["db"]
    db.update(instances=1, restart="on-failure", after=[])
    db["stop"] = {"signal": "SIGINT", "timeout": 10, "kill_after": 5.0}
    db["backoff"] = {"initial": 0.5, "max": 30, "factor": 2, "reset_after": 30}
    db["ready"]["host"] = "127.0.0.1"
    assert _rev(explicit) == _rev(BASE)
    for spelled in ("64MiB", 67108864):   # was: a new revision, and a plan's `update`
        db["log_retention"] = spelled
        assert _rev(explicit) == _rev(BASE), spelled


def _set(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    *parents, last = path.split("/")
    node = doc
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return doc


W = "stacks/demo/apps/web"
D = "stacks/demo/apps/db"
SEMANTIC = [
    ("settings/viewer_group", "adm"), (f"{D}/command", ["db", "--y"]), (f"{D}/env/B", "3"),
    (f"{D}/cwd", "/srv2"), (f"{W}/instances", 3), (f"{W}/restart", "never"),
    (f"{W}/after", []), (f"{W}/backoff/initial", 2), (f"{W}/backoff/max", 11),
    (f"{W}/backoff/factor", 2.5), (f"{W}/backoff/reset_after", 61),
    (f"{W}/start_limit/burst", 4), (f"{W}/start_limit/interval", 31),
    (f"{D}/ready/port", 5433), (f"{D}/ready/host", "::1"), (f"{D}/ready/timeout", 4),
    (f"{D}/ready/interval", 0.2), (f"{W}/ready/url", "http://127.0.0.1:81/"),
    (f"{W}/health/failures", 4), (f"{W}/health/grace", 1), (f"{W}/health/port_step", 2),
    (f"{W}/health/interval", 9), (f"{W}/health/timeout", 4), (f"{D}/stop/signal", "TERM"),
    (f"{D}/stop/timeout", 9), (f"{D}/stop/kill_after", 4),
    (f"{D}/health", {"kind": "exec", "command": ["check"]}),
    ("stacks/other/apps/x", {"command": ["x"]}),
    (f"{D}/ready", {"kind": "notify"}),
    (f"{W}/log_retention", "256MiB"),
]


@pytest.mark.parametrize(("path", "value"), SEMANTIC, ids=[p for p, _ in SEMANTIC])
def test_revision_changes_with_any_semantic_change(path: str, value: Any) -> None:
    assert _rev(_set(path, value)) != _rev(BASE)


def test_renaming_an_app_changes_the_revision() -> None:
    doc = copy.deepcopy(BASE)
    doc["stacks"]["demo"]["apps"]["db2"] = doc["stacks"]["demo"]["apps"].pop("db")
    doc["stacks"]["demo"]["apps"]["web"]["after"] = ["db2"]
    assert _rev(doc) != _rev(BASE)


def test_canonical_form_has_every_field() -> None:
    form = canonical_form(parse_config(HEAD, "t.toml"))
    app = form["stacks"]["demo"]["apps"]["web"]
    assert set(app) == {"name", "stack", "command", "env", "cwd", "instances", "restart",
                        "backoff", "start_limit", "ready", "health", "stop", "after"}
    assert form["format"] == 1 and "source" not in form


# ------------------------------------------------------------ Hypothesis: valid configs

NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,6}", fullmatch=True)
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"),
               max_size=8)
ARGV = st.lists(TEXT, max_size=3).map(lambda rest: ["prog", *rest])
SECS = st.one_of(st.integers(0, 1000), st.floats(0, 1000, allow_nan=False))
POS = st.one_of(st.integers(1, 1000), st.floats(0.001, 1000, allow_nan=False))

PROBES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "tcp": st.fixed_dictionaries({"port": st.integers(1, 60000),
                                  "port_step": st.integers(1, 80)},
                                 optional={"host": st.sampled_from(["127.0.0.1", "::1",
                                                                    "localhost"])}),
    "http": st.fixed_dictionaries({"url": st.sampled_from(["http://127.0.0.1:80/",
                                                           "http://localhost/x?y=1"])}),
    "exec": st.fixed_dictionaries({"command": ARGV}),
}


@st.composite
def readiness(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["none", "notify", "delay", "tcp", "http", "exec"]))
    out: dict[str, Any] = {"kind": kind}
    if kind in PROBES:
        out |= draw(PROBES[kind])
        out |= draw(st.fixed_dictionaries({}, optional={"timeout": POS, "interval": POS}))
    elif kind == "delay":
        out["delay"] = draw(POS)
    elif kind == "notify":
        out |= draw(st.fixed_dictionaries({}, optional={"timeout": POS}))
    return out


@st.composite
def health(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(PROBES)))
    return {"kind": kind, **draw(PROBES[kind]), **draw(st.fixed_dictionaries({}, optional={
        "interval": POS, "timeout": POS, "failures": st.integers(1, 10), "grace": SECS}))}


def app_body(after: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    optional: dict[str, st.SearchStrategy[Any]] = {
        "env": st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,5}", fullmatch=True), TEXT,
                               max_size=3),
        "cwd": st.sampled_from(["/", "/srv", "/tmp/x y"]),
        "instances": st.integers(1, 64),
        "restart": st.sampled_from(["always", "on-failure", "never"]),
        "backoff": st.fixed_dictionaries({}, optional={"initial": st.integers(0, 5),
                                                       "max": st.integers(30, 99),
                                                       "factor": st.floats(1, 10),
                                                       "reset_after": SECS}),
        "start_limit": st.fixed_dictionaries({}, optional={"burst": st.integers(1, 99),
                                                           "interval": POS}),
        "ready": readiness(), "health": health(),
        "stop": st.fixed_dictionaries({}, optional={
            "signal": st.sampled_from(["TERM", "SIGINT", "quit", "KILL"]),
            "timeout": POS, "kill_after": POS}),
    }
    if after:
        optional["after"] = st.lists(st.sampled_from(after), unique=True, max_size=3)
    return st.fixed_dictionaries({"command": ARGV}, optional=optional)


@st.composite
def valid_configs(draw: st.DrawFn) -> dict[str, Any]:
    stacks: dict[str, Any] = {}
    for stack in draw(st.lists(NAMES, min_size=1, max_size=2, unique=True)):
        names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
        stacks[stack] = {"apps": {n: draw(app_body(names[:i])) for i, n in enumerate(names)}}
    doc: dict[str, Any] = {"stacks": stacks}
    if draw(st.booleans()):
        doc["settings"] = {"viewer_group": "tenure-view"}
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_configs(), st.integers(1, 5))
def test_random_valid_configs_parse_to_one_revision_in_any_layout(
        doc: dict[str, Any], depth: int) -> None:
    first = parse_config(render(doc), "a.toml")
    second = parse_config(render(doc, order=1, inline_from=depth), "b.toml")
    assert first.revision == second.revision
    assert first.stacks == second.stacks
    for stack in first.stacks.values():
        assert sorted(n for level in order_apps(stack) for n in level) == sorted(stack.apps)


# ------------------------------------------------------------------ Hypothesis: fuzz

KEYS = st.one_of(st.sampled_from([
    "stacks", "settings", "apps", "demo", "web", "command", "env", "cwd", "instances",
    "restart", "after", "backoff", "start_limit", "ready", "health", "stop", "kind", "port",
    "port_step", "host", "url", "delay", "timeout", "interval", "failures", "grace",
    "signal", "kill_after", "initial", "max", "factor", "reset_after", "burst",
    "viewer_group"]), TEXT)
SCALARS = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(), TEXT,
                    st.sampled_from(["tcp", "http", "exec", "delay", "TERM", "always",
                                     "http://x/", "/abs"]))
VALUES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(KEYS, c, max_size=4), max_leaves=12)


def _parses_or_invalid(text: str) -> None:
    try:
        parse_config(text, "f.toml")
    except ConfigInvalid as e:
        assert e.data["file"] == "f.toml" and e.data["problem"]
        assert e.data["line"] is None or 1 <= e.data["line"] <= text.count("\n") + 1


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=4), st.integers(1, 4))
def test_fuzz_arbitrary_documents(doc: dict[str, Any], depth: int) -> None:
    _parses_or_invalid(render(doc, inline_from=depth))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_configs(), st.lists(st.integers(0, 99), max_size=5), KEYS, VALUES)
def test_fuzz_valid_configs_with_one_value_replaced(
        doc: dict[str, Any], walk: list[int], key: str, value: Any) -> None:
    node = doc
    for step in walk:
        keys = sorted(node)
        nxt = node[keys[step % len(keys)]] if keys else None
        if not isinstance(nxt, dict):
            break
        node = nxt
    node[key] = value
    _parses_or_invalid(render(doc))


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_fuzz_arbitrary_text(text: str) -> None:
    _parses_or_invalid(text)
    for path in [("stacks", "demo", "apps", "web", "ready", "port"), ("a",), ()]:
        line = find_line(text, path)
        assert line is None or 1 <= line <= text.count("\n") + 1


# ------------------------------------------------------------------ order_apps

def _stack(**after: tuple[str, ...]) -> Stack:
    return Stack("s", {n: App(name=n, stack="s", command=("x",), after=a)
                       for n, a in after.items()})


def test_order_apps_layers() -> None:
    stack = _stack(web=("db", "cache"), db=(), cache=(), worker=("web",), cron=("db",),
                   alone=())
    assert order_apps(stack) == [["alone", "cache", "db"], ["cron", "web"], ["worker"]]
    assert order_apps(_stack()) == []


def test_order_apps_from_parsed_config() -> None:
    config = parse_config(render(BASE), "t.toml")
    assert order_apps(config.stacks["demo"]) == [["db"], ["web"]]


def test_order_apps_refuses_cycles_and_unknown_names() -> None:
    with pytest.raises(ConfigInvalid):
        order_apps(_stack(a=("b",), b=("a",)))
    with pytest.raises(ConfigInvalid):
        order_apps(_stack(a=("ghost",)))


# ------------------------------------------------------------------ lines and examples

def test_find_line_forms() -> None:
    text = ('# c\n[stacks."a.b".apps]\nweb = { ready = { port = 1 } }\n'
            '[stacks."a.b".apps.db]\ncommand = ["x"]\n')
    assert find_line(text, ("stacks", "a.b", "apps", "web", "ready", "port")) == 3
    assert find_line(text, ("stacks", "a.b", "apps", "db", "command", 0)) == 5
    assert find_line(text, ("stacks", "a.b", "apps", "db", "stop")) == 4
    assert find_line(text, ("settings",)) is None
    assert format_key(("stacks", "a.b", "apps", "x", "command", 2)) == \
        'stacks."a.b".apps.x.command[2]'


def test_example_demo_parses() -> None:
    config = load_config(ROOT / "examples" / "demo.toml")
    demo = config.stacks["demo"]
    assert sorted(demo.apps) == ["notifier", "web", "worker"]
    web, worker, notifier = demo.apps["web"], demo.apps["worker"], demo.apps["notifier"]
    assert web.ready.kind is ReadyKind.TCP and web.ready.port == 8765
    assert web.health is not None and web.health.kind is HealthKind.HTTP
    assert "127.0.0.1" in web.command and "8765" in web.command
    assert worker.restart is RestartMode.ALWAYS and worker.after == ("web",)
    assert notifier.ready.kind is ReadyKind.NOTIFY
    assert order_apps(demo) == [["notifier", "web"], ["worker"]]


def test_every_example_in_the_docs_parses() -> None:
    doc = (ROOT / "docs" / "config.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```toml\n")[1:]]
    assert len(blocks) > 10
    for block in blocks:
        defines_web = block.startswith(f"[{APP}]") or "\nweb = " in block
        context = '[stacks.demo.apps.db]\ncommand = ["db"]\n' + ("" if defines_web else HEAD)
        parse_config(context + block, "docs/config.md")


def test_log_retention_is_a_size_and_restarts_nothing() -> None:
    base = parse_config(HEAD, "t.toml").stacks["demo"].apps["web"]
    assert base.log_retention is None
    for written, size in (('"256MiB"', 256 << 20), ('"1G"', 1 << 30), ("1048576", 1 << 20)):
        app = parse_config(HEAD + f"log_retention = {written}\n", "t.toml").stacks[
            "demo"].apps["web"]
        assert app.log_retention == size
        assert app.definition_digest() == base.definition_digest()   # no restart for it
    err = _invalid(HEAD + 'log_retention = "512K"\n')
    assert err.data["problem"] == "must be 1MiB to 1TiB, not '512K'", err.data


def test_the_reference_names_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/config.md names every key the parser accepts: each table's allowed keys are
    collected while the reference's own examples parse."""
    import importlib
    allowed: set[str] = set()
    for name in ("config", "config_identity", "config_metrics", "config_retention",
                 "config_sockets", "jobs.config"):
        module = importlib.import_module(f"backend.{name}")
        real = module.check_keys

        def collect(t: Any, keys: Any, path: Any, why: str = "", real: Any = real) -> None:
            allowed.update(keys)
            real(t, keys, path, why)
        monkeypatch.setattr(module, "check_keys", collect)
    test_every_example_in_the_docs_parses()
    doc = (ROOT / "docs" / "config.md").read_text()
    assert len(allowed) > 40
    assert not sorted(k for k in allowed
                      if not any(f in doc for f in (f"`{k}`", f"{k} =", f"[{k}")))


@pytest.mark.parametrize("name", ["STOP", "sigcont", "SIGSTOP"])
def test_a_stop_signal_that_never_ends_a_process_is_refused(name: str) -> None:
    """SIGSTOP froze the app at every stop, which then waited out its timeout."""
    err = _invalid(HEAD + f'stop = {{ signal = "{name}" }}\n')
    assert err.data["key"] == "stacks.demo.apps.web.stop.signal", err.data
    assert "never ends a process" in err.data["problem"]


def test_an_argument_or_env_entry_no_exec_could_take_is_refused() -> None:
    """A 200,000-byte env value passed plan; every start then failed with 'Argument list
    too long' (the kernel's limit for one string is 131072 bytes with its NUL)."""
    big = "x" * 131072
    err = _invalid(HEAD + f'env = {{ BIG = "{big}" }}\n')
    assert (err.data["key"], err.data["line"]) == ("stacks.demo.apps.web.env.BIG", 3)
    assert "Linux execs no argument or environment entry over 131072 bytes" in \
        err.data["problem"]
    err = _invalid(f'[{APP}]\ncommand = ["x", "{big}"]\n')
    assert err.data["key"] == "stacks.demo.apps.web.command[1]", err.data
    parse_config(HEAD + f'env = {{ OK = "{"x" * (131072 - 4)}" }}\n', "t.toml")  # fits


@pytest.mark.parametrize(("url", "words"), [
    ("http://127.0.0.1:99999/", "the port of 'http://127.0.0.1:99999/' must be a number "
     "1..65535"),   # was: "must be an http:// URL with a host"
    ("http://127.0.0.1:0/", "must be a number 1..65535"),
    ("https://127.0.0.1/", "must be an http:// URL with a host"),
])
def test_a_bad_probe_url_says_what_is_wrong_with_it(url: str, words: str) -> None:
    with pytest.raises(ConfigInvalid) as info:
        parse_config('[stacks.s.apps.a]\ncommand = ["a"]\n'
                     f'ready = {{ kind = "http", url = "{url}" }}\n', "t.toml")
    assert words in info.value.data["problem"], info.value.data


@pytest.mark.parametrize("text", ["a = " + "[" * 1000 + "]" * 1000,
                                  "x = " + "{a=" * 400 + "1" + "}" * 400])
def test_a_config_nested_too_deeply_is_invalid_not_a_crash(text: str) -> None:
    """Was RecursionError: `tenure up` printed a traceback, `plan` answered INTERNAL."""
    with pytest.raises(ConfigInvalid) as e:
        parse_config(text, "/c/deep.toml")
    assert e.value.msg == "/c/deep.toml: arrays or tables nested too deeply to read"
