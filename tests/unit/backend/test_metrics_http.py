"""The metrics listener over a real loopback socket: the exposition at /metrics for GET
and HEAD, 404 for any other path, 405 for other methods."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from backend.metrics import TenureCollector
from backend.metrics_http import serve
from backend.testing import free_port
from protocol.timing import Timings


def _serving(registry: CollectorRegistry) -> Iterator[int]:
    port = free_port()
    httpd, thread = serve("127.0.0.1", port, registry)
    try:
        yield port
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture()
def port() -> Iterator[int]:
    registry = CollectorRegistry(auto_describe=False)
    Counter("probe_hits", "a family to see in the answer", registry=registry).inc(3)
    yield from _serving(registry)


SNAP = {"epoch": 7, "owner_connected": True, "certificate_age_seconds": None,
        "log_dropped": None, "logs": None, "journal_bytes": None, "guardian": None,
        "rpc": Timings().snapshot(), "owner_calls": {},
        "apps": [{"key": "s/a/0", "stack": "s", "app": "a", "instance": 0,
                  "state": "ready", "up": True, "ready": True, "restarts": 2, "pid": 10,
                  "start_time_seconds": 1.0, "exits": {}, "cpu_seconds": 1.0,
                  "memory_bytes": 10, "memory_peak_bytes": 20, "oom_kills": None,
                  "pids": 1, "io_read_bytes": 0, "io_write_bytes": 0}]}


@pytest.fixture()
def tenure_port() -> Iterator[int]:
    """tenure's collector, registered as the listener does (it describes nothing)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TenureCollector(lambda: SNAP))
    yield from _serving(registry)


def _ask(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_get_metrics_is_the_exposition(port: int) -> None:
    status, headers, body = _ask(port, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    assert b"probe_hits_total 3.0" in body


def test_head_metrics_has_the_headers_and_no_body(port: int) -> None:
    _, _, get_body = _ask(port, "GET", "/metrics")
    status, headers, body = _ask(port, "HEAD", "/metrics")
    assert (status, body) == (200, b"")
    assert headers["content-type"].startswith("text/plain")
    assert int(headers["content-length"]) == len(get_body)


@pytest.mark.parametrize("path", ["/", "/metric", "/metrics/", "/favicon.ico", "/x?y=1"])
def test_other_paths_are_not_found(port: int, path: str) -> None:
    status, _, body = _ask(port, "GET", path)
    assert status == 404
    assert body == b"tenure serves its metrics at /metrics\n"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_any_other_method_is_refused(port: int, method: str) -> None:
    """OPTIONS was 200 with `Allow: OPTIONS,GET` (HEAD, which works, left out)."""
    status, headers, body = _ask(port, method, "/metrics")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert body == b"/metrics answers GET and HEAD\n"


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 on this host")
def test_the_ipv6_wildcard_leaves_ipv4_to_an_app() -> None:
    """``[::]:P`` was dual-stack and took 127.0.0.1:P too, which the config check (the
    families apart, as the owner binds app sockets) let an app's socket claim."""
    registry = CollectorRegistry(auto_describe=False)
    port = free_port()
    httpd, thread = serve("::", port, registry)
    try:
        assert httpd.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
        with socket.socket() as app:
            app.bind(("127.0.0.1", port))
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _families(body: bytes) -> dict[str, list[str]]:
    return {f.name: sorted({s.name for s in f.samples})
            for f in text_string_to_metric_families(body.decode())}


def test_name_filter_answers_the_families_named(tenure_port: int) -> None:
    """`?name[]=tenure_epoch` was 200 with an empty body: prometheus_client finds a
    collector by the names its describe() gives, and tenure's gives none."""
    status, _, body = _ask(tenure_port, "GET", "/metrics?name[]=tenure_epoch")
    assert status == 200 and _families(body) == {"tenure_epoch": ["tenure_epoch"]}
    _, _, body = _ask(tenure_port, "GET", "/metrics?name[]=tenure_app_restarts_total"
                                          "&name[]=tenure_owner_connected&name[]=nothing")
    assert _families(body) == {"tenure_app_restarts": ["tenure_app_restarts_total"],
                               "tenure_owner_connected": ["tenure_owner_connected"]}
    _, _, body = _ask(tenure_port, "GET", "/metrics?name[]=tenure_app_restarts")
    assert list(_families(body)) == ["tenure_app_restarts"]   # by the family's name too
    _, _, everything = _ask(tenure_port, "GET", "/metrics")
    assert len(_families(everything)) > 10


def _raw(port: int, request: bytes) -> tuple[bytes, bytes]:
    """(head, body) of the answer as sent: http.client drops a body sent to HEAD."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(request)
        got = b""
        while chunk := c.recv(65536):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("path", ["/", "/metric", "/x?y=1"])
def test_head_of_another_path_is_404_without_a_body(port: int, path: str) -> None:
    """The 404's text followed the headers, which a client then reads as the start of
    its next answer."""
    head, body = _raw(port, f"HEAD {path} HTTP/1.0\r\n\r\n".encode())
    assert head.startswith(b"HTTP/1.0 404 ") and body == b""
    not_here = b"tenure serves its metrics at /metrics\n"
    assert b"Content-Length: %d\r\n" % len(not_here) in head + b"\r\n"
    assert _raw(port, f"GET {path} HTTP/1.0\r\n\r\n".encode())[1] == not_here
