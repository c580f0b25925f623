"""CPU% from successive CPU-seconds samples (unknown until there are two), and the
owner's figures by process."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from backend.usage import FRESH_S, CpuRate, Usage, owner_metrics
from protocol.errors import TransportLost
from protocol.procfs import read_stat


def test_cpu_rate_is_the_slope_between_samples_of_one_process():
    r = CpuRate()
    assert r.rate((10, 1), 100.0, 5.0) is None  # first sample
    assert r.rate((10, 1), 102.0, 6.0) == 50.0
    assert r.rate((10, 1), 103.0, 9.0) == 300.0  # three cores
    assert r.rate((10, 2), 103.0, 1.0) is None  # same pid, another process


def test_cpu_rate_never_goes_negative_or_divides_by_zero():
    r = CpuRate()
    r.rate((1, 1), 10.0, 5.0)
    assert r.rate((1, 1), 10.0, 6.0) is None  # same instant: still the first sample's
    assert r.rate((1, 1), 11.0, 2.0) is None  # the counter went down: measured anew
    assert r.rate((1, 1), 12.0, 2.5) == 50.0
    assert r.rate((1, 1), 13.0, 2.5) == 0.0   # idle: a measured 0


def test_a_sample_seen_already_or_older_gives_the_last_rate_and_is_not_kept():
    r = CpuRate()
    r.rate((1, 1), 10.0, 5.0)
    assert r.rate((1, 1), 12.0, 6.0) == 50.0
    assert r.rate((1, 1), 12.0, 6.0) == 50.0   # a measurement answered twice
    assert r.rate((1, 1), 11.0, 5.5) == 50.0   # an older one (made for another client)
    assert r.rate((1, 1), 14.0, 10.0) == 200.0  # from the 12 s sample, not the 11 s one


def test_forgotten_processes_start_over():
    r = CpuRate()
    r.rate((1, 1), 1.0, 1.0)
    r.rate((2, 2), 1.0, 1.0)
    r.forget_except([(2, 2)])
    assert r.rate((1, 1), 2.0, 2.0) is None
    assert r.rate((2, 2), 2.0, 1.5) == 50.0


def _answer(at: float, cpu: float | None, mem: int | None) -> dict[str, Any]:
    return {"at": at, "launches": [
        {"pid": 7, "start_ticks": 70, "cpu_seconds": cpu, "memory_bytes": mem},
        {"pid": None, "start_ticks": None, "cpu_seconds": 1.0, "memory_bytes": 1}]}


def test_owner_figures_give_percent_and_memory_by_process_identity():
    u = Usage()
    assert u.from_owner(_answer(50.0, 2.0, 4096)) == {(7, 70): (None, 4096)}
    assert u.from_owner(_answer(51.0, 2.25, 8192)) == {(7, 70): (25.0, 8192)}
    assert u.from_owner(_answer(52.0, None, None)) == {(7, 70): (None, None)}


def test_an_answer_in_another_shape_gives_no_figures_and_raises_nothing():
    """An owner of another release answering in another shape: status still answers,
    without the figures it cannot read (TypeError, KeyError, AttributeError before)."""
    u = Usage(clock=lambda: 100.0)
    good = {"pid": 7, "start_ticks": 70, "cpu_seconds": 2.0, "memory_bytes": 4096}
    for answer in (None, {}, [], {"at": 1.0, "launches": None}, {"at": "x", "launches": []},
                   {"at": 1.0, "launches": [1, "x", None]},
                   {"at": 1.0, "launches": [{**good, "pid": [1]}, {**good, "pid": "7"},
                                            {**good, "start_ticks": None}]}):
        assert u.from_owner(answer) == {}, answer
    assert u.from_owner({"at": 50.0, "launches": [
        {**good, "cpu_seconds": float("nan"), "memory_bytes": "lots"}]}) == \
        {(7, 70): (None, None)}


def test_proc_fallback_reads_the_leader_and_refuses_a_pid_reuser():
    st = read_stat(os.getpid())
    assert st is not None
    cpu, rss = Usage().sample(os.getpid(), st.start_ticks)
    assert cpu is None and rss is not None and rss > 0   # one sample: no rate yet
    assert Usage().sample(os.getpid(), st.start_ticks + 1) == (None, None)


class _Owner:
    def __init__(self, fail: bool) -> None:
        self.fail, self.calls, self.params = fail, 0, []

    async def call(self, method: str, params: Any = None, timeout: float = 0) -> Any:
        self.calls += 1
        self.params.append(params)
        assert method == "metrics.read"
        if self.fail:
            raise TransportLost("gone", {"id": 1})
        return _answer(1.0, 1.0, 1)


def test_only_an_owner_without_the_capability_sends_status_to_proc():
    old = _Owner(fail=False)
    assert asyncio.run(owner_metrics(old, {"sockets": 1})) is None and old.calls == 0
    assert asyncio.run(owner_metrics(old, {"metrics": 2})) is None  # newer: not assumed
    assert asyncio.run(owner_metrics(old, {"metrics": 1}))["launches"][0]["pid"] == 7
    lost = asyncio.run(owner_metrics(_Owner(fail=True), {"metrics": 1}))
    assert lost is not None and lost["launches"] == []


def test_inspect_of_a_few_instances_asks_the_owner_for_just_those():
    owner = _Owner(fail=False)
    asyncio.run(owner_metrics(owner, {"metrics": 1}, ["s/a/0/3"]))
    asyncio.run(owner_metrics(owner, {"metrics": 1}))
    asyncio.run(owner_metrics(owner, {"metrics": 1}, usage_only=True))
    assert owner.params == [{"launch_keys": ["s/a/0/3"]}, None, {"usage_only": True}]


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_figures_stand_for_fresh_s_then_the_process_is_measured_again():
    clock = _Clock()
    u = Usage(clock)
    launches = {(7, 70): "s/a/0/1", (8, 80): "s/a/1/1"}
    assert u.stale(launches) == ["s/a/0/1", "s/a/1/1"]   # nothing measured yet
    u.from_owner(_answer(50.0, 2.0, 4096))              # measures (7, 70) only
    assert u.stale(launches) == ["s/a/1/1"] and u.recent(launches) == {(7, 70): (None, 4096)}
    clock.t += FRESH_S - 0.01
    assert u.stale(launches) == ["s/a/1/1"]
    clock.t += 0.01
    assert u.stale(launches) == ["s/a/0/1", "s/a/1/1"]
    u.from_owner(_answer(51.0, 2.5, 8192))
    assert u.recent([(7, 70)]) == {(7, 70): (50.0, 8192)}   # the rate between the two
    assert len(u) == 1
    u.forget_except([(8, 80)])
    assert u.recent(launches) == {} and u.stale({(7, 70): "k"}) == ["k"] and len(u) == 0


def test_an_owner_out_of_reach_leaves_what_was_measured_and_adds_nothing():
    u = Usage(_Clock())
    u.from_owner(_answer(50.0, 2.0, 4096))
    u.from_owner({"at": 51.0, "launches": []})   # owner_metrics' answer when it is away
    assert u.recent([(7, 70), (9, 90)]) == {(7, 70): (None, 4096)}


def test_a_busy_process_first_seen_after_a_handoff_is_unknown_not_idle():
    """A new backend's first measurement of a process that has long been busy said
    0.0% in status and top; with one sample there is no rate to give."""
    u = Usage(_Clock())
    busy = {"at": 50.0, "launches": [
        {"pid": 7, "start_ticks": 70, "cpu_seconds": 5000.0, "memory_bytes": 4096}]}
    assert u.from_owner(busy) == {(7, 70): (None, 4096)}
    busy["at"], busy["launches"][0]["cpu_seconds"] = 51.0, 5001.0
    assert u.from_owner(busy) == {(7, 70): (100.0, 4096)}
