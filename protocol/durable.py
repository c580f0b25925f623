"""Durable state on disk: atomic files, private SQLite databases, strict readers.

Writes are atomic: a file is written to a temporary sibling, fsynced, renamed over the
target and the directory fsynced, so a crash leaves either the old or the new content.
Readers never follow symlinks and fail closed: an unreadable file or a record with an
unknown format version raises ``StateCorrupt`` and is left in place for the operator.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import quote

from .errors import StateCorrupt, UnsafePath
from .storage import storage_failure

__all__ = ["atomic_write", "atomic_write_json", "check_private_file", "connect_read_only",
           "json_map", "last_words", "open_sqlite", "read_json", "read_private", "read_rows",
           "refuse_unprivate", "synced_transaction", "transaction", "write_new"]

MAX_FILE = 16 * 1024 * 1024
# Page cache per SQLite connection, in KiB. SQLite's default (2 MiB) fills as a
# database grows, so every long-lived connection of the owner and guardian gained up
# to 2 MiB of resident memory over hours; tenure's access is append-mostly and keyed,
# and a smaller cache costs no measurable speed (bench/journal.py, bench/owner.py).
CACHE_KIB = 512


def limit_cache(conn: sqlite3.Connection) -> None:
    """Bound ``conn``'s page cache to :data:`CACHE_KIB`."""
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _refuse_link(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is a symlink or not a regular file", {"path": path})


SQLITE_SIDECARS = ("-wal", "-shm", "-journal")   # what SQLite opens beside a database


def refuse_linked_db(db: str) -> None:
    """Refuse a database read straight from a home (``db``: the journal, backend.db,
    what :func:`read_rows` reads) when its directory is a symlink or not a directory,
    or it, or its -wal, -shm or -journal, is a symlink or not a regular file, as the
    daemon that writes it refuses them (owner.journaldb.open_private,
    protocol.sockets.check_private_dir).
    SQLite would follow a link, and print another home's lines as this one's, and
    would block for ever opening a FIFO. Owner and mode are not checked (those daemons'
    own checks are): root may read a user's home. What is missing, or not ours to look
    at, is left to the open that follows (it fails alike). Raises UnsafePath naming the
    path."""
    directory = os.path.dirname(db)
    for path, kind, what in ((directory, stat.S_ISDIR, "a directory"),
                             *((db + side, stat.S_ISREG, "a regular file")
                               for side in ("", *SQLITE_SIDECARS))):
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            raise UnsafePath(f"{path} is a symlink; tenure never reads state through one",
                             {"path": path})
        if not kind(mode):
            raise UnsafePath(f"{path} is not {what}", {"path": path})


def refuse_unprivate(path: str, st: os.stat_result | None = None) -> None:
    """What :func:`_refuse_link` refuses, in the same lstat(2) (or ``st``, the fstat of
    a descriptor opened with O_NOFOLLOW), and more: a private file (a database, the
    journal, a daemon's log, the guardian's diagnostics) is created 0600 by its daemon's
    user. One owned by another user, or readable or writable by others, holds what
    others may have read (app environments, what apps wrote) or written (the state the
    daemon acts on): refused, changing nothing, until someone who knows why it changed
    puts it right. Raises UnsafePath naming the path."""
    st = os.lstat(path) if st is None else st
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symlink", {"path": path})
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is not a regular file", {"path": path})
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"{path} is owned by uid {st.st_uid}, not {os.geteuid()}",
                         {"path": path, "uid": st.st_uid})
    if st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        raise UnsafePath(f"{path} is open to other users (mode {mode:04o}); find out who "
                         f"changed it, then chmod 600 it", {"path": path, "mode": f"{mode:04o}"})


