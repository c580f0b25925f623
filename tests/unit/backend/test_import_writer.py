"""The TOML writer: any config it is given parses back, with `tenure plan`'s parser, to
the same config (fuzzed), defaults are left out, and the text is stable."""

from __future__ import annotations

import tomllib

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import structs

from backend.config import canonical_form, parse_config
from backend.importers.model import Origin
from backend.importers.toml_writer import render_toml, toml_string
from backend.model import (
    MAX_STOP_WAIT_S,
    App,
    Backoff,
    Config,
    Health,
    HealthKind,
    Readiness,
    ReadyKind,
    RestartMode,
    RunAs,
    Stack,
    StartLimit,
    StopSpec,
)

_NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
                max_size=20)
_SECONDS = st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False)
_STOP_SECONDS = st.floats(min_value=0.001, max_value=MAX_STOP_WAIT_S, allow_nan=False,
                          allow_infinity=False)   # what the owner accepts
_ENV_KEY = _TEXT.filter(lambda k: k != "" and "=" not in k)
_RUN_AS = [RunAs(), RunAs(user="root", umask=0), RunAs(umask=0o777),
           RunAs(user="www", group="web", supplementary_groups=("ssl-cert", "a.b"),
                 umask=0o027)]


@st.composite
def _apps(draw: st.DrawFn, stack: str, name: str) -> App:
    initial = draw(st.sampled_from([0.0, 0.5, 1.0, 2.5]))
    ready = draw(st.sampled_from([
        Readiness(), Readiness(kind=ReadyKind.DELAY, delay=draw(_SECONDS)),
        Readiness(kind=ReadyKind.NOTIFY, timeout=draw(_SECONDS))]))
    health = draw(st.sampled_from([
        None, Health(kind=HealthKind.EXEC, command=("check", "--now"), failures=2)]))
    return App(
        name=name, stack=stack,
        command=tuple(draw(st.lists(_TEXT, min_size=1, max_size=4).filter(
            lambda c: c[0].strip()))),   # a blank program is refused (config_values)
        env=draw(st.dictionaries(_ENV_KEY, _TEXT, max_size=4)),
        cwd=draw(st.none() | _TEXT.map(lambda t: "/" + t)),
        instances=draw(st.integers(1, 64)), restart=draw(st.sampled_from(RestartMode)),
        backoff=Backoff(initial=initial, max=initial + draw(_SECONDS),
                        factor=draw(st.sampled_from([1.0, 1.5, 2.0])),
                        reset_after=draw(_SECONDS)),
        start_limit=StartLimit(burst=draw(st.integers(1, 100)), interval=draw(_SECONDS)),
        ready=ready, health=health,
        stop=StopSpec(signal=draw(st.sampled_from(["TERM", "INT", "QUIT", "HUP"])),
                      timeout=draw(_STOP_SECONDS), kill_after=draw(_STOP_SECONDS)),
        run_as=draw(st.sampled_from(_RUN_AS)))


@st.composite
def _configs(draw: st.DrawFn) -> Config:
    stacks = {}
    for stack in draw(st.sets(_NAMES, min_size=1, max_size=2)):
        names = sorted(draw(st.sets(_NAMES, min_size=1, max_size=3)))
        apps = {n: draw(_apps(stack, n)) for n in names}
        if len(names) > 1:  # the last app starts after the others
            last = names[-1]
            apps[last] = structs.replace(apps[last], after=tuple(names[:-1]))
        stacks[stack] = Stack(name=stack, apps=apps)
    return Config(stacks=stacks)


@settings(max_examples=100, deadline=None)
@given(_configs())
def test_written_text_parses_back_to_the_same_config(config: Config) -> None:
    text = render_toml(config, {}, ["header"])
    parsed = parse_config(text, "t.toml")
    assert canonical_form(parsed) == canonical_form(config)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",))))
def test_any_string_survives_as_a_toml_string(text: str) -> None:
    assert tomllib.loads(f"k = {toml_string(text)}")["k"] == text


def test_defaults_are_left_out_and_env_comes_last() -> None:
    app = App(name="web", stack="demo", command=("web", "--port", "80"),
              env={"B": "2", "A": "1"}, stop=StopSpec(signal="INT"),
              backoff=Backoff(reset_after=5.0))
    text = render_toml(Config(stacks={"demo": Stack("demo", {"web": app})}),
                       {"demo/web": Origin("Procfile", 3, "web")})
    assert text == (
        "# from Procfile:3 web\n"
        "[stacks.demo.apps.web]\n"
        'command = ["web", "--port", "80"]\n'
        "backoff = { reset_after = 5 }\n"
        'stop = { signal = "INT" }\n'
        "\n"
        "[stacks.demo.apps.web.env]\n"
        'A = "1"\n'
        'B = "2"\n')


def test_keys_that_are_not_bare_are_quoted() -> None:
    app = App(name="v2.api", stack="web", command=("x",), env={"a b": "1", "ok_1": "2"})
    text = render_toml(Config(stacks={"web": Stack("web", {"v2.api": app})}), {})
    assert '[stacks.web.apps."v2.api"]' in text
    assert '"a b" = "1"' in text and "ok_1 = " in text
    assert parse_config(text, "t").stacks["web"].apps["v2.api"].env == {"a b": "1", "ok_1": "2"}


def test_ready_kind_is_written_with_its_fields() -> None:
    app = App(name="a", stack="s", command=("x",),
              ready=Readiness(kind=ReadyKind.DELAY, delay=1.5))
    text = render_toml(Config(stacks={"s": Stack("s", {"a": app})}), {})
    assert 'ready = { kind = "delay", delay = 1.5 }' in text


def test_who_the_app_runs_as_is_written_with_an_octal_umask() -> None:
    app = App(name="a", stack="s", command=("x",),
              run_as=RunAs(user="www", group="web", umask=0o22))
    text = render_toml(Config(stacks={"s": Stack("s", {"a": app})}), {})
    assert 'command = ["x"]\nuser = "www"\ngroup = "web"\numask = "0022"\n' in text
    assert parse_config(text, "t").stacks["s"].apps["a"].run_as == app.run_as
