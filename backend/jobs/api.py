"""The ``job.*`` methods of the public API (a dispatch table merged into backend.api).

=================  =======  =================================================================
method             role     params → answer
=================  =======  =================================================================
``job.run``        admin    template ``s/name``, key?, args? → {job, deduplicated}
``job.list``       viewer   stack?, template?, state?, before?, limit? → {jobs}
``job.show``       viewer   id → the record, its history, why it waits, its journal source
``job.withdraw``   admin    id → the record (``withdrawn``; the same answer when retried)
``job.stop``       admin    id, timeout? → the record once it ended (or ``settled: false``)
``job.resolve``    admin    id, started, note? → the record
=================  =======  =================================================================

Errors: ``NOT_FOUND`` (no such record or template; ``job.list`` filtered by a stack or
template that neither the applied config nor any record has), ``CONFLICT`` (the key
holds another submission, or the request does not fit the record's state: the message
says why and ``data`` names the record), ``JOB_QUEUE_FULL`` (``job.run``: the template has
``max_pending`` open records; a key that has a record is answered instead),
``BAD_REQUEST`` (also ``job.run`` with a key starting ``schedule:``, reserved for scheduled
runs), and ``SHUTTING_DOWN`` during a handoff.

``job.resolve`` with ``started`` answers the record settled from the owner's evidence
when the owner proves how the start went (its pid and exit; ``resolution.proof`` says
what the owner showed) rather than from the decision (backend.jobs.resume.resolve).
"""

from __future__ import annotations

from typing import Any

import msgpack

from protocol.errors import BadRequest, NotFound
from protocol.schema import Field, Schema, check_int, check_key
from protocol.server import Call, Method

from . import machine as jm
from .resume import resolve
from .runner import JobRunner, journal_app
from .schedule import SCHEDULE_KEY_PREFIX

LIST_BYTES = 2 << 20
"""Bytes of records one job.list answer carries at most (at least one record): the
answer says ``more`` when it stopped there."""

__all__ = ["JobApi"]

_id = Field("id", int, check=check_int(1, 2**62))


ARGS_MAX = 256        # arguments a submission may append to its template's command
ARG_CHARS_MAX = 4096  # characters in each of them


def _args(v: Any) -> str | None:
    """What is wrong with a submission's ``args``, naming the limits and the first
    argument over them (counted from 1), or None."""
    limits = (f"must be at most {ARGS_MAX} arguments of at most {ARG_CHARS_MAX} characters "
              "each, without NUL")
    if len(v) > ARGS_MAX:
        return f"{limits}: {len(v)} given"
    for n, a in enumerate(v, 1):
        if not isinstance(a, str):
            return f"{limits}: argument {n} is not a string"
        if len(a) > ARG_CHARS_MAX:
            return f"{limits}: argument {n} has {len(a)} characters"
        if "\0" in a:
            return f"{limits}: argument {n} contains NUL"
    return None


def _states(v: Any) -> str | None:
    values = [s.value for s in jm.State]
    bad = [s for s in v.split(",") if s not in values]
    return None if not bad else (f"must be one or more states separated by ',' "
                                 f"({', '.join(values)}): {bad[0]!r} is not one")


S_RUN = Schema(Field("template", str, check=check_key(200)),
               Field("key", str, required=False, check=check_key(500)),
               Field("args", list, required=False, default=[], check=_args))
S_LIST = Schema(Field("stack", str, required=False), Field("template", str, required=False),
                Field("state", str, required=False, check=_states),
                Field("before", int, required=False, check=check_int(1, 2**63 - 1)),
                Field("limit", int, required=False, default=100, check=check_int(1, 10_000)))
S_ID = Schema(_id)
S_STOP = Schema(_id, Field("timeout", float, required=False, default=60.0,
                           check=check_int(0, 86400)))
S_RESOLVE = Schema(_id, Field("started", bool),
                   Field("note", str, required=False, default="", check=lambda v: None
                         if len(v) <= 2000 else "must be at most 2000 characters"))