def check_private_file(path: str | os.PathLike[str]) -> None:
    """What :func:`open_sqlite` refuses of the file at ``path`` before it opens it
    (:func:`refuse_unprivate`), read only: nothing is created or changed; a missing file
    is no refusal (open_sqlite creates it 0600). Raises UnsafePath naming the path."""
    p = os.fspath(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    refuse_unprivate(p, st)


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o600, *,
                 sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (temp + fsync + rename + fsync dir).

    ``sync=False`` leaves out both fsyncs, for a file that only reports on running
    daemons and is rewritten every second: a reader still sees the old or the new
    content after a crash of the writer; a crash of the machine may leave the old one.
    Raises UnsafePath when the target is a symlink or not a regular file.
    """
    p = os.fspath(path)
    _refuse_link(p)
    directory = os.path.dirname(os.path.abspath(p))
    tmp = f"{p}.tmp-{os.getpid()}"
    _fill(tmp, os.O_TRUNC, data, mode, sync)
    os.replace(tmp, p)
    if sync:
        _fsync_dir(directory)


def write_new(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` with ``data``, complete or not at all, and never over anything:
    a temporary sibling is written and fsynced, then hard-linked to ``path`` (link(2)
    fails when any entry is there, a dangling symlink included, where rename(2) would
    replace it), then unlinked, and the directory fsynced. A check for the path before
    writing leaves a window in which another process can create it; the link does not.

    Raises FileExistsError when ``path`` exists (whenever it appeared), and any other
    OSError of writing (the temporary file is removed either way).
    """
    p = os.fspath(path)
    tmp = f"{p}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    _write_exclusive(tmp, data, mode)
    try:
        os.link(tmp, p, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        # a file system without hard links (vfat, some FUSE): exclusive create still
        # never replaces, though a crash may then leave a partial file
        _write_exclusive(p, data, mode)
    finally:
        os.unlink(tmp)
    _fsync_dir(os.path.dirname(os.path.abspath(p)))


def _write_exclusive(path: str, data: bytes, mode: int) -> None:
    """Create ``path`` (never over an entry) with ``data``, fsynced; removed again when
    writing fails."""
    _fill(path, os.O_EXCL, data, mode, True)


def _fill(path: str, how: int, data: bytes, mode: int, sync: bool) -> None:
    """Create ``path`` (``how``: O_TRUNC or O_EXCL; never through a symlink) with
    ``data`` and ``mode``, fsynced with ``sync``; removed again when writing fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | how | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, mode: int = 0o600, *,
                      sync: bool = True, compact: bool = False) -> None:
    """Write ``obj`` as JSON (trailing newline) atomically: one key per line, keys
    sorted, or with ``compact`` on one line in the maps' own order, for files only
    programs read. json's C encoder only serves output without indentation, and sorting
    the keys costs it a third more (a handoff checkpoint of 200 instances, inside the
    pause: 9-10 ms to write indented, ~3 ms compact and sorted, fsyncs included;
    encoding alone ~1.2 -> ~0.9 ms unsorted)."""
    text = json.dumps(obj, sort_keys=not compact, indent=None if compact else 1)
    atomic_write(path, (text + "\n").encode(), mode, sync=sync)


def read_private(path: str | os.PathLike[str], max_size: int = MAX_FILE,
                 owners: tuple[int, ...] | None = None, tail: int | None = None, *,
                 denied: bool = False) -> bytes:
    """Read a regular file without following symlinks; with ``tail``, only its last
    ``tail`` bytes, whatever its size (a log that only grows).

    Raises FileNotFoundError when absent, UnsafePath for a symlink, a non-regular file,
    one writable by others, or (with ``owners``) one owned by any other uid or readable
    by group or others; StateCorrupt when larger than ``max_size`` (without ``tail``).
    A file this account may not open is UnsafePath too, or with ``denied`` the
    PermissionError itself: for a caller to which another account's private file is no
    concern (the guardian and the owner's record, in system scope).
    """
    p = os.fspath(path)
    try:   # O_NONBLOCK: a FIFO put there is refused below instead of waited on forever
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or \
                (denied and isinstance(exc, PermissionError)):
            raise
        raise UnsafePath(f"cannot open {p} safely: {exc.strerror}", {"path": p}) from None
    st = os.fstat(fd)   # before a file object: one of a directory cannot even be made
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022:
        os.close(fd)
        raise UnsafePath(f"{p} is not a private regular file", {"path": p})
    with os.fdopen(fd, "rb") as f:
        if owners is not None and (st.st_uid not in owners or st.st_mode & 0o077):
            raise UnsafePath(f"{p} is owned by uid {st.st_uid} with mode "
                             f"{stat.S_IMODE(st.st_mode):04o}; it must be 0600 and owned "
                             f"by uid {' or '.join(map(str, owners))}",
                             {"path": p, "uid": st.st_uid})
        if tail is not None:
            f.seek(max(0, st.st_size - tail))
            return f.read(tail)
        if st.st_size > max_size:
            raise StateCorrupt(f"{p} is {st.st_size} bytes; refusing to read it", {"path": p})
        return f.read(max_size + 1)


def last_words(path: str | os.PathLike[str], size: int = 2000, since: int = 0) -> str:
    """The last whole lines (at most ``size`` bytes) a daemon wrote to its log after byte
    offset ``since`` (where the log ended when it was started: what this run said before
    it ended, never an earlier run's lines), read as :func:`read_private` reads (no
    symlink followed); "" when there are none."""
    try:
        written = os.stat(path, follow_symlinks=False).st_size - since
        data = read_private(path, tail=min(size, max(written, 0)))
    except (OSError, UnsafePath):
        return ""
    if written > size:   # begun inside a line: a line is quoted whole or not at all
        data = data.partition(b"\n")[2]
    return data.decode(errors="replace")


def json_map(text: Any) -> dict[str, Any] | None:
    """The JSON object ``text`` holds (str or bytes, as a database column gives it), or
    None when it holds none: not JSON, not an object, nested too deeply, not text at
    all. For readers of stored values, which then fail closed their own way."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):   # UnicodeDecodeError is a ValueError
        return None
    return value if isinstance(value, dict) else None


def read_json(path: str | os.PathLike[str], kind: str, formats: tuple[int, ...] = (1,),
              max_size: int = MAX_FILE, *, denied: bool = False) -> dict[str, Any]:
    """Read a versioned JSON record ``{"kind": kind, "format": N, ...}``.

    Raises FileNotFoundError, UnsafePath, or StateCorrupt for bad JSON, another kind or an
    unknown format version; with ``denied``, PermissionError for a file this account may
    not open (:func:`read_private`). Never modifies the file.
    """
    p = os.fspath(path)
    raw = read_private(p, max_size, denied=denied)
    try:
        obj = json.loads(raw)
    except ValueError as exc:   # UnicodeDecodeError too
        raise StateCorrupt(f"{p} is not valid JSON: {exc}", {"path": p}) from None
    except RecursionError:
        raise StateCorrupt(f"{p} is not a {kind} record: nested too deeply",
                           {"path": p}) from None
    if not isinstance(obj, dict) or obj.get("kind") != kind:
        raise StateCorrupt(f"{p} is not a {kind} record", {"path": p})
    version = obj.get("format")
    if type(version) is not int or version not in formats:   # not true, not 1.0
        raise StateCorrupt(f"{p} has format {version!r}; this build reads "
                           f"{list(formats)}", {"path": p, "format": version})
    return obj


def open_sqlite(path: str | os.PathLike[str], kind: str, version: int, schema: str, *,
                synchronous: str = "FULL", wal: bool = False,
                check_same_thread: bool = True, way_out: str = "") -> sqlite3.Connection:
    """Open (creating with mode 0600) a private SQLite database of ``kind`` at ``version``.

    A new database gets ``schema`` and a ``meta`` row naming kind and version; an existing
    one must carry exactly that kind and version. Raises UnsafePath (symlink, not a
    regular file, owned by another user or open to others: see :func:`refuse_unprivate`),
    StorageFailed (the disk failed: full, read-only, I/O error) or StateCorrupt
    (unreadable, other kind, unknown version): for a damaged file (empty, unreadable)
    its message ends with ``way_out``, what the operator does about one; a file of
    another kind or version is not damaged (a newer tenure's, say) and gets none. A
    file this call created and could not finish (a full disk while its schema was
    written) is removed: it held nothing, and left empty it would be refused as
    truncated at every later open.
    """
    p = os.fspath(path)
    damaged = f"; {way_out}" if way_out else ""
    created = False
    with suppress(FileExistsError):   # a symlink exists too: refused below, not followed
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        created = True
    refuse_unprivate(p)
    if not created and os.path.getsize(p) == 0:
        # ours are never empty: the schema is written in the call that creates the file
        raise StateCorrupt(f"{p} is empty (truncated?); tenure does not create it again "
                           "over what it held: put the real file back, or move this one "
                           f"away if this {kind} is to start empty{damaged}", {"path": p})
    conn = None
    try:
        conn = sqlite3.connect(p, isolation_level=None, check_same_thread=check_same_thread)
        conn.execute(f"PRAGMA journal_mode={'WAL' if wal else 'DELETE'}")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        limit_cache(conn)
        _check_or_create(conn, p, kind, version, schema, damaged)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if created:
            _remove_unfinished(p)
        if not isinstance(exc, sqlite3.DatabaseError):
            raise
        raise storage_failure(exc, f"opening {p}", p) or \
            StateCorrupt(f"{p} is not a readable database: {exc}{damaged}",
                         {"path": p}) from None
    return conn


def _remove_unfinished(p: str) -> None:
    """Remove the database file :func:`open_sqlite` created at ``p`` and could not
    finish, with what SQLite put beside it; what cannot be removed stays (the next
    open says what it finds)."""
    for path in (p + "-journal", p + "-wal", p + "-shm", p):
        with suppress(OSError):
            os.unlink(path)


def read_rows(path: str, sql: str) -> list[tuple[Any, ...]] | None:
    """The rows of ``sql`` on the SQLite database at ``path``, read only: the database is
    never created or changed (of a WAL database SQLite may create the -wal and -shm
    index files, as for any reader). None when there is no such file. Raises UnsafePath
    (a symlink or not a regular file, its directory or a -wal, -shm, -journal beside
    it too: :func:`refuse_linked_db`), sqlite3.Error (a database it cannot read)."""
    refuse_linked_db(path)
    if not os.path.exists(path):
        return None
    conn = connect_read_only(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def connect_read_only(path: str) -> sqlite3.Connection:
    """A read-only connection to the SQLite database at ``path`` (never creating it).
    The URI is built from the quoted absolute path: a '?' or '#' in it would otherwise
    end the file name and start the URI's parameters (another file, not read only).
    Raises sqlite3.Error."""
    return sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True,
                           timeout=5.0)


def _check_or_create(conn: sqlite3.Connection, p: str, kind: str, version: int,
                     schema: str, damaged: str = "") -> None:
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
    if not has_meta:
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables:
            raise StateCorrupt(f"{p} has tables but no meta record{damaged}", {"path": p})
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.executemany("INSERT INTO meta VALUES (?, ?)",
                         [("kind", kind), ("format_version", str(version))])
        for statement in _split(schema):  # executescript would COMMIT our transaction
            conn.execute(statement)
        conn.execute("COMMIT")
        return
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("kind") != kind or meta.get("format_version") != str(version):
        # a kind and a format of their own: another program's or a newer tenure's file,
        # not damaged; one without them is
        named = isinstance(meta.get("kind"), str) and str(meta.get("format_version")).isdigit()
        raise StateCorrupt(
            f"{p} holds {meta.get('kind')!r} format {meta.get('format_version')!r}; this "
            f"build reads {kind!r} format {version}{'' if named else damaged}",
            {"path": p, "format": meta.get("format_version")})


def _split(schema: str) -> list[str]:
    return [s.strip() for s in schema.split(";") if s.strip()]



@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (BEGIN IMMEDIATE … COMMIT, ROLLBACK on any exception) on a
    connection opened by :func:`open_sqlite` (autocommit mode). Inside one already open
    it is a savepoint: an exception undoes its own writes only, and nothing is durable
    before the outer transaction commits. A COMMIT that fails is rolled back."""
    if db.in_transaction:
        db.execute("SAVEPOINT nested")
        try:
            yield db
        except BaseException:
            _undo(db, "ROLLBACK TO nested", "RELEASE nested")
            raise
        db.execute("RELEASE nested")
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        _undo(db, "ROLLBACK")
        raise
    try:
        db.execute("COMMIT")
    except BaseException:
        with suppress(sqlite3.Error):   # none left open if SQLite ended it
            db.execute("ROLLBACK")
        raise


def _undo(db: sqlite3.Connection, *statements: str) -> None:
    """Roll back what an exception interrupted, if a transaction is still open: SQLite
    ends one itself on SQLITE_FULL, and a ROLLBACK then fails ('no transaction is
    active'); that failure must not replace the error that ended it."""
    if db.in_transaction:
        with suppress(sqlite3.Error):
            for statement in statements:
                db.execute(statement)


@contextmanager
def synced_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """:func:`transaction` whose COMMIT is fsynced, on a WAL connection opened with
    ``synchronous=NORMAL`` (whose other commits survive a crash of the process but not
    of the machine). The fsync makes every earlier commit durable too: the WAL is one
    append-only file. Refuses to nest: the outer transaction's commit would decide."""
    if db.in_transaction:
        raise RuntimeError("a synced transaction cannot run inside another transaction")
    db.execute("PRAGMA synchronous=FULL")
    try:
        with transaction(db):
            yield db
    finally:
        db.execute("PRAGMA synchronous=NORMAL")
