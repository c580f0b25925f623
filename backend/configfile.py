"""Reading a config file: bounded, UTF-8, every failure a ConfigInvalid with the file,
key, line and problem (docs/config.md). Kept apart from the parser so that the CLI,
which sends the text to the backend, reads it without importing the parser."""

from __future__ import annotations

import os
import select
import stat
import time

from protocol.errors import ConfigInvalid

__all__ = ["check_size", "file_error", "read_config_text"]

# far above any real config (a supervisord setup of hundreds of programs is tens of KiB),
# well below a request frame, and a bound on what a path like /dev/zero makes us read
MAX_CONFIG_BYTES = 1 << 20
# how long a config given as a pipe (`--config <(...)`, a FIFO) may take to come through
PIPE_WAIT_S = 10.0


def file_error(source: str, key: str, line: int | None, problem: str) -> ConfigInvalid:
    """``FILE:LINE: KEY: PROBLEM`` with each part in the error's data."""
    where = f"{source}:{line}" if line is not None else source
    what = f"{key}: {problem}" if key else problem
    return ConfigInvalid(f"{where}: {what}",
                         {"file": source, "key": key, "line": line, "problem": problem})


def check_size(source: str, data: str | bytes) -> None:
    """Raises ConfigInvalid when ``data`` is over MAX_CONFIG_BYTES (as UTF-8)."""
    if len(data.encode() if isinstance(data, str) else data) > MAX_CONFIG_BYTES:
        raise file_error(source, "", None, f"larger than {MAX_CONFIG_BYTES >> 20} MiB, "
                         "the most a config may be")


def read_config_text(path: str | os.PathLike[str]) -> str:
    """The text of the config file at ``path``. Raises ConfigInvalid when it cannot be
    read, is larger than MAX_CONFIG_BYTES or is not UTF-8, or, given as a pipe or FIFO,
    when it has not come through within PIPE_WAIT_S (a FIFO nobody writes to blocked
    the command for good)."""
    source = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO that has no writer does not wait for one
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                raw = _read_pipe(source, fd)
            else:
                os.set_blocking(fd, True)
                with os.fdopen(fd, "rb", closefd=False) as f:
                    raw = f.read(MAX_CONFIG_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise file_error(source, "", None, f"cannot read the file: {e.strerror or e}"
                         ) from None
    check_size(source, raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise file_error(source, "", line, "the file is not valid UTF-8") from None


def _read_pipe(source: str, fd: int) -> bytes:
    """What comes through the pipe or FIFO ``fd`` until its writer closes it (at most
    MAX_CONFIG_BYTES + 1), within PIPE_WAIT_S. Raises ConfigInvalid (nothing came, or it
    did not end, in time), OSError."""
    deadline = time.monotonic() + PIPE_WAIT_S
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_CONFIG_BYTES:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise file_error(source, "", None, "a pipe or FIFO that did not deliver a "
                             f"whole config within {PIPE_WAIT_S:g} s: is what writes to "
                             "it running, and does it close it?")
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            break   # its writer closed it: the whole config
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
