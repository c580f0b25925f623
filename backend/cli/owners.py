"""Which uids the CLI accepts as owners of a daemon's socket.

Before connecting, a client checks that the socket belongs to a trusted uid: itself or
root by default. In system scope the guardian's and the backend's sockets belong to the
service account, which is neither; the CLI then also accepts the account that root
recorded for this home when it installed the services (units.trust: the record is
root's, in a directory only root can change). Nothing else widens the check.
"""

from __future__ import annotations

import os

__all__ = ["trusted_owners"]

RECORD_ENV = "TENURE_INSTALLATION_RECORD"  # another record file (tests, unusual layouts)


def trusted_owners(sock: str, home: str | os.PathLike[str]) -> tuple[int, ...] | None:
    """The uids that may own ``sock`` (under ``home``): None for the default (us and
    root), or those plus the recorded service account when the socket belongs to
    someone else and a record for ``home`` names that account. Raises nothing."""
    try:
        owner = os.stat(sock).st_uid
    except OSError:
        return None  # no socket: the connection attempt reports it
    if owner in (os.geteuid(), 0):
        return None
    from pathlib import Path  # only here: status of one's own home needs no pathlib

    from units.model import SYSTEM_CONFIG_DIR
    from units.trust import service_account_uid
    record = os.environ.get(RECORD_ENV) or str(SYSTEM_CONFIG_DIR / "installation.json")
    account = service_account_uid(Path(record), Path(home))
    return None if account is None else (os.geteuid(), 0, account)
