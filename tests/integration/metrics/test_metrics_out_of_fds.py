"""The metrics listener out of file descriptors: it used to spin a CPU without a word
(socketserver drops the failed accept() and selects again at once on the still queued
connection). Now it waits between attempts, says so once, and answers the scrape that
queued meanwhile once descriptors are free. A real listener in a process of its own
whose descriptors are exhausted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from backend.testing import free_port

# Serves metrics on argv[1], logs to argv[2], connects a scraper, exhausts its
# descriptors for 2 s and prints the CPU it used meanwhile, frees them, prints the answer.
CHILD = r"""
import logging, os, resource, socket, sys, time
from prometheus_client import CollectorRegistry
from backend.metrics_http import serve

logging.basicConfig(filename=sys.argv[2], level=logging.DEBUG)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
httpd, thread = serve("127.0.0.1", int(sys.argv[1]), CollectorRegistry())
scraper = socket.socket()
hoard = []
try:
    for _ in range(1000):
        try:
            hoard.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            break
    scraper.connect(("127.0.0.1", int(sys.argv[1])))   # queued by the kernel
    scraper.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    cpu = time.process_time()
    time.sleep(2)
    print(time.process_time() - cpu, flush=True)
finally:
    while hoard:
        os.close(hoard.pop())
scraper.settimeout(10)
print(scraper.recv(12).decode(), flush=True)
scraper.close()
httpd.server_close()
httpd.shutdown()
thread.join(10)
"""


def test_the_metrics_listener_out_of_fds_neither_spins_nor_floods(short_home: Path):
    log = short_home / "metrics.log"
    done = subprocess.run([sys.executable, "-c", CHILD, str(free_port()), str(log)],
                          capture_output=True, text=True, timeout=60, check=True)
    cpu, answer = done.stdout.split()[:2]
    lines = [line for line in log.read_text().splitlines() if "accept" in line]
    assert answer == "HTTP/1.0"
    assert float(cpu) < 0.5, "it spun while out of descriptors"  # it was 1.8 s of 2
    assert len(lines) == 1 and "Too many open files" in lines[0], lines
