"""The backend generations' state on disk, checked as a generation's start checks it.

A generation refuses to start, changing nothing, when its state paths are not safe
(docs/state.md, "Rules that hold for every path"): a directory above the home that
someone else could change, a home or ``backend/`` that is a symlink, another user's or
open to others, a ``backend.db`` or ``recovery.db`` that is a symlink, not a regular
file, another user's or open to others. :func:`check_backend_state` is that check, read
only: the guardian runs it in a handoff's ``checked`` phase (guardian.handoff), so that
a handoff whose candidate would be refused aborts while the incumbent still serves
instead of retiring it first. The rules are the ones the generation's start applies as
it creates its directories and opens its databases (backend.generation):
:func:`protocol.sockets.check_private_dir`, :func:`protocol.sockets.check_ancestors` and
:func:`protocol.durable.refuse_unprivate`.
"""

from __future__ import annotations

from .durable import check_private_file
from .layout import Layout
from .sockets import check_private_tree

__all__ = ["check_backend_state"]


def check_backend_state(layout: Layout) -> None:
    """Raises UnsafePath (naming the path, what is wrong and how to put it right) for
    the first state path of ``layout`` a backend generation would refuse at its start.
    Read only: creates and changes nothing; what is missing passes (the generation
    creates it private). OSError when a path cannot be examined."""
    check_private_tree(layout.backend, root=layout.home)
    for db in (layout.backend_db, layout.recovery_db):
        check_private_file(db)
