"""Targets name instances part by part, with globs; a target naming nothing is NOT_FOUND."""

from __future__ import annotations

import pytest

from backend.targets import (
    check_targets,
    exact_source,
    in_order,
    known_near,
    select,
    select_all,
    sources,
)
from protocol.errors import BadRequest, NotFound

KEYS = ["web/api/0", "web/api/1", "web/worker/0", "web/admin/0", "blog/web/0"]


@pytest.mark.parametrize(("target", "want"), [
    ("web", ["web/admin/0", "web/api/0", "web/api/1", "web/worker/0"]),
    ("web/api", ["web/api/0", "web/api/1"]),
    ("web/api/1", ["web/api/1"]),
    ("web/a*", ["web/admin/0", "web/api/0", "web/api/1"]),
    ("*/web", ["blog/web/0"]),
    ("*", KEYS),
    ("web/api/[0]", ["web/api/0"]),
    ("web/?orker/*", ["web/worker/0"]),
    ("we", []),            # a prefix is not a match
    ("web/api/2", []),
    ("web/*/0/x", None),   # four parts
])
def test_select(target: str, want: list[str] | None) -> None:
    if want is None:
        with pytest.raises(BadRequest):
            select(KEYS, target)
    else:
        assert select(KEYS, target) == sorted(want)


def test_a_glob_never_matches_across_a_slash() -> None:
    assert select(["a/b/0"], "a*") == ["a/b/0"]          # the stack part only
    assert select(["a/b/0"], "*/0") == []                 # "0" is not an app


@pytest.mark.parametrize("bad", ["", "a//b", "/a", "a/b/x", "a b", "a/\x1b", "x" * 301,
                                 # str.isdigit takes these; int() refused the first
                                 # (INTERNAL) and read the second as instance 3
                                 "a/b/\u00b2", "a/b/\u0663", "a/b/00", "a/b/01", "a/b/-1",
                                 # past the wire's integers: "message cannot be encoded"
                                 "a/b/99999999999999999999999"])
def test_malformed_targets_are_bad_requests(bad: str) -> None:
    with pytest.raises(BadRequest):
        select(KEYS, bad)
    assert check_targets([bad]) is not None


def test_select_all_names_every_target_that_names_nothing() -> None:
    assert select_all(KEYS, ["web/api/0", "blog"]) == ["blog/web/0", "web/api/0"]
    with pytest.raises(NotFound) as e:
        select_all(KEYS, ["web/api", "nosuch", "web/nope*"])
    assert e.value.data == {"targets": ["nosuch", "web/nope*"]}
    assert "'nosuch'" in e.value.msg and "'web/nope*'" in e.value.msg


def test_sources_are_as_coarse_as_the_target() -> None:
    assert sources(KEYS, "web") == [("web", None, None)]
    assert sources(KEYS, "web/a*") == [("web", "admin", None), ("web", "api", None)]
    assert sources(KEYS, "web/api/*") == [("web", "api", None)]   # all of the app
    assert sources(KEYS, "web/api/[01]") == [("web", "api", 0), ("web", "api", 1)]
    assert sources(KEYS, "nosuch") == []
    assert exact_source("gone/app/3") == ("gone", "app", 3)
    assert exact_source("gone") == ("gone", None, None)


def test_check_targets_bounds_the_list() -> None:
    assert check_targets(["web"] * 64) is None
    assert check_targets(["web"] * 65) is not None
    assert check_targets([3]) is not None


def test_a_target_without_a_glob_names_whole_parts_only() -> None:
    keys = ["web/api/1", "web/api/10", "web/apiv2/1", "webx/api/1"]
    assert select(keys, "web/api/1") == ["web/api/1"]
    assert select(keys, "web/api") == ["web/api/1", "web/api/10"]
    assert select(keys, "web/ap") == [] and select(keys, "web") == keys[:3]
    for target in ("web/api/1", "web/api", "web", "webx"):   # as the part-by-part match
        glob = target.replace("w", "[w]", 1)
        assert select(keys, target) == select(keys, glob), target


def test_keys_are_in_instance_number_order() -> None:
    keys = [f"web/api/{i}" for i in (10, 2, 0, 1)] + ["blog/web/0", "web/a/3"]
    assert in_order(keys) == ["blog/web/0", "web/a/3", "web/api/0", "web/api/1",
                              "web/api/2", "web/api/10"]
    assert select(keys, "web/api") == ["web/api/0", "web/api/1", "web/api/2", "web/api/10"]
    assert select_all(keys, ["web/api/1*", "blog"]) == ["blog/web/0", "web/api/1",
                                                          "web/api/10"]


@pytest.mark.parametrize(("target", "said"), [
    ("demox", "; the stacks are demo, shop"),
    ("demo/nope", "; stack demo has apps notifier, web, worker"),
    ("demo/web/7", "; demo/web has instance 0"),
    ("shop/api/5", "; shop/api has instances 0, 1, 2, 10"),   # by number
    ("nope/web/0", "; the stacks are demo, shop"),
    ("demo/*", ""), ("shop/api/[5-9]", ""),                   # a glob: nothing to add
])
def test_a_target_naming_nothing_is_told_what_there_is(target: str, said: str) -> None:
    keys = ["demo/web/0", "demo/worker/0", "demo/notifier/0", "shop/api/0", "shop/api/1",
            "shop/api/10", "shop/api/2"]
    assert known_near(keys, target) == said


def test_what_there_is_is_said_in_a_few_names() -> None:
    keys = [f"s/a{i}/0" for i in range(12)]
    assert known_near(keys, "s/b") == \
        "; stack s has apps a0, a1, a2, a3, a4, a5, a6, a7 and 4 more"
    assert known_near([], "s") == ""
    assert known_near(["s/a/0"], "t") == "; the stack is s"


def test_an_instance_with_a_leading_zero_is_told_how_it_is_written() -> None:
    assert check_targets(["a/b/01"]) == "'a/b/01': instance '01' is written without " \
        "leading zeros (1)"
