"""What the daemons do first: import asyncio without TLS, and build their argument parser
without shutil (:func:`daemon_arguments`); the backend also hashes without OpenSSL.

asyncio imports ssl when it is imported, to offer TLS transports; ssl maps libssl and
builds its enums, ~1.3 MiB resident and ~7 ms of every start of every daemon, and no
tenure daemon speaks TLS (they speak msgpack over Unix sockets). Marked absent while
asyncio is imported, ssl leaves asyncio without TLS support for good; unmarked
afterwards, a later ``import ssl`` (prometheus_client's exposition module, when the
backend's metrics are enabled) loads it as usual.

The guardian's prewarm of a standby (guardian.backendproc.PREWARM) does the same inline:
it runs no code of a release before that release is verified.

hashlib takes its functions from OpenSSL when it can (_hashlib), which maps libcrypto:
~3.3 MiB resident in each process. The owner and the guardian need libcrypto anyway
(Ed25519: protocol.ed25519); the backend only hashes a few kilobytes at a time (config
revisions, inventory digests), which CPython's own sha256 does as well, so it marks
_hashlib absent before anything imports hashlib and never maps libcrypto (unless its
metrics exporter loads ssl).

msgspec imports typing_extensions where it is installed (here a development tool's
dependency; not one of tenure's, so never in a sealed release: the daemons run without
it) and with it inspect, dis and tokenize, ~7 ms; the `tenure` command imports msgspec
without it to parse a config, as the backend that will parse it again does.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    import functools

__all__ = ["daemon_arguments", "help_formatter", "import_asyncio_without_tls",
           "import_msgspec_as_released", "use_builtin_hashes"]

HELP_WIDTH = 78


def import_asyncio_without_tls() -> None:
    """Import asyncio with ssl marked absent (a no-op once asyncio or ssl is loaded)."""
    _import_without("asyncio", "ssl")


def import_msgspec_as_released() -> None:
    """Import msgspec without typing_extensions, as a release's interpreter does (a no-op
    once either is loaded)."""
    _import_without("msgspec", "typing_extensions")


def _import_without(name: str, absent: str) -> None:
    """Import ``name`` with ``absent`` marked absent meanwhile, then unmarked: a later
    import of ``absent`` loads it as usual."""
    if name in sys.modules or absent in sys.modules:
        return
    sys.modules[absent] = None  # type: ignore[assignment]
    try:
        __import__(name)
    finally:
        if sys.modules.get(absent, "") is None:
            del sys.modules[absent]


def use_builtin_hashes() -> None:
    """Make hashlib use CPython's own hash functions, not OpenSSL's (a no-op once hashlib
    or _hashlib is loaded: what is loaded stays as it is)."""
    if "hashlib" in sys.modules or "_hashlib" in sys.modules:
        return
    sys.modules["_hashlib"] = None  # type: ignore[assignment]


def daemon_arguments(prog: str, description: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of a daemon's ``python -m``: its help is HELP_WIDTH columns
    wide. argparse asks the terminal for its width by importing shutil, which imports
    bz2 and lzma and maps their libraries: ~0.55 MiB resident and ~2 ms in every daemon,
    which prints help only when a person asks for it."""
    import argparse
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=help_formatter(HELP_WIDTH))


def help_formatter(width: int) -> functools.partial[argparse.HelpFormatter]:
    """argparse's HelpFormatter at ``width`` columns: given as ``formatter_class``, it
    keeps argparse from asking the terminal (and importing shutil) for every parser."""
    import argparse
    import functools
    return functools.partial(argparse.HelpFormatter, width=width)
