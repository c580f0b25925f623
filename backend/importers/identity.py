"""Who a program runs as, for the importers: a user and group given by name or by number,
and a umask, made into tenure's ``user``, ``group`` and ``umask`` (docs/config.md, "Users
and limits").

tenure.toml names accounts. A number is turned into the name it has on the machine that
imports (a note says so, since that machine may not be the one that runs the apps); a
number without a name here, or a name tenure.toml cannot hold, is reported instead.
"""

from __future__ import annotations

import grp
import pwd

from msgspec import Struct

from ..config_identity import parse_run_as
from ..config_values import Invalid

__all__ = ["Account", "account"]


class Account(Struct, frozen=True):
    """An account name, or why there is none, and a note when a number was resolved."""

    name: str | None
    problem: str = ""
    note: str = ""


def account(value: str | int, kind: str) -> Account:
    """``value`` (a name, or a uid/gid as an int or a string of digits) as the name of a
    ``kind`` ("user" or "group") on this machine."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        return _checked(value, kind)
    number = int(value)
    try:
        name = pwd.getpwuid(number).pw_name if kind == "user" else \
            grp.getgrgid(number).gr_name
    except (KeyError, OverflowError):
        return Account(None, f"{kind} id {number} has no name on this machine, and "
                             f"tenure.toml names the {kind}: write its name")
    found = _checked(name, kind)
    if found.name is None:
        return found
    return Account(name, note=f"{kind} id {number} is {name!r} on this machine, where it "
                              f"was imported; tenure.toml names the {kind}")


def _checked(name: str, kind: str) -> Account:
    try:
        parse_run_as({"user": name} if kind == "user" else {"user": "u", "group": name}, ())
    except Invalid as e:
        return Account(None, e.problem)
    return Account(name)

