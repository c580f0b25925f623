"""A config given as a pipe or FIFO (backend.configfile.read_config_text): a FIFO that
nobody writes to is CONFIG_INVALID after PIPE_WAIT_S, where `tenure plan --config FIFO`
blocked for good; a pipe that delivers (`--config <(...)`) is read whole, also in pieces
with pauses. Real FIFOs and pipes."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from backend import configfile
from protocol.errors import ConfigInvalid

CONFIG = b'[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_a_fifo_nobody_writes_to_is_refused_in_time(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(configfile, "PIPE_WAIT_S", 0.3)
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(ConfigInvalid) as refused:
        configfile.read_config_text(fifo)
    assert time.monotonic() - t0 < 5
    assert refused.value.msg == (f"{fifo}: a pipe or FIFO that did not deliver a whole "
                                 "config within 0.3 s: is what writes to it running, and "
                                 "does it close it?")


def test_a_pipe_is_read_until_its_writer_closes_it(tmp_path: Path) -> None:
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb") as f:
            for part in (CONFIG[:10], CONFIG[10:]):
                f.write(part)
                f.flush()
                time.sleep(0.1)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert configfile.read_config_text(f"/proc/self/fd/{r}") == CONFIG.decode()
    finally:
        writer.join()
        os.close(r)


def test_a_fifo_with_a_writer_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)

    def write() -> None:
        time.sleep(0.1)   # the reader opens first, and waits
        with open(fifo, "wb") as f:
            f.write(CONFIG)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert configfile.read_config_text(fifo) == CONFIG.decode()
    finally:
        writer.join()