def _refuse_reserved(key: str | None) -> None:
    """Raises BadRequest for a key in the schedule's own form: a client record holding
    a future due time's key would take that due time from the schedule (with other
    arguments, the schedule could not admit it at all)."""
    if key is not None and key.startswith(SCHEDULE_KEY_PREFIX):
        raise BadRequest(f"key {key!r}: keys starting with {SCHEDULE_KEY_PREFIX!r} are "
                         "reserved for scheduled runs; choose another key",
                         {"field": "key"})


class JobApi:
    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner

    def methods(self) -> dict[str, Method]:
        return {
            "job.run": Method(self.run, S_RUN),
            "job.list": Method(self.list, S_LIST, role="viewer"),
            "job.show": Method(self.show, S_ID, role="viewer"),
            "job.withdraw": Method(self.withdraw, S_ID),
            "job.stop": Method(self.stop, S_STOP),
            "job.resolve": Method(self.resolve, S_RESOLVE),
        }

    async def run(self, call: Call) -> Any:
        p = call.params
        if p["template"].count("/") != 1:
            raise BadRequest(f"{p['template']!r} is not STACK/JOB", {"field": "template"})
        _refuse_reserved(p["key"])
        rec, dup = self.runner.submit(p["template"], p["key"], list(p["args"]))
        return {"job": rec.to_wire(), "deduplicated": dup}

    async def list(self, call: Call) -> Any:
        p = call.params
        stack, template = p["stack"], p["template"]
        if template is not None and "/" in template:
            stack, template = template.split("/", 1)
        recs = self.runner.ledger.records(
            stack=stack, template=template,
            states=p["state"].split(",") if p["state"] is not None else (),
            before=p["before"], limit=p["limit"])
        if not recs:
            self._check_named(stack, template)
        jobs: list[dict[str, Any]] = []
        used = 0
        for r in recs:   # a record carries its arguments: five of 256 x 4 KiB filled a frame
            wire = self._live(r.id) or r.to_wire()
            used += len(msgpack.packb(wire))
            if jobs and used > LIST_BYTES:
                return {"jobs": jobs, "more": True}
            jobs.append(wire)
        return {"jobs": jobs, "more": False}

    def _check_named(self, stack: str | None, template: str | None) -> None:
        """Raises NotFound when the filter names no stack or template of the applied
        config and no record (a typo would otherwise read as "no jobs"), as a target
        that names nothing is refused by every command."""
        if stack is None and template is None:
            return
        config = self.runner.config()
        had = self.runner.ledger.templates()
        if template is None:
            known = stack in config.stacks or any(s == stack for s, _ in had)
        else:
            known = any((stack is None or s == stack) and t == template for s, t in had) \
                or any((stack is None or j.stack == stack) and j.name == template
                       for j in config.jobs())
        if not known:
            what = stack if template is None else f"{stack or '*'}/{template}"
            raise NotFound(f"{what!r} names no {'stack' if template is None else 'job template'}"
                           " of the applied config and no job record",
                           {"target": what})

    def _live(self, job_id: int) -> dict[str, Any] | None:
        rec = self.runner.records.get(job_id)
        return None if rec is None else rec.to_wire()

    async def show(self, call: Call) -> Any:
        rec = self.runner.record(call.params["id"])
        waiting = self.runner.waiting_for(rec) if rec.job.state is jm.State.ADMITTED \
            else None
        return {**rec.to_wire(), "waiting_for": waiting,
                "history": self.runner.ledger.history(rec.id),
                "journal": {"stack": rec.stack, "app": journal_app(rec.template),
                            "instance": rec.id}}

    async def withdraw(self, call: Call) -> Any:
        rec = self.runner.record(call.params["id"])
        self.runner.apply(rec, jm.Withdraw())
        return rec.to_wire()

    async def stop(self, call: Call) -> Any:
        rec = self.runner.stop(call.params["id"])
        ended = await self.runner.wait(lambda: rec.job.state not in jm.OPEN,
                                       call.params["timeout"])
        return {**rec.to_wire(), "settled": ended}

    async def resolve(self, call: Call) -> Any:
        p = call.params
        rec = await resolve(self.runner, p["id"], p["started"], p["note"],
                            f"uid {call.peer.uid}")
        return rec.to_wire()
