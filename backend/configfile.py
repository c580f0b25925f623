"""Reading a config file: bounded, UTF-8, every failure a ConfigInvalid with the file,
key, line and problem (docs/config.md). Kept apart from the parser so that the CLI,
which sends the text to the backend, reads it without importing the parser."""

from __future__ import annotations

import os

from protocol.errors import ConfigInvalid

__all__ = ["check_size", "file_error", "read_config_text"]

# far above any real config (a supervisord setup of hundreds of programs is tens of KiB),
# well below a request frame, and a bound on what a path like /dev/zero makes us read
MAX_CONFIG_BYTES = 1 << 20


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
    read, is larger than MAX_CONFIG_BYTES or is not UTF-8."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise file_error(source, "", None, f"cannot read the file: {e.strerror or e}"
                           ) from None
    check_size(source, raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise file_error(source, "", line, "the file is not valid UTF-8") from None
